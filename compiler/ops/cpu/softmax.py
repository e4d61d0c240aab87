"""Softmax on the host: one fused pass per row, rows over host threads, a vectorised exp.

The spec is ``compiler.ops.softmax.SoftmaxSpec`` (float32 only here) and the reference its workload's.
The grid is one block per ``rows_per_block`` consecutive rows, one thread each; OpenMP spreads the
blocks over the host's threads. Each row is swept three times while it sits in L1 (a row of 1000
floats is 4 KB), so memory sees one read of ``x`` and one write of ``y``:

1. the row's max, in a lane array of ``lanes * unroll`` running maxima (``unroll`` vectors give as
   many independent dependency chains), folded at the end;
2. ``e = exp(x - max)`` by ``compiler.ops.cpu.vmath.exp_f32`` (``nonpositive``: x - max <= 0), stored
   to ``y`` and summed in a second lane array;
3. ``y *= 1 / sum``.

Columns that do not fill a vector are one overlapping vector at the end of the row (see
``compiler.ops.cpu.lanes``): the max needs no mask, the sum adds only the fresh lanes, the scaling
selects them, and the stored exps are rewritten with the same values. Numpy makes several
single-threaded passes over memory for the same result.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from compiler.cpu_device import CpuDevice
from compiler.ir import Buffer, Expr, blockIdx, f32, if_, kernel, let, lower, range_, select
from compiler.ops.cpu.lanes import Element, fold, lane_array, sweep
from compiler.ops.cpu.vmath import exp_f32, vmax
from compiler.ops.softmax import SoftmaxSpec
from compiler.program import Program
from compiler.space import Constraint, EmptySpaceError, Param, ScheduleDoesNotFitError, Space, schedule_values


@dataclass(frozen=True)
class CpuSoftmaxSchedule:
    """``lanes`` f32 per vector (the machine's width, or half of it), ``unroll`` vectors of
    accumulators, ``rows_per_block`` rows per unit of work of a host thread."""

    lanes: int
    unroll: int
    rows_per_block: int

    @property
    def width(self) -> int:
        return self.lanes * self.unroll


def _lane_choices(device: CpuDevice) -> tuple[int, ...]:
    return tuple(sorted({device.f32_lanes, max(4, device.f32_lanes // 2)}))


def space(spec: SoftmaxSpec, device: CpuDevice, level: int) -> Space[CpuSoftmaxSchedule]:
    """Level 1: the machine's width, 1/2/4 vectors, 1 or 3 rows a block (3 leaves a partial block
    whenever rows is not a multiple of 3). Level 2 adds half the width, 8 vectors and 1..32 rows."""
    if spec.dtype != "float32":
        raise EmptySpaceError(f"cpu softmax takes float32 only, not {spec.dtype}")
    if level == 1:
        choices: dict[str, tuple[Any, ...]] = {"lanes": (device.f32_lanes,), "unroll": (1, 2, 4),
                                               "rows_per_block": (1, 3)}
    elif level == 2:
        choices = {"lanes": _lane_choices(device), "unroll": (1, 2, 4, 8), "rows_per_block": (1, 2, 4, 8, 16, 32)}
    else:
        raise ValueError(f"cpu softmax: unknown space level {level}; levels are [1, 2]")
    constraints: tuple[Constraint[CpuSoftmaxSchedule], ...] = (
        Constraint("rows_per_block <= rows", lambda s: s.rows_per_block == 1 or s.rows_per_block <= spec.rows),
    )
    params = tuple(Param(name, values) for name, values in choices.items())
    return Space("cpu_softmax", params, lambda p: CpuSoftmaxSchedule(**p), constraints,
                 default=schedule_values(default_schedule(device)))


def default_schedule(device: CpuDevice) -> CpuSoftmaxSchedule:
    """What runs untuned: the machine's width, two vectors, one row a block."""
    return CpuSoftmaxSchedule(lanes=device.f32_lanes, unroll=2, rows_per_block=1)


def build(spec: SoftmaxSpec, schedule: CpuSoftmaxSchedule) -> Program:
    if spec.dtype != "float32":
        raise EmptySpaceError(f"cpu softmax takes float32 only, not {spec.dtype}")
    lanes, unroll, per_block = schedule.lanes, schedule.unroll, schedule.rows_per_block
    if lanes < 1 or lanes & (lanes - 1) or unroll < 1 or unroll & (unroll - 1) or per_block < 1:
        raise ScheduleDoesNotFitError(f"cpu softmax: lanes and unroll must be powers of two and rows_per_block "
                                      f"positive, got {schedule}")
    rows, cols = spec.rows, spec.cols
    blocks = -(-rows // per_block)
    with kernel("softmax_f32", block=1, grid=blocks) as k:
        x = k.tensor("x", f32, (rows, cols), const=True, overshoot=0)
        y = k.tensor("y", f32, (rows, cols), overshoot=0)
        for rr in range_(per_block, name="rr"):
            row = let("row", blockIdx.x * per_block + rr)
            if blocks * per_block == rows:
                _row(x, y, row, cols, schedule)
            else:
                with if_(row < rows):
                    _row(x, y, row, cols, schedule)
    return Program.single(lower(k.kernel))


def _row(x: Buffer, y: Buffer, row: Expr, cols: int, schedule: CpuSoftmaxSchedule) -> None:
    width, lanes = schedule.width, schedule.lanes
    top = lane_array("top", width, float("-inf"))

    def take_max(e: Element) -> None:
        top[e.lane] = vmax(top[e.lane], x[row, e.col])  # overlapping lanes see a value twice: harmless

    sweep(cols, width, lanes, take_max, name="m")
    row_max = let("row_max", fold(top, width, vmax))
    total = lane_array("total", width, 0.0)

    def exp_and_sum(e: Element) -> None:
        value = let("ex", exp_f32(x[row, e.col] - row_max, nonpositive=True))
        y[row, e.col] = value  # rewritten with the same value where the tail overlaps
        total[e.lane] = total[e.lane] + (value if e.fresh is None else select(e.fresh, value, 0.0))

    sweep(cols, width, lanes, exp_and_sum, name="e")
    scale = let("scale", 1.0 / fold(total, width, lambda a, b: a + b))

    def normalise(e: Element) -> None:
        scaled = y[row, e.col] * scale
        y[row, e.col] = scaled if e.fresh is None else select(e.fresh, scaled, y[row, e.col])

    sweep(cols, width, lanes, normalise, name="n")
