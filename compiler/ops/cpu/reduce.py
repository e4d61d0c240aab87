"""Reductions (sum, max, mean over any axis) on the host, in lane arrays of the machine's vector width.

The spec is ``compiler.ops.reduce.ReduceSpec`` (float32 only here), the tensor seen as ``[outer,
extent, inner]`` as there, with the same reference.

- ``inner == 1`` (the last axis): each output is a contiguous row. A block reduces
  ``rows_per_block`` rows, each swept by ``compiler.ops.cpu.lanes.sweep`` into ``lanes * unroll``
  running values, folded by a halving tree at the end (a sum of many terms is then a pairwise sum of
  lane partials).
- ``inner > 1`` (a middle or outer axis): vectors run across the contiguous trailing dimension. A
  block takes one ``outer`` index; for each tile of ``lanes * unroll`` consecutive outputs it walks the
  reduced axis, adding one row of the tile per step into the lane array (in registers throughout),
  then stores the tile. Outputs that do not fill a vector are one tile overlapping the previous one
  (recomputed, the same values) or, when ``inner`` is shorter than a vector, a simd loop of ``inner``.

With ``parts > 1`` (few outputs over a long axis: one block per output group would leave host
threads idle) the program has two launches: ``parts`` blocks per output group each reduce one slice
of the reduced axis into a float32 workspace ``partials[parts][outputs]``, then a final pass combines
each output's partials (and divides a mean). ``compensated`` sums keep each lane's rounding error
(Kahan, four flops a term): a lane may add millions of terms.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from compiler.cpu_device import CpuDevice
from compiler.ir import Buffer, Expr, blockIdx, f32, if_, kernel, let, lower, range_, registers, select
from compiler.ir.kernel import Kernel
from compiler.ops.cpu.lanes import fold, lane_array, sweep
from compiler.ops.cpu.vmath import vmax
from compiler.ops.reduce import ReduceSpec
from compiler.program import Launch, Program, Workspace
from compiler.space import Constraint, EmptySpaceError, Param, ScheduleDoesNotFitError, Space, schedule_values

#: Outputs one block of the final pass combines.
FINAL_CHUNK = 256


@dataclass(frozen=True)
class CpuReduceSchedule:
    lanes: int
    unroll: int
    rows_per_block: int
    parts: int
    compensated: bool

    @property
    def width(self) -> int:
        return self.lanes * self.unroll


def _blocks(spec: ReduceSpec, rows_per_block: int) -> int:
    """Blocks of the (first) launch per part."""
    return -(-spec.outer // rows_per_block) if spec.inner == 1 else spec.outer


def space(spec: ReduceSpec, device: CpuDevice, level: int) -> Space[CpuReduceSchedule]:
    """Level 1: the machine's width, 1 or 4 vectors, 1 or 3 rows a block (last axis), 1 or 4 parts,
    plain and compensated sums. Level 2 adds half the width, 2 and 8 vectors, 16 rows, 2..16 parts."""
    if spec.dtype != "float32":
        raise EmptySpaceError(f"cpu reduce takes float32 only, not {spec.dtype}")
    compensated = (False,) if spec.kind == "max" else (False, True)
    contiguous = spec.inner == 1
    if level == 1:
        choices: dict[str, tuple[Any, ...]] = {
            "lanes": (device.f32_lanes,), "unroll": (1, 4), "rows_per_block": (1, 3) if contiguous else (1,),
            "parts": (1, 4), "compensated": compensated}
    elif level == 2:
        choices = {"lanes": tuple(sorted({device.f32_lanes, max(4, device.f32_lanes // 2)})),
                   "unroll": (1, 2, 4, 8), "rows_per_block": (1, 4, 16) if contiguous else (1,),
                   "parts": (1, 2, 4, 8, 16), "compensated": compensated}
    else:
        raise ValueError(f"cpu reduce: unknown space level {level}; levels are [1, 2]")
    threads = device.logical_cores
    constraints: tuple[Constraint[CpuReduceSchedule], ...] = (
        Constraint("rows_per_block <= outputs", lambda s: s.rows_per_block == 1 or s.rows_per_block <= spec.outer),
        Constraint(f"parts > 1 only when the outputs fill fewer than 4 x {threads} blocks",
                   lambda s: s.parts == 1 or _blocks(spec, s.rows_per_block) < 4 * threads),
        Constraint("parts > 1 only when each part has a vector of the reduced axis",
                   lambda s: s.parts == 1 or s.parts * s.lanes <= spec.extent),
    )
    params = tuple(Param(name, values) for name, values in choices.items())
    return Space("cpu_reduce", params, lambda p: CpuReduceSchedule(**p), constraints,
                 default=schedule_values(default_schedule(spec, device)))


def default_schedule(spec: ReduceSpec, device: CpuDevice) -> CpuReduceSchedule:
    """Four vectors, a row a block, enough parts to give every thread two blocks, compensated sums
    over long axes."""
    parts = 1
    while _blocks(spec, 1) * parts < 2 * device.logical_cores and parts * 2 * device.f32_lanes <= spec.extent:
        parts *= 2
    return CpuReduceSchedule(lanes=device.f32_lanes, unroll=4, rows_per_block=1, parts=parts,
                             compensated=spec.kind != "max" and spec.extent >= 1 << 16)


@dataclass(frozen=True)
class _Accumulator:
    """A lane array for one kind of reduction, plain or compensated."""

    kind: str
    compensated: bool
    acc: Buffer
    lost: Buffer | None

    @staticmethod
    def declare(kind: str, compensated: bool, width: int) -> _Accumulator:
        identity = float("-inf") if kind == "max" else 0.0
        lost = lane_array("lost", width, 0.0) if compensated and kind != "max" else None
        return _Accumulator(kind, compensated, lane_array("acc", width, identity), lost)

    def add(self, lane: Expr | int, value: Expr, fresh: Expr | None = None) -> None:
        acc = self.acc
        if self.kind == "max":  # a value seen twice changes no max: no mask needed
            acc[lane] = vmax(acc[lane], value)
            return
        term = value if fresh is None else select(fresh, value, 0.0)
        if self.lost is None:
            acc[lane] = acc[lane] + term
            return
        corrected = let("term", term - self.lost[lane])
        updated = let("updated", acc[lane] + corrected)
        self.lost[lane] = (updated - acc[lane]) - corrected
        acc[lane] = updated

    def value(self, lane: Expr | int) -> Expr:
        return self.acc[lane] if self.lost is None else self.acc[lane] - self.lost[lane]

    def total(self, width: int) -> Expr:
        """Every lane combined (the compensations applied first)."""
        if self.lost is not None:
            for w in range_(width, name="w", simd=True):
                self.acc[w] = self.acc[w] - self.lost[w]
        return fold(self.acc, width, vmax if self.kind == "max" else lambda a, b: a + b)


def _slices(extent: int, parts: int, lanes: int) -> tuple[int, int, int]:
    """(slice length, parts used, length of the last slice): slices are whole vectors long."""
    per_part = -(-extent // parts)
    length = -(-per_part // lanes) * lanes
    used = -(-extent // length)
    return length, used, extent - (used - 1) * length


def build(spec: ReduceSpec, schedule: CpuReduceSchedule) -> Program:
    if spec.dtype != "float32":
        raise EmptySpaceError(f"cpu reduce takes float32 only, not {spec.dtype}")
    lanes, unroll = schedule.lanes, schedule.unroll
    if lanes < 1 or lanes & (lanes - 1) or unroll < 1 or unroll & (unroll - 1):
        raise ScheduleDoesNotFitError(f"cpu reduce: lanes and unroll must be powers of two, got {schedule}")
    if schedule.parts < 1 or schedule.rows_per_block < 1:
        raise ScheduleDoesNotFitError(f"cpu reduce: parts and rows_per_block must be positive, got {schedule}")
    length, parts, last = _slices(spec.extent, schedule.parts, lanes)
    outputs = spec.outer * spec.inner
    name = f"reduce_{spec.kind}_f32" + ("_partial" if parts > 1 else "")
    scale = 1.0 / spec.extent if spec.kind == "mean" and parts == 1 else None
    blocks = _blocks(spec, schedule.rows_per_block)
    with kernel(name, block=1, grid=(blocks, parts)) as k:
        shape = (spec.outer, spec.extent) if spec.inner == 1 else (spec.outer, spec.extent, spec.inner)
        x = k.tensor("x", f32, shape, const=True, overshoot=0)
        y = k.tensor("partials" if parts > 1 else "y", f32, (parts * outputs,), overshoot=0)
        start = let("start", blockIdx.y * length) if parts > 1 else 0
        out_base = blockIdx.y * outputs if parts > 1 else 0

        def store(q: Expr, value: Expr) -> None:
            y[out_base + q] = value if scale is None else value * scale

        def in_each_part(emit: Any) -> None:
            """``emit(count)`` for this block's slice: ``length`` elements, or ``last`` in the last part."""
            if parts == 1 or last == length:
                emit(length if parts > 1 else spec.extent)
                return
            with if_(blockIdx.y < parts - 1):
                emit(length)
            with if_(blockIdx.y == parts - 1):
                emit(last)

        if spec.inner == 1:
            _rows(spec, schedule, x, start, store, in_each_part)
        else:
            _tiles(spec, schedule, x, start, store, in_each_part)
    first = lower(k.kernel)
    if parts == 1:
        return Program.single(first)
    return Program(
        f"reduce_{spec.kind}_f32_split", ("x", "y"),
        (Launch(first, ("x", "partials")), Launch(_final_pass(spec, parts), ("partials", "y"))),
        (Workspace("partials", (parts, outputs), "float32"),),
    )


def _rows(spec: ReduceSpec, schedule: CpuReduceSchedule, x: Buffer, start: Expr | int, store: Any,
          in_each_part: Any) -> None:
    per_block = schedule.rows_per_block
    for rr in range_(per_block, name="rr"):
        row = let("row", blockIdx.x * per_block + rr)
        if per_block * -(-spec.outer // per_block) == spec.outer:
            _one_row(spec, schedule, x, row, start, store, in_each_part)
        else:
            with if_(row < spec.outer):
                _one_row(spec, schedule, x, row, start, store, in_each_part)


def _one_row(spec: ReduceSpec, schedule: CpuReduceSchedule, x: Buffer, row: Expr, start: Expr | int,
             store: Any, in_each_part: Any) -> None:
    width = schedule.width

    def reduce_slice(count: int) -> None:
        acc = _Accumulator.declare(spec.kind, schedule.compensated, width)
        sweep(count, width, schedule.lanes, lambda e: acc.add(e.lane, x[row, start + e.col], e.fresh), name="r")
        store(row, acc.total(width))

    in_each_part(reduce_slice)


def _tiles(spec: ReduceSpec, schedule: CpuReduceSchedule, x: Buffer, start: Expr | int, store: Any,
           in_each_part: Any) -> None:
    outer, inner = blockIdx.x, spec.inner

    def tile(first: Expr | int, width: int, count: int) -> None:
        """Outputs ``first .. first + width - 1`` of this block's row of outputs, over ``count`` steps."""
        acc = _Accumulator.declare(spec.kind, schedule.compensated, width)
        for r in range_(count, name="r"):
            for w in range_(width, name="w", simd=True):
                acc.add(w, x[outer, start + r, first + w])
        for w in range_(width, name="w", simd=True):
            store(outer * inner + first + w, acc.value(w))

    def reduce_slice(count: int) -> None:
        full, rest = divmod(inner, schedule.width)
        for t in range_(full, name="t"):
            tile(let("first", t * schedule.width), schedule.width, count)
        vectors, tail = divmod(rest, schedule.lanes)
        for v in range_(vectors, name="v"):
            tile(let("first", v * schedule.lanes + full * schedule.width), schedule.lanes, count)
        if tail and inner >= schedule.lanes:
            tile(inner - schedule.lanes, schedule.lanes, count)  # overlaps the last tile: same values
        elif tail:
            tile(0, inner, count)

    in_each_part(reduce_slice)


def _final_pass(spec: ReduceSpec, parts: int) -> Kernel:
    """Each block combines the partials of ``FINAL_CHUNK`` consecutive outputs, vectorised across them."""
    outputs = spec.outer * spec.inner
    chunk = min(FINAL_CHUNK, outputs)
    with kernel(f"reduce_{spec.kind}_f32_final", block=1, grid=-(-outputs // chunk)) as k:
        partials = k.tensor("partials", f32, (parts * outputs,), const=True, overshoot=0)
        y = k.tensor("y", f32, (outputs,), overshoot=0)
        base = let("base", blockIdx.x * chunk)
        acc = registers("acc", f32, (chunk,))
        for w in range_(chunk, name="w", simd=True):
            acc[w] = 0.0 if spec.kind != "max" else float("-inf")
        combine = vmax if spec.kind == "max" else (lambda a, b: a + b)
        whole = outputs % chunk == 0
        for p in range_(parts, name="p"):
            for w in range_(chunk, name="w", simd=True):
                q = base + w
                if whole:
                    acc[w] = combine(acc[w], partials[p * outputs + q])
                else:
                    with if_(q < outputs):
                        acc[w] = combine(acc[w], partials[p * outputs + q])
        for w in range_(chunk, name="w", simd=True):
            value = acc[w] * (1.0 / spec.extent) if spec.kind == "mean" else acc[w]
            if whole:
                y[base + w] = value
            else:
                with if_(base + w < outputs):
                    y[base + w] = value
    return lower(k.kernel)
