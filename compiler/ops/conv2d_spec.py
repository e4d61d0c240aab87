"""The conv2d workload: spec, tensor shapes, random inputs, the float64 reference and the counts.

``y[n, k, p, q] = sum_{c, r, s} x[n, c, p * stride_h - pad_h + r * dil_h, q * stride_w - pad_w + s * dil_w]
* weight[k, c, r, s]``, where x reads as zero outside the image (zero padding). Layouts:

========  ================  ================  ================
layout    x                 weight            y
========  ================  ================  ================
NCHW      ``[n, c, h, w]``  ``[k, c, r, s]``  ``[n, k, p, q]``
NHWC      ``[n, h, w, c]``  ``[k, r, s, c]``  ``[n, p, q, k]``
========  ================  ================  ================

The NHWC weight keeps channels innermost like x, so both GEMM operands of the implicit GEMM are
contiguous along the reduction (``(r, s, c)`` order) and channel runs can be copied in wide chunks.
Output extents: ``p = (h + 2 * pad_h - dil_h * (r - 1) - 1) // stride_h + 1``, likewise ``q``.

>>> spec = Conv2dSpec(n=2, c=3, h=17, w=19, k=5, r=3, s=3, stride=(2, 2), padding=(1, 1))
>>> spec.p, spec.q, spec.gemm_shape
(9, 10, (180, 5, 27))
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Literal

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view
from pydantic import BeforeValidator, ConfigDict, Field, model_validator

from compiler.numeric import from_storage, to_storage
from compiler.ops.base import TensorSpec
from compiler.ops.spec import DTYPE_BYTES, DType, OpSpec, check_tensor_bytes

Layout = Literal["NCHW", "NHWC"]

#: Largest extent of one dimension (sizes beyond it are typing mistakes).
MAX_DIM = 1 << 24
#: Kernels number GEMM rows and taps with 32-bit ints: no GEMM dimension may reach this many. (Element
#: offsets into the tensors are 64-bit where a tensor needs it.)
MAX_ELEMENTS = 2**31 - 1

Pair = tuple[int, int]


def _both(value: object) -> object:
    """One int for both axes, as deep-learning frameworks take stride, padding and dilation."""
    return (value, value) if isinstance(value, int) and not isinstance(value, bool) else value


#: A pair of ints that JSON spells as a two-element list, or one int for both axes; always a pair once
#: parsed, so ``"padding": 1`` and ``"padding": [1, 1]`` are the same workload.
IntPair = Annotated[tuple[int, int], BeforeValidator(_both, json_schema_input_type=int | tuple[int, int]),
                    Field(strict=False)]


class Conv2dSpec(OpSpec):
    """A 2-D convolution (cross-correlation, as in deep-learning frameworks) with zero padding.

    The output has the input dtype; products are accumulated in float32.
    """

    #: ResNet-50 layers, NCHW and NHWC.
    model_config = ConfigDict(json_schema_extra={"examples": [
        {"op": "conv2d", "n": 1, "c": 64, "h": 56, "w": 56, "k": 64, "r": 3, "s": 3, "padding": [1, 1]},
        {"op": "conv2d", "n": 1, "c": 128, "h": 28, "w": 28, "k": 128, "r": 3, "s": 3, "padding": [1, 1],
         "layout": "NHWC", "dtype": "float16"},
    ]})

    op: Literal["conv2d"] = "conv2d"
    n: int = Field(ge=1, le=MAX_DIM)
    c: int = Field(ge=1, le=MAX_DIM)
    h: int = Field(ge=1, le=MAX_DIM)
    w: int = Field(ge=1, le=MAX_DIM)
    k: int = Field(ge=1, le=MAX_DIM)
    r: int = Field(ge=1, le=MAX_DIM)
    s: int = Field(ge=1, le=MAX_DIM)
    stride: IntPair = (1, 1)
    padding: IntPair = (0, 0)
    dilation: IntPair = (1, 1)
    layout: Layout = "NCHW"
    dtype: DType = "float32"

    @model_validator(mode="after")
    def _valid(self) -> Conv2dSpec:
        for name, pair, low in (("stride", self.stride, 1), ("padding", self.padding, 0),
                                ("dilation", self.dilation, 1)):
            if min(pair) < low or max(pair) > MAX_DIM:
                raise ValueError(f"{name} {list(pair)}: each entry must be in [{low}, {MAX_DIM}]")
        for axis, extent, out in (("h", self.h, self.p), ("w", self.w, self.q)):
            if out < 1:
                raise ValueError(f"output {'p' if axis == 'h' else 'q'} = {out}: the dilated filter does not fit "
                                 f"in {axis}={extent} with padding {list(self.padding)}")
        for label, shape in (("x", self.x_shape), ("weight", self.weight_shape), ("y", self.y_shape)):
            elements = int(np.prod(shape, dtype=object))
            check_tensor_bytes(label, elements, self.dtype)
        m, _, reduction = self.gemm_shape
        if max(m, reduction) > MAX_ELEMENTS:
            raise ValueError(f"implicit GEMM of {m} x {reduction} exceeds 32-bit indices")
        return self

    def _out(self, extent: int, axis: int, filt: int) -> int:
        span = self.dilation[axis] * (filt - 1) + 1
        return (extent + 2 * self.padding[axis] - span) // self.stride[axis] + 1

    @property
    def p(self) -> int:
        return self._out(self.h, 0, self.r)

    @property
    def q(self) -> int:
        return self._out(self.w, 1, self.s)

    @property
    def gemm_shape(self) -> tuple[int, int, int]:
        """``(M, N, K)`` of the implicit GEMM: output pixels, output channels, filter taps."""
        return self.n * self.p * self.q, self.k, self.c * self.r * self.s

    @property
    def x_shape(self) -> tuple[int, int, int, int]:
        n, c, h, w = self.n, self.c, self.h, self.w
        return (n, c, h, w) if self.layout == "NCHW" else (n, h, w, c)

    @property
    def weight_shape(self) -> tuple[int, int, int, int]:
        k, c, r, s = self.k, self.c, self.r, self.s
        return (k, c, r, s) if self.layout == "NCHW" else (k, r, s, c)

    @property
    def y_shape(self) -> tuple[int, int, int, int]:
        n, k, p, q = self.n, self.k, self.p, self.q
        return (n, k, p, q) if self.layout == "NCHW" else (n, p, q, k)


def conv2d_inputs(spec: Conv2dSpec, rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {
        "x": to_storage(rng.uniform(-1.0, 1.0, spec.x_shape), spec.dtype),
        "weight": to_storage(rng.uniform(-1.0, 1.0, spec.weight_shape), spec.dtype),
    }


def conv2d_outputs(spec: Conv2dSpec) -> tuple[TensorSpec, ...]:
    return (TensorSpec("y", spec.y_shape, spec.dtype, reduction=spec.gemm_shape[2]),)


def conv2d_nchw(x: np.ndarray, weight: np.ndarray, stride: Pair, padding: Pair, dilation: Pair) -> np.ndarray:
    """float64 convolution of ``x [n, c, h, w]`` with ``weight [k, c, r, s]``, giving ``[n, k, p, q]``.

    Pad, take every (dilated) window with a strided sliding view, contract channels and taps:
    ``windows[n, c, p, q, r, s] = padded[n, c, p * sh + r * dh, q * sw + s * dw]``.
    """
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    r, s = weight.shape[2:]
    padded = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    span = (dh * (r - 1) + 1, dw * (s - 1) + 1)
    windows = sliding_window_view(padded, span, axis=(2, 3))[:, :, ::sh, ::sw, ::dh, ::dw]
    return np.einsum("ncpqrs,kcrs->nkpq", windows, weight.astype(np.float64), optimize=True)


def conv2d_reference(spec: Conv2dSpec, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """float64 convolution of the (already rounded) inputs, in the spec's layout."""
    x = from_storage(inputs["x"], spec.dtype).reshape(spec.x_shape)
    weight = from_storage(inputs["weight"], spec.dtype).reshape(spec.weight_shape)
    if spec.layout == "NHWC":
        x, weight = x.transpose(0, 3, 1, 2), weight.transpose(0, 3, 1, 2)
    y = conv2d_nchw(x, weight, spec.stride, spec.padding, spec.dilation)
    return {"y": y if spec.layout == "NCHW" else y.transpose(0, 2, 3, 1)}


def conv2d_flops(spec: Conv2dSpec) -> int:
    m, n, k = spec.gemm_shape
    return 2 * m * n * k


def conv2d_min_bytes(spec: Conv2dSpec) -> int:
    """x and the weight read once, y written once: the memory roofline's floor."""
    elements = sum(int(np.prod(shape)) for shape in (spec.x_shape, spec.weight_shape, spec.y_shape))
    return elements * DTYPE_BYTES[spec.dtype]
