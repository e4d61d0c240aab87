"""conv2d as an implicit GEMM: where element ``(m, kk)`` of the im2col matrix lives in x, as kernel expressions.

``Y[M, N] = A[M, K] @ B[K, N]`` with ``M = n * p * q`` output pixels (``m = (n_i * p + p_i) * q + q_i``),
``N = k`` output channels and ``K = c * r * s`` filter taps, ordered ``(c, r, s)`` for NCHW and
``(r, s, c)`` for NHWC, the order of the weight's last three axes, so ``B[kk, j] = weight[j, kk]``
(B is a k-contiguous ``[k, K]`` matrix in both layouts). Nothing is materialised: the A operand
computes, for each element it fetches,

    h_i = p_i * stride_h - pad_h + r_i * dil_h        w_i = q_i * stride_w - pad_w + s_i * dil_w

and reads ``x`` there when ``0 <= h_i < h`` and ``0 <= w_i < w`` (and ``m < M``, ``kk < K``); otherwise the
element is zero. That one predicate covers padding, the ragged GEMM edges, stride and dilation alike.

Wide loads. A chunk of consecutive GEMM elements may be read as one vector (or one ``cp.async``) only
when it is consecutive, aligned and entirely inside or outside the image:

- NHWC: A is fetched along K; ``w`` consecutive taps are ``w`` consecutive channels of one pixel when
  ``c % w == 0`` (the chunk never crosses a pixel, and starts at a multiple of ``w`` elements).
- NCHW: the taps of one pixel are ``h * w`` elements apart, so A is fetched along M: ``w``
  consecutive output columns of one row read ``w`` consecutive input columns when ``stride_w == 1``,
  and stay aligned and on one side of each image edge when ``q``, ``w``, ``pad_w`` and every tap offset
  ``s_i * dil_w`` are multiples of ``w`` (e.g. any 1x1 stride-1 convolution with an even width). Other
  convolutions load element by element.

>>> from compiler.ops.conv2d_spec import Conv2dSpec
>>> a_chunk(Conv2dSpec(n=1, c=64, h=8, w=8, k=8, r=3, s=3, padding=(1, 1), layout="NHWC"), 8)
8
>>> pointwise = Conv2dSpec(n=1, c=64, h=56, w=56, k=8, r=1, s=1)
>>> a_chunk(pointwise, 8), a_chunk(pointwise.model_copy(update={"padding": (1, 1)}), 8)
(8, 1)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from compiler.ir import Buffer, Expr, logical_and, select
from compiler.ir.expr import as_expr
from compiler.ops.conv2d_spec import Conv2dSpec
from compiler.ops.gemm_mma import Source, clamp_count


def a_chunk(spec: Conv2dSpec, widest: int) -> int:
    """The widest chunk (``widest``, halving down to 1) of A elements that can move as one load."""
    width = widest
    while width > 1 and not _chunk_ok(spec, width):
        width //= 2
    return width


def _chunk_ok(spec: Conv2dSpec, width: int) -> bool:
    if spec.layout == "NHWC":
        return spec.c % width == 0
    taps_aligned = spec.s == 1 or spec.dilation[1] % width == 0
    return (spec.stride[1] == 1 and taps_aligned
            and all(extent % width == 0 for extent in (spec.q, spec.w, spec.padding[1])))


def b_chunk(spec: Conv2dSpec, widest: int) -> int:
    """The widest chunk of weight elements along K (rows of ``c * r * s`` elements stay aligned)."""
    width = widest
    while width > 1 and spec.gemm_shape[2] % width:
        width //= 2
    return width


@dataclass(frozen=True)
class ImplicitGemm:
    """The im2col view of ``x`` and the output view of ``y`` for one spec; methods build expressions."""

    spec: Conv2dSpec

    def a_k_contiguous(self, width: int) -> bool:
        """Whether A, read in chunks of ``width``, is fetched along K rather than along M.

        Along K only for NHWC chunks of several channels. Element-wise loads go along M in both layouts:
        a thread then revisits few output pixels (whose decomposition stays in registers across the K
        loop) and a warp's loads still land close together (pixels ``c * stride_w`` elements apart in
        NHWC, ``stride_w`` in NCHW).
        """
        return self.spec.layout == "NHWC" and width > 1

    def pixel(self, m: Any) -> tuple[Expr, Expr, Expr]:
        """``(n_i, p_i, q_i)`` of output pixel ``m``."""
        p, q = self.spec.p, self.spec.q
        return as_expr(m // (p * q)), as_expr(m // q % p), as_expr(m % q)

    def tap(self, kk: Any) -> tuple[Expr, Expr, Expr]:
        """``(c_i, r_i, s_i)`` of filter tap ``kk``."""
        c, r, s = self.spec.c, self.spec.r, self.spec.s
        if self.spec.layout == "NCHW":
            return as_expr(kk // (r * s)), as_expr(kk // s % r), as_expr(kk % s)
        return as_expr(kk % c), as_expr(kk // (s * c)), as_expr(kk // c % s)

    def patch(self, m: Any, kk: Any) -> tuple[tuple[Expr, ...], Expr]:
        """Indices into x of A's element ``(m, kk)`` and the predicate under which it is inside x."""
        spec = self.spec
        n_i, p_i, q_i = self.pixel(m)
        c_i, r_i, s_i = self.tap(kk)
        h_i = p_i * spec.stride[0] - spec.padding[0] + r_i * spec.dilation[0]
        w_i = q_i * spec.stride[1] - spec.padding[1] + s_i * spec.dilation[1]
        big_m, _, big_k = spec.gemm_shape
        inside = logical_and(m < big_m, kk < big_k, h_i >= 0, h_i < spec.h, w_i >= 0, w_i < spec.w)
        indices = (n_i, c_i, h_i, w_i) if spec.layout == "NCHW" else (n_i, h_i, w_i, c_i)
        return indices, inside

    def output(self, m: Any, j: Any) -> tuple[tuple[Expr, ...], Expr]:
        """Indices into y of GEMM element ``(m, j)`` and whether it exists."""
        n_i, p_i, q_i = self.pixel(m)
        indices = (n_i, as_expr(j), p_i, q_i) if self.spec.layout == "NCHW" else (n_i, p_i, q_i, as_expr(j))
        big_m, big_n, _ = self.spec.gemm_shape
        return indices, logical_and(m < big_m, j < big_n)

    def a_source(self, x: Buffer, m0: Expr, k0: Expr, width: int) -> Source:
        """The chunk source of A's tile at ``(m0, k0)`` for :func:`compiler.ops.gemm_mma.copy_tile`.

        Tile rows are m or k (see :meth:`a_k_contiguous`); a chunk is ``width`` elements along the other axis, wholly
        inside or outside x (see :func:`a_chunk`), so its count is ``width`` or 0. A chunk with nothing to
        read points at element 0.
        """

        along_k = self.a_k_contiguous(width)

        def source(row: Expr, col: Expr) -> tuple[Buffer, tuple[Any, ...], Expr]:
            m, kk = (m0 + row, k0 + col) if along_k else (m0 + col, k0 + row)
            indices, inside = self.patch(m, kk)
            return x, tuple(select(inside, i, 0) for i in indices), select(inside, width, 0)

        return source


def weight_source(weight: Buffer, col0: Expr, k0: Expr, width: int, spec: Conv2dSpec) -> Source:
    """The chunk source of B's tile: rows are output channels from ``col0``, columns taps from ``k0``.

    ``weight`` is viewed as the ``[k, c * r * s]`` matrix it is in memory.
    """
    _, big_n, big_k = spec.gemm_shape

    def source(row: Expr, col: Expr) -> tuple[Buffer, tuple[Any, ...], Expr]:
        j, kk = col0 + row, k0 + col
        row_ok, col_ok = j < big_n, kk < big_k
        count = select(row_ok, clamp_count(big_k, kk, width), 0)
        return weight, (select(row_ok, j, 0), select(col_ok, kk, 0)), count

    return source


@dataclass(frozen=True)
class PatchOperand:
    """A as an :class:`~compiler.ops.gemm_simt.OperandLoader`: element ``(m, kk)`` gathered from x.

    ``vector`` elements run along K for NHWC and along M for NCHW; it must satisfy :func:`a_chunk`.
    Scalar loads run along M in both layouts (see :meth:`ImplicitGemm.a_k_contiguous`).
    """

    gemm: ImplicitGemm
    x: Buffer
    vector: int = 1

    @property
    def k_contiguous(self) -> bool:
        return self.gemm.a_k_contiguous(self.vector)

    def load(self, m: Expr, k: Expr) -> tuple[Expr, Expr]:
        indices, inside = self.gemm.patch(m, k)
        if self.vector == 1:
            return self.x[indices], inside
        return self.x.load_vector(*indices, lanes=self.vector), inside
