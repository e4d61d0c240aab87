"""Lane arrays: vector accumulators for host kernels, as register buffers swept by simd loops.

A host kernel keeps ``width`` running values in a ``registers`` buffer and updates them in
``range_(width, simd=True)`` loops of compile-time extent: g++ turns each such loop into
``width / lanes`` vector instructions and keeps the buffer in vector registers for the whole sweep
(``width`` a multiple of the machine's lanes; several vectors give independent dependency chains).
At the end a tree of halving simd loops folds the lanes into one value.

``sweep`` walks the ``cols`` elements of one row in three parts, each element exactly once except
where the tail overlaps:

1. ``cols // width`` steps of ``width`` elements (lane ``w`` of the array takes column ``s*width + w``);
2. the remaining whole vectors of ``lanes`` elements (lanes ``0..lanes-1``);
3. the last ``cols % lanes`` columns: when the row has at least one vector, as one vector ending at
   the last column, overlapping columns already seen (``Tail.fresh`` tells the body which are new,
   so a sum adds each element once; a max or an idempotent store needs no mask); when the row is
   shorter than a vector, as a scalar loop into lane 0.

Every column index formed is inside the row: no masking of loads is needed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from compiler.ir import Buffer, Expr, let, range_, registers
from compiler.ir.types import f32

Combine = Callable[[Expr, Expr], Expr]


@dataclass(frozen=True)
class Element:
    """One element of a sweep: its column, the accumulator lane it updates, and (in an overlapping
    tail) whether it is seen for the first time."""

    col: Expr
    lane: Expr | int
    fresh: Expr | None = None


Body = Callable[[Element], None]


def lane_array(name: str, width: int, init: float) -> Buffer:
    """A register buffer of ``width`` f32 values, every one set to ``init``."""
    acc = registers(name, f32, (width,))
    for w in range_(width, name="w", simd=True):
        acc[w] = init
    return acc


def fold(acc: Buffer, width: int, combine: Combine) -> Expr:
    """Combine the ``width`` values of ``acc`` (a power of two) into ``acc[0]`` by halving, and return it.

    Each halving is a simd loop, so the wide steps are whole-vector operations; the result is the
    same tree on every machine width.
    """
    if width & (width - 1):
        raise ValueError(f"fold: width {width} is not a power of two")
    half = width // 2
    while half >= 1:
        for w in range_(half, name="w", simd=True):
            acc[w] = combine(acc[w], acc[w + half])
        half //= 2
    return acc[0]


def sweep(cols: int, width: int, lanes: int, body: Body, *, name: str = "s") -> None:
    """Emit the loops that visit every column of a row of ``cols`` (see the module docstring)."""
    if width % lanes or lanes < 1:
        raise ValueError(f"sweep: width {width} must be a multiple of lanes {lanes}")
    steps, rest = divmod(cols, width)
    vectors, tail = divmod(rest, lanes)
    if steps:
        for s in range_(steps, name=name):
            base = let(f"{name}_col", s * width)
            for w in range_(width, name="w", simd=True):
                body(Element(base + w, w))
    if vectors:
        for v in range_(vectors, name=f"{name}v"):
            base = let(f"{name}_vcol", v * lanes + steps * width)
            for w in range_(lanes, name="w", simd=True):
                body(Element(base + w, w))
    if not tail:
        return
    if cols >= lanes:
        first = cols - tail
        for w in range_(lanes, name="w", simd=True):
            col = let(f"{name}_tcol", w + (cols - lanes))
            body(Element(col, w, col >= first))
    else:
        for t in range_(cols, name=f"{name}t"):
            body(Element(t, 0))
