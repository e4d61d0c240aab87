"""The ``conv2d`` operator: an implicit GEMM on CUDA cores (float32) or tensor cores (float16, bfloat16).

Spec, reference and counts live in :mod:`compiler.ops.conv2d_spec`, the im2col view in
:mod:`compiler.ops.conv2d_gemm`, the kernels in one template module per dtype (``TEMPLATES``), each
providing ``space(spec, device, level)`` and ``build(spec, schedule)``.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from types import ModuleType
from typing import Any

import numpy as np

from compiler.device import DeviceSpec
from compiler.ops import conv2d_mma, conv2d_simt
from compiler.ops.base import TensorSpec
from compiler.ops.conv2d_spec import (
    Conv2dSpec,
    conv2d_flops,
    conv2d_inputs,
    conv2d_min_bytes,
    conv2d_outputs,
    conv2d_reference,
)
from compiler.source import KernelSource
from compiler.space import Space

#: Input dtype -> the template module computing it.
TEMPLATES: dict[str, ModuleType] = {
    "float32": conv2d_simt,
    "float16": conv2d_mma,
    "bfloat16": conv2d_mma,
}


def template_for(spec: Conv2dSpec) -> ModuleType:
    """The template module for ``spec.dtype``, or a ValueError naming the dtype."""
    try:
        return TEMPLATES[spec.dtype]
    except KeyError:
        known = ", ".join(sorted(TEMPLATES))
        raise ValueError(f"no conv2d template installed for dtype {spec.dtype!r}; available: {known}") from None


class Conv2d:
    """``y = conv2d(x, weight)`` (see :class:`Conv2dSpec`), dispatched to a template by dtype."""

    name = "conv2d"
    spec_model = Conv2dSpec

    def space(self, spec: Conv2dSpec, device: DeviceSpec, level: int) -> Space[Any]:
        space: Space[Any] = template_for(spec).space(spec, device, level)
        return space

    def build(self, spec: Conv2dSpec, schedule: Hashable) -> KernelSource:
        source: KernelSource = template_for(spec).build(spec, schedule)
        return source

    def inputs(self, spec: Conv2dSpec, rng: np.random.Generator) -> dict[str, np.ndarray]:
        return conv2d_inputs(spec, rng)

    def outputs(self, spec: Conv2dSpec) -> tuple[TensorSpec, ...]:
        return conv2d_outputs(spec)

    def reference(self, spec: Conv2dSpec, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return conv2d_reference(spec, inputs)

    def flops(self, spec: Conv2dSpec) -> int:
        return conv2d_flops(spec)

    def min_bytes(self, spec: Conv2dSpec) -> int:
        return conv2d_min_bytes(spec)


OPERATOR = Conv2d()
