"""Packing launches of the cpu conv2d: im2col panels written straight from x, weights packed once.

The cpu conv2d is a packed GEMM (``compiler.ops.cpu.gemm``) whose operands are packed from the
convolution's tensors in the panel layout of CONTRACT.md: packed A is ``(batch_a, ceil(M/MR), K, MR)``
with element ``[b, p, kk, r] = A_b[p*MR + r, kk]``, packed B is ``(batch_b, ceil(N/NR), K, NR)`` with
``[b, q, kk, c] = B_b[kk, q*NR + c]``; both are zero past the matrix edge. The reduction index ``kk``
runs over the filter taps in the order of the weight's last three axes: ``(c, r, s)`` for NCHW,
``(r, s, c)`` for NHWC, so the weight is the ``[k, K]`` matrix it already is in memory.

The im2col matrix is never formed: each packed element of the input operand is read from x where the
tap lands (``h = p_i*stride_h - pad_h + r_i*dil_h``, likewise ``w``), or is zero where that falls in the
padding or past the last output pixel.

- NCHW: ``y[n]`` is the ``[k, p*q]`` matrix ``weight @ im2col(x[n])``. The weight is A (shared,
  ``batch_a = 1``), the image's patches are B, one batch per image. A panel of B is ``NR`` consecutive
  output pixels, and for stride 1 consecutive pixels of one output row read consecutive input columns:
  the lane loop is a masked contiguous load, gathered only where a panel wraps to the next row.
- NHWC: ``y`` is the ``[n*p*q, k]`` matrix ``im2col(x) @ weight^T`` (images folded into M: one batch, no
  edge tile per image, and ``y``'s rows are exactly those of the GEMM's C). The patches are A, the
  weight is B (``B[kk, j] = weight[j, kk]``). A panel of A is ``MR`` pixels; for each of its pixels and
  each filter tap ``(r, s)`` the ``c`` channels are a contiguous run of x, so the packer walks pixels
  outermost and channels innermost (contiguous reads, writes ``MR`` apart).

Each packer is one launch whose blocks (one host thread each) take ``panels`` consecutive panels.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from compiler.ir import (
    Buffer,
    Expr,
    Kernel,
    blockIdx,
    cast,
    f32,
    i32,
    i64,
    if_,
    kernel,
    let,
    logical_and,
    logical_not,
    lower,
    max_,
    min_,
    range_,
    select,
)
from compiler.ops.conv2d_spec import Conv2dSpec
from compiler.ops.cpu.gemm import APacker, BPacker, PanelRows, PanelSlice

#: The largest offset an ``int`` holds.
MAX_I32 = 2**31 - 1


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class ConvGemm:
    """The GEMM a convolution is, in the spec's layout: which operand is the image and the C strides."""

    spec: Conv2dSpec

    @property
    def image_is_b(self) -> bool:
        """NCHW packs the patches as B (pixels along N), NHWC as A (pixels along M)."""
        return self.spec.layout == "NCHW"

    @property
    def batch(self) -> int:
        return self.spec.n if self.image_is_b else 1

    @property
    def mnk(self) -> tuple[int, int, int]:
        """``(M, N, K)`` of one batch."""
        spec = self.spec
        pixels, taps = spec.p * spec.q, spec.c * spec.r * spec.s
        return (spec.k, pixels, taps) if self.image_is_b else (spec.n * pixels, spec.k, taps)

    @property
    def c_strides(self) -> tuple[int, int]:
        """``(c_batch_stride, c_row_stride)`` writing C straight into ``y``."""
        spec = self.spec
        pixels = spec.p * spec.q
        return (spec.k * pixels, pixels) if self.image_is_b else (spec.n * pixels * spec.k, spec.k)


def is_flat(spec: Conv2dSpec) -> bool:
    """A 1x1 filter at stride 1 without padding: the patches are the image itself (im2col is the identity)."""
    return (spec.r, spec.s, spec.stride, spec.padding) == (1, 1, (1, 1), (0, 0))


def _offset(value: Expr | int, elements: int) -> Expr:
    """``value`` in the integer type a flat offset into a tensor of ``elements`` needs (i64 past 2^31 - 1),
    so offsets computed by hand cannot wrap where the buffer's own indexing would not."""
    return cast(value, i64 if elements > MAX_I32 else i32)


def _overshoot(spec: Conv2dSpec, lanes: int) -> int:
    """Coordinates past an edge a packer forms under its predicate: the padding, plus a partial panel."""
    return max(spec.padding) + lanes * max(spec.stride) + lanes


def pack_weight_kernel(name: str, spec: Conv2dSpec, lanes: int, panels: int) -> Kernel:
    """Pack the weight, a ``[k, K]`` matrix, into ``lanes``-wide panels of output channels.

    The result ``wp`` is ``(1, ceil(k/lanes), K, lanes)``: ``wp[0, t, kk, l] = weight[t*lanes + l, kk]``.
    That is packed A for NCHW (``lanes = MR``) and packed B for NHWC (``lanes = NR``). Each lane is one
    weight row, read contiguously: the lanes are unrolled inside the ``kk`` loop, which the compiler
    vectorises with interleaved stores (a loop over lanes inside would read with stride K). Lanes past
    the last channel copy row 0, then are zeroed.
    """
    taps = spec.c * spec.r * spec.s
    tiles = _ceil_div(spec.k, lanes)
    grid = _ceil_div(tiles, panels)
    with kernel(name, block=1, grid=grid) as k:
        # overshoot=1: a flat extent of exactly 2^31 then takes 64-bit offsets (with 0, make_buffer
        # picks i32 for the offsets and then cannot spell the extent in it).
        weight = k.tensor("weight", f32, (spec.k * taps,), const=True, overshoot=1)
        wp = k.tensor("wp", f32, (tiles, taps, lanes), overshoot=0)
        for t_local in range_(panels, name="t"):
            tile = let("tile", blockIdx.x * panels + t_local)
            with if_(tile < tiles):
                elements = spec.k * taps
                rows = [let(f"row{lane}", select(tile * lanes + lane < spec.k,
                                                 _offset(tile * lanes + lane, elements) * taps, _offset(0, elements)))
                        for lane in range(lanes)]
                for kk in range_(taps, name="kk", simd=True):
                    for lane, row in enumerate(rows):
                        wp[tile, kk, lane] = weight[row + _offset(kk, elements)]
                for lane in range(lanes):
                    with if_(tile * lanes + lane >= spec.k):
                        for kk in range_(taps, name="kk", simd=True):
                            wp[tile, kk, lane] = 0.0
    return lower(k.kernel)


#: How the NCHW packer reads x: by runs of one output row (contiguous loads) or lane by lane (gathers).
PACK_MODES = ("runs", "gather")


def pack_nchw_patches_kernel(name: str, spec: Conv2dSpec, nr: int, panels: int, mode: str = "runs") -> Kernel:
    """Pack im2col of each NCHW image as B: ``bp[b, t, kk, l]`` is tap ``kk = (c, r, s)`` of pixel ``t*nr + l``.

    ``bp`` is ``(n, ceil(p*q/nr), c*r*s, nr)``; blocks are ``(panel group, image)``. Two ways to read x
    (``mode``), each faster on some shapes (measured; the schedule chooses):

    - ``runs``: a panel's pixels fall into runs that lie in one output row (a panel touches at most
      ``(nr - 2) // q + 2`` rows). In a run a tap reads x along one input row with stride ``stride_w``:
      contiguous loads for stride 1, and the padding tests are a few scalar bounds per run and tap.
      A 1x1 convolution with stride 1 and no padding is x itself: its run is the whole panel. Best
      where output rows are long against ``nr``.
    - ``gather``: every lane decodes its own pixel and tests its own bounds; the compiler turns the
      lane loop into a masked gather. No per-run overhead, so best on short output rows.
    """
    if mode not in PACK_MODES:
        raise ValueError(f"pack mode must be one of {PACK_MODES}, got {mode!r}")
    pixels = spec.p * spec.q
    tiles = _ceil_div(pixels, nr)
    groups = _ceil_div(tiles, panels)
    with kernel(name, block=1, grid=(groups, spec.n)) as k:
        x = k.tensor("x", f32, (spec.n, spec.c, spec.h * spec.w), const=True, overshoot=_overshoot(spec, nr))
        bp = k.tensor("bp", f32, (spec.n, tiles, spec.c * spec.r * spec.s, nr), overshoot=0)
        for t_local in range_(panels, name="t"):
            tile = let("tile", blockIdx.x * panels + t_local)
            with if_(tile < tiles):
                (_pack_runs if mode == "runs" else _pack_gathered)(spec, x, bp, blockIdx.y, tile, nr)
    return lower(k.kernel)


def nchw_patch_packer(spec: Conv2dSpec, nr: int, mode: str = "runs") -> BPacker:
    """The patches of each NCHW image as B of ``gemm.compute_packing_kernel``, packed slice by slice inside
    the compute launch: the im2col panels of a KC x NC slice are written into the thread's scratch just
    before the micro-kernels read them, while they sit in its caches, so the packed patches (``c*r*s``
    times the image's pixels) never make a trip through memory. ``x`` is declared as
    ``pack_nchw_patches_kernel`` declares it; ``mode`` reads it the same two ways, per filter tap of the
    slice (a tap ``kk`` of the slice is ``(c, r, s)`` decoded from ``k0 + kk``)."""
    if mode not in PACK_MODES:
        raise ValueError(f"pack mode must be one of {PACK_MODES}, got {mode!r}")

    def declare(kb: Any) -> Callable[[PanelSlice], None]:
        x = kb.tensor("x", f32, (spec.n, spec.c, spec.h * spec.w), const=True, overshoot=_overshoot(spec, nr))
        return functools.partial(_slice_runs if mode == "runs" else _slice_gathered, spec, x, nr)

    return declare


def _tap(spec: Conv2dSpec, at: PanelSlice, kk: Expr) -> tuple[Expr, Expr, Expr]:
    """The channel and filter row and column of tap ``k0 + kk`` (taps run over ``(c, r, s)``)."""
    tap = let("tap", at.k0 + kk)
    rs = let("rs", tap % (spec.r * spec.s))
    return let("c", tap // (spec.r * spec.s)), let("r", rs // spec.s), let("s", rs % spec.s)


def _slice_gathered(spec: Conv2dSpec, x: Buffer, nr: int, at: PanelSlice) -> None:
    (sh, sw), (ph, pw), (dh, dw) = spec.stride, spec.padding, spec.dilation
    for kk in range_(at.kc, name="kk"):
        c, r, s = _tap(spec, at, kk)
        for lane in range_(nr, name="l", simd=True):
            pixel = at.col + lane
            h = pixel // spec.q * sh - ph + r * dh
            w = pixel % spec.q * sw - pw + s * dw
            inside = logical_and(lane < at.cols, h >= 0, h < spec.h, w >= 0, w < spec.w)
            at.bw[at.slot, at.qq, kk, lane] = select(inside, x[at.batch, c, h * spec.w + w], 0.0)


def _slice_runs(spec: Conv2dSpec, x: Buffer, nr: int, at: PanelSlice) -> None:
    """As ``_pack_runs``, over the slice's taps: per run of the panel (pixels of one output row), every tap
    of the slice reads x along one input row."""
    pixels = spec.p * spec.q
    flat = is_flat(spec)
    run = pixels if flat else spec.q
    runs = 1 if flat else min(spec.p, (nr - 2) // spec.q + 2)
    for segment in range_(runs, name="seg"):
        row = let("row", at.col // run + segment)
        lo = let("lo", max_(0, row * run - at.col))
        count = let("count", min_(at.cols, (row + 1) * run - at.col) - lo)
        column = let("column", at.col + lo - row * run)
        for kk in range_(at.kc, name="kk"):
            if flat:
                for lane in range_(count, name="l", simd=True):
                    at.bw[at.slot, at.qq, kk, lo + lane] = x[at.batch, at.k0 + kk, column + lane]
            else:
                c, r, s = _tap(spec, at, kk)
                _slice_run(spec, x, at, kk, c, r, s, row, lo, count, column)
    for kk in range_(at.kc, name="kk"):
        for lane in range_(nr - at.cols, name="l", simd=True):
            at.bw[at.slot, at.qq, kk, at.cols + lane] = 0.0


def _slice_run(spec: Conv2dSpec, x: Buffer, at: PanelSlice, kk: Expr, c: Expr, r: Expr, s: Expr, row: Expr,
               lo: Expr, count: Expr, column: Expr) -> None:
    """Tap ``(c, r, s)`` for the ``count`` pixels of output row ``row`` from ``column`` on (see ``_pack_run``)."""
    (sh, sw), (ph, pw), (dh, dw) = spec.stride, spec.padding, spec.dilation
    h = let("h", row * sh - ph + r * dh)
    h_inside = let("h_inside", logical_and(h >= 0, h < spec.h))
    w0 = let("w0", column * sw - pw + s * dw)
    _tap_run(spec, x, at.batch, c, h, h_inside, w0, count,
             lambda lane, value: at.bw.__setitem__((at.slot, at.qq, kk, lo + lane), value))


def _pack_gathered(spec: Conv2dSpec, x: Buffer, bp: Buffer, image: Expr, tile: Expr, nr: int) -> None:
    (sh, sw), (ph, pw), (dh, dw) = spec.stride, spec.padding, spec.dilation
    for c in range_(spec.c, name="c"):
        for r in range_(spec.r, name="r"):
            for s in range_(spec.s, name="s"):
                kk = let("kk", (c * spec.r + r) * spec.s + s)
                for lane in range_(nr, name="l", simd=True):
                    pixel = tile * nr + lane
                    h = pixel // spec.q * sh - ph + r * dh
                    w = pixel % spec.q * sw - pw + s * dw
                    inside = logical_and(pixel < spec.p * spec.q, h >= 0, h < spec.h, w >= 0, w < spec.w)
                    bp[image, tile, kk, lane] = select(inside, x[image, c, h * spec.w + w], 0.0)


def _pack_runs(spec: Conv2dSpec, x: Buffer, bp: Buffer, image: Expr, tile: Expr, nr: int) -> None:
    pixels = spec.p * spec.q
    flat = is_flat(spec)
    run = pixels if flat else spec.q
    runs = 1 if flat else min(spec.p, (nr - 2) // spec.q + 2)
    first = let("first", tile * nr)
    valid = let("valid", min_(nr, pixels - first))
    for segment in range_(runs, name="seg"):
        row = let("row", first // run + segment)
        lo = let("lo", max_(0, row * run - first))
        count = let("count", min_(valid, (row + 1) * run - first) - lo)
        # Output column of the run's first pixel; the run's lanes are lo .. lo + count - 1.
        column = let("column", first + lo - row * run)
        for c in range_(spec.c, name="c"):
            if flat:
                for lane in range_(count, name="l", simd=True):
                    bp[image, tile, c, lo + lane] = x[image, c, column + lane]
            else:
                _pack_run(spec, x, bp, image, tile, c, row, lo, count, column)
    # Lanes past the last pixel (last panel only).
    for kk in range_(spec.c * spec.r * spec.s, name="kk"):
        for lane in range_(nr - valid, name="l", simd=True):
            bp[image, tile, kk, valid + lane] = 0.0


def _pack_run(spec: Conv2dSpec, x: Buffer, bp: Buffer, image: Expr, tile: Expr, c: Expr, row: Expr, lo: Expr,
              count: Expr, column: Expr) -> None:
    """Every tap of channel ``c`` for the ``count`` pixels of output row ``row`` from ``column`` on."""
    (sh, sw), (ph, pw), (dh, dw) = spec.stride, spec.padding, spec.dilation
    for r in range_(spec.r, name="r"):
        h = let("h", row * sh - ph + r * dh)
        h_inside = let("h_inside", logical_and(h >= 0, h < spec.h))
        for s in range_(spec.s, name="s"):
            kk = let("kk", (c * spec.r + r) * spec.s + s)
            w0 = let("w0", column * sw - pw + s * dw)

            def put(lane: Expr, value: Expr | float, kk: Expr = kk) -> None:
                bp[image, tile, kk, lo + lane] = value

            _tap_run(spec, x, image, c, h, h_inside, w0, count, put)


def _tap_run(spec: Conv2dSpec, x: Buffer, image: Expr, c: Expr, h: Expr, h_inside: Expr, w0: Expr, count: Expr,
             put: Callable[[Expr, Expr | float], None]) -> None:
    """One tap of ``count`` pixels of one output row: lane ``l`` reads x's row ``h``, column ``w0 + l*sw``
    of channel ``c``, and ``put(l, value)`` stores it.

    The run splits into lanes left of the image (zero), inside it (copied: an unconditional load, which
    the compiler vectorises as a plain contiguous load for stride 1; a conditional one becomes a masked
    gather) and right of it (zero).
    """
    sw = spec.stride[1]
    # Lanes l with 0 <= w0 + l*sw < w: from ceil(-w0 / sw) to ceil((w - w0) / sw); C division truncates,
    # so numerators are kept non-negative or the bound is clamped to [begin, count].
    begin = let("begin", select(h_inside, min_(count, max_(0, (sw - 1 - w0) // sw)), count))
    end = let("end", max_(begin, min_(count, (spec.w - w0 + sw - 1) // sw)))
    for lane in range_(begin, name="l", simd=True):
        put(lane, 0.0)
    for lane in range_(end - begin, name="l", simd=True):
        put(begin + lane, x[image, c, h * spec.w + w0 + (begin + lane) * sw])
    for lane in range_(count - end, name="l", simd=True):
        put(end + lane, 0.0)


def pack_nhwc_patches_kernel(name: str, spec: Conv2dSpec, mr: int, panels: int) -> Kernel:
    """Pack im2col of the NHWC input as A: ``ap[0, t, kk, l]`` is tap ``kk = (r, s, c)`` of pixel ``t*mr + l``.

    ``ap`` is ``(1, ceil(n*p*q/mr), r*s*c, mr)``; pixels are numbered across images. For each tap
    ``(r, s)`` every lane (a pixel) reads a contiguous run of ``c`` channels; the lanes are unrolled
    inside the channel loop, so one vector step loads ``mr`` channel vectors and stores them
    interleaved (``mr`` consecutive floats per channel), with no scatter. A lane outside the image
    copies channel run 0 (always inside x), then is overwritten with zeros.
    """
    pixels = spec.n * spec.p * spec.q
    tiles = _ceil_div(pixels, mr)
    grid = _ceil_div(tiles, panels)
    taps = spec.c * spec.r * spec.s
    with kernel(name, block=1, grid=grid) as k:
        x = k.tensor("x", f32, (spec.n * spec.h * spec.w * spec.c,), const=True, overshoot=1)  # see pack_weight_kernel
        ap = k.tensor("ap", f32, (tiles, taps, mr), overshoot=0)
        for t_local in range_(panels, name="t"):
            tile = let("tile", blockIdx.x * panels + t_local)
            with if_(tile < tiles):
                lanes = _nhwc_lanes(spec, tile * mr, mr)
                for r in range_(spec.r, name="r"):
                    for s in range_(spec.s, name="s"):
                        kk0 = let("kk0", (r * spec.s + s) * spec.c)

                        def put(c: Expr, lane: int, value: Expr | float, kk0: Expr = kk0, tile: Expr = tile) -> None:
                            ap[tile, kk0 + c, lane] = value

                        _nhwc_tap(spec, x, lanes, r, s, None, spec.c, put)
    return lower(k.kernel)


def nhwc_patch_packer(spec: Conv2dSpec, mr: int) -> APacker:
    """The NHWC patches as A of ``gemm.compute_packing_kernel``, packed panel by panel inside the compute
    launch: each block writes the MR pixels x KC taps of its panels into its thread's scratch just before
    its micro-kernels read them, so the packed patches (``r*s`` times the image) never go through memory.
    ``x`` is declared as ``pack_nhwc_patches_kernel`` declares it, and read the same way: a KC step covers
    parts of one or more filter taps ``(r, s)`` (the taps run over ``(r, s, c)``), and for each of them
    every lane copies a contiguous run of channels."""

    def declare(kb: Any) -> Callable[[PanelRows], None]:
        x = kb.tensor("x", f32, (spec.n * spec.h * spec.w * spec.c,), const=True, overshoot=1)
        return functools.partial(_panel_nhwc, spec, x, mr)

    return declare


def _panel_nhwc(spec: Conv2dSpec, x: Buffer, mr: int, at: PanelRows) -> None:
    lanes = _nhwc_lanes(spec, at.row0, mr)
    # The filter taps (r, s) the slice's columns k0 .. k0 + kc - 1 touch, and the channels of each.
    first = let("first_tap", at.k0 // spec.c)
    for t in range_((at.k0 + at.kc - 1) // spec.c - first + 1, name="t"):
        tap = let("tap", first + t)
        r, s = let("r", tap // spec.s), let("s", tap % spec.s)
        c_lo = let("c_lo", max_(0, at.k0 - tap * spec.c))
        count = let("count", min_(spec.c, at.k0 + at.kc - tap * spec.c) - c_lo)
        kk0 = let("kk0", tap * spec.c + c_lo - at.k0)

        def put(c: Expr, lane: int, value: Expr | float, kk0: Expr = kk0) -> None:
            at.aw[at.slot, at.pp, kk0 + c, lane] = value

        _nhwc_tap(spec, x, lanes, r, s, c_lo, count, put)


Lane = tuple[Expr, Expr, Expr, Expr]


def _nhwc_lanes(spec: Conv2dSpec, first: Expr, mr: int) -> list[Lane]:
    """For each of the ``mr`` pixels from ``first`` (numbered across images): the pixel, its image, and
    the input row and column its filter's first tap reads."""
    (sh, sw), (ph, pw) = spec.stride, spec.padding
    lanes: list[Lane] = []
    for lane in range(mr):
        pixel = let(f"pixel{lane}", first + lane)
        lanes.append((pixel, let(f"image{lane}", pixel // (spec.p * spec.q)),
                      let(f"h{lane}", pixel // spec.q % spec.p * sh - ph), let(f"w{lane}", pixel % spec.q * sw - pw)))
    return lanes


def _nhwc_tap(spec: Conv2dSpec, x: Buffer, lanes: list[Lane], r: Expr, s: Expr, c_lo: Expr | None, count: Expr | int,
              put: Callable[[Expr, int, Expr | float], None]) -> None:
    """Filter tap ``(r, s)`` of every lane, channels ``c_lo`` (0 where None) to ``c_lo + count``:
    ``put(c, lane, value)`` stores channel ``c_lo + c``. Every lane copies (the vectoriser interleaves the
    stores); then the lanes in the padding or past the last pixel, a few at the image's border, are
    zeroed: a select per element would keep the loop from vectorising. A lane outside reads channel run 0,
    always inside x."""
    pixels = spec.n * spec.p * spec.q
    elements = spec.n * spec.h * spec.w * spec.c
    dh, dw = spec.dilation
    reads = []
    for lane, (pixel, image, h0, w0) in enumerate(lanes):
        h, w = h0 + r * dh, w0 + s * dw
        inside = let(f"inside{lane}", logical_and(pixel < pixels, h >= 0, h < spec.h, w >= 0, w < spec.w))
        offset = ((_offset(image, elements) * spec.h + _offset(h, elements)) * spec.w + _offset(w, elements)) * spec.c
        if c_lo is not None:
            offset = offset + _offset(c_lo, elements)
        reads.append((inside, let(f"at{lane}", select(inside, offset, _offset(0, elements)))))
    for c in range_(count, name="c", simd=True):
        for lane, (_, at) in enumerate(reads):
            put(c, lane, x[at + _offset(c, elements)])
    for lane, (inside, _) in enumerate(reads):
        with if_(logical_not(inside)):
            for c in range_(count, name="c", simd=True):
                put(c, lane, 0.0)


def im2col(spec: Conv2dSpec, x: np.ndarray) -> np.ndarray:
    """The explicit im2col of ``x`` (numpy; the model the packers are tested against, and a bench peer).

    NCHW: ``(n, c*r*s, p*q)``, the B operand of each image; NHWC: ``(n*p*q, r*s*c)``, the A operand.
    """
    (sh, sw), (ph, pw), (dh, dw) = spec.stride, spec.padding, spec.dilation
    spans = (dh * (spec.r - 1) + 1, dw * (spec.s - 1) + 1)
    if spec.layout == "NCHW":
        padded = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
        # windows[n, c, p, q, r, s]
        windows = sliding_window_view(padded, spans, axis=(2, 3))[:, :, ::sh, ::sw, ::dh, ::dw]
        windows = windows[:, :, :spec.p, :spec.q]
        return windows.transpose(0, 1, 4, 5, 2, 3).reshape(spec.n, spec.c * spec.r * spec.s, spec.p * spec.q)
    padded = np.pad(x, ((0, 0), (ph, ph), (pw, pw), (0, 0)))
    # windows[n, p, q, c, r, s]
    windows = sliding_window_view(padded, spans, axis=(1, 2))[:, ::sh, ::sw, :, ::dh, ::dw]
    windows = windows[:, :spec.p, :spec.q]
    return windows.transpose(0, 1, 2, 4, 5, 3).reshape(spec.n * spec.p * spec.q, spec.r * spec.s * spec.c)


def pack_rows(a: np.ndarray, mr: int) -> np.ndarray:
    """Packed A of one ``[M, K]`` matrix: ``(ceil(M/mr), K, mr)``, zero rows past M."""
    m, k = a.shape
    padded = np.zeros((_ceil_div(m, mr) * mr, k), a.dtype)
    padded[:m] = a
    return padded.reshape(-1, mr, k).transpose(0, 2, 1)


def pack_columns(b: np.ndarray, nr: int) -> np.ndarray:
    """Packed B of one ``[K, N]`` matrix: ``(ceil(N/nr), K, nr)``, zero columns past N."""
    return pack_rows(b.T, nr)
