"""Softmax over the last axis: ``y[r, :] = exp(x[r, :] - max) / sum(exp(x[r, :] - max))``, f32 math.

A group of ``threads_per_row`` consecutive threads owns one row (32: a row per warp; more: a row per
several warps); a block holds ``rows_per_block`` groups. Threads read ``vector`` consecutive elements
at a time, the group sweeping the row in chunks of ``threads_per_row * vector`` columns.

Two ways through a row, chosen by the schedule's ``cache``:

- ``registers``: the row is read once into registers (at most 64 values per thread), then a max
  reduction, ``exp`` in place, a sum reduction, and the scaled write: one read and one write of the row.
- ``stream``: for rows of any length. One online pass keeps, per thread, the running max ``m`` and the
  sum ``s`` of ``exp(x - m)``, rescaling ``s`` by ``exp(m_old - m_new)`` whenever the max grows; the
  group merges its ``(m, s)`` pairs the same way, and a second pass writes ``exp(x - m) / s``. That is
  two reads and one write, where the textbook max / sum / write passes read the row three times.
  Rescaling is skipped when the max did not change, so a thread that saw no element (``m = -inf``,
  ``s = 0``) never evaluates ``exp(-inf - -inf)``. The running sum is compensated (Kahan): a thread
  may add tens of thousands of terms.

Rows and columns are numbered with 32-bit ints (at most ``MAX_ELEMENTS`` each); element offsets are
64-bit where the tensor needs it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

import numpy as np
from pydantic import ConfigDict, Field, model_validator

from compiler.device import DeviceSpec
from compiler.ir import (
    Buffer,
    Expr,
    assign,
    blockIdx,
    exp,
    f32,
    if_,
    kernel,
    let,
    logical_and,
    lower,
    max_,
    range_,
    registers,
    select,
    threadIdx,
    var,
)
from compiler.ir.types import scalar_type
from compiler.numeric import from_storage, to_storage
from compiler.ops.base import TensorSpec
from compiler.ops.rowwise import GroupLayout, compensated_add, group_allreduce, load_values, store_values
from compiler.ops.spec import DTYPE_BYTES, DType, OpSpec, check_tensor_bytes
from compiler.ops.templated import LazyTemplate, Template, TemplatedOperator, Workload
from compiler.program import Program
from compiler.space import Constraint, Param, ScheduleDoesNotFitError, Space, with_preferred_default

#: At most 2**30 rows and columns, so each coordinate (with a chunk of slack past the end) fits an int.
MAX_ELEMENTS = 1 << 30
#: Most values one thread keeps in registers for the ``registers`` path.
MAX_CACHED = 64
#: Registers a thread needs besides its cached values (indices, running values, addresses), estimated
#: from ptxas reports; with 1024 threads a block may give each only 64.
REGISTER_OVERHEAD = 24
NEG_INF = float("-inf")

Cache = Literal["registers", "stream"]


class SoftmaxSpec(OpSpec):
    """Softmax of each row of a row-major ``rows x cols`` tensor; the output has the input's dtype.

    >>> SoftmaxSpec(rows=3, cols=4099).canonical_json()
    '{"cols":4099,"dtype":"float32","op":"softmax","rows":3}'
    """

    model_config = ConfigDict(json_schema_extra={"examples": [
        {"op": "softmax", "rows": 4096, "cols": 1000},
        {"op": "softmax", "rows": 1536, "cols": 128, "dtype": "float16"},
    ]})

    op: Literal["softmax"] = "softmax"
    rows: int = Field(ge=1, le=MAX_ELEMENTS)
    cols: int = Field(ge=1, le=MAX_ELEMENTS)
    dtype: DType = "float32"

    @model_validator(mode="after")
    def _bounded(self) -> SoftmaxSpec:
        check_tensor_bytes("x", self.rows * self.cols, self.dtype)
        return self


@dataclass(frozen=True)
class SoftmaxSchedule:
    threads_per_row: int
    rows_per_block: int
    vector: int
    cache: Cache
    unroll: int

    @property
    def threads(self) -> int:
        return self.threads_per_row * self.rows_per_block

    def chunks(self, cols: int) -> int:
        """Chunks of ``threads_per_row * vector`` columns that cover a row."""
        return -(-cols // (self.threads_per_row * self.vector))


_LEVELS: dict[int, dict[str, tuple[Any, ...]]] = {
    1: {"threads_per_row": (32, 256), "rows_per_block": (1, 4), "vector": (1, 2, 4),
        "cache": ("registers", "stream"), "unroll": (1,)},
    2: {"threads_per_row": (8, 16, 32, 64, 128, 256, 512, 1024), "rows_per_block": (1, 2, 4, 8, 16),
        "vector": (1, 2, 4), "cache": ("registers", "stream"), "unroll": (1, 2, 4)},
}


def softmax_space(spec: SoftmaxSpec, device: DeviceSpec, level: int) -> Space[SoftmaxSchedule]:
    if level not in _LEVELS:
        raise ValueError(f"softmax: unknown space level {level}; levels are {sorted(_LEVELS)}")
    choices = _LEVELS[level]
    wide = DTYPE_BYTES[spec.dtype] == 4
    constraints: tuple[Constraint[SoftmaxSchedule], ...] = (
        Constraint(f"threads per block <= {device.max_threads_per_block}",
                   lambda s: s.threads <= device.max_threads_per_block),
        Constraint("threads per block is a multiple of 32", lambda s: s.threads % device.warp_size == 0),
        Constraint("cols divisible by vector", lambda s: spec.cols % s.vector == 0),
        Constraint("16-bit loads are pairs (vector <= 2)", lambda s: wide or s.vector <= 2),
        Constraint(f"registers path holds <= {MAX_CACHED} values per thread",
                   lambda s: s.cache == "stream" or s.chunks(spec.cols) * s.vector <= MAX_CACHED),
        Constraint("registers path fits the block's register file",
                   lambda s: s.cache == "stream"
                   or (s.chunks(spec.cols) * s.vector + REGISTER_OVERHEAD) * s.threads
                   <= device.max_registers_per_block),
        Constraint("unroll only applies to the stream path", lambda s: s.cache == "stream" or s.unroll == 1),
    )
    params = tuple(Param(name, values) for name, values in choices.items())
    space = Space("softmax", params, lambda p: SoftmaxSchedule(**p), constraints)
    return with_preferred_default(space, _preferred(spec.cols))


def _preferred(cols: int) -> Iterator[dict[str, object]]:
    """The default's candidates: the widest load, a row's threads each holding about 8 vectors (32 to
    1024 threads a row), blocks of 256 threads where rows are short, the row kept in registers, else
    streamed twice."""
    for vector in (4, 2, 1):
        wanted = -(-cols // (8 * vector))  # threads for about 8 vectors each
        per_row = min(1024, max(32, 1 << (wanted - 1).bit_length()))  # the power of two at or above
        rows = min(16, max(1, 256 // per_row))
        for cache in ("registers", "stream"):
            yield {"threads_per_row": per_row, "rows_per_block": rows, "vector": vector, "cache": cache,
                   "unroll": 1}


def _online_merge(a: tuple[Expr, ...], b: tuple[Expr, ...]) -> tuple[Expr, ...]:
    """Merge two (running max, sum of exp(x - max)) pairs; exp only where a max actually moved."""
    (ma, sa), (mb, sb) = a, b
    top = max_(ma, mb)
    return top, select(ma == top, sa, sa * exp(ma - top)) + select(mb == top, sb, sb * exp(mb - top))


def _max(a: tuple[Expr, ...], b: tuple[Expr, ...]) -> tuple[Expr, ...]:
    return (max_(a[0], b[0]),)


def _sum(a: tuple[Expr, ...], b: tuple[Expr, ...]) -> tuple[Expr, ...]:
    return (a[0] + b[0],)


def build_softmax(spec: SoftmaxSpec, schedule: SoftmaxSchedule) -> Program:
    if spec.cols % schedule.vector:
        raise ScheduleDoesNotFitError(f"softmax: cols {spec.cols} is not a multiple of vector {schedule.vector}")
    layout = GroupLayout(schedule.threads_per_row, schedule.rows_per_block, split_minor=True)
    dtype = scalar_type(spec.dtype)
    width, chunks = schedule.vector, schedule.chunks(spec.cols)
    grid = -(-spec.rows // schedule.rows_per_block)
    with kernel(f"softmax_{spec.dtype}", block=layout.threads, grid=grid) as k:
        # Loads and stores are under if (row < rows, col < cols): offsets stay inside each tensor.
        x = k.tensor("x", dtype, (spec.rows, spec.cols), const=True, overshoot=0)
        y = k.tensor("y", dtype, (spec.rows, spec.cols), overshoot=0)
        tid = threadIdx.x
        group, member = layout.group_and_member(tid)
        row = let("row", blockIdx.x * schedule.rows_per_block + group)

        def column(chunk: Expr) -> tuple[Expr, Expr]:
            col = let("col", (chunk * schedule.threads_per_row + member) * width)
            return col, logical_and(row < spec.rows, col < spec.cols)

        if schedule.cache == "registers":
            _registers_path(x, y, row, column, chunks, width, layout, tid)
        else:
            _stream_path(x, y, row, column, chunks, width, schedule.unroll, layout, tid)
    return Program.single(lower(k.kernel))


def _registers_path(x: Buffer, y: Buffer, row: Expr, column: Any, chunks: int, width: int,
                    layout: GroupLayout, tid: Expr) -> None:
    values = registers("values", f32, (chunks * width,))
    for c in range_(chunks, name="c", unroll=True):
        col, inside = column(c)
        for i in range(width):
            values[c * width + i] = NEG_INF
        with if_(inside):
            for i, v in enumerate(load_values(x, (row, col), width)):
                values[c * width + i] = v
    local_max = var("local_max", f32, NEG_INF)
    for j in range_(chunks * width, name="j", unroll=True):
        assign(local_max, max_(local_max, values[j]))
    (row_max,) = group_allreduce((local_max,), _max, layout, tid, name="mx")
    row_max = let("row_max", row_max)
    local_sum = var("local_sum", f32, 0.0)
    for j in range_(chunks * width, name="j", unroll=True):
        values[j] = exp(values[j] - row_max)
        assign(local_sum, local_sum + values[j])
    (total,) = group_allreduce((local_sum,), _sum, layout, tid, name="sm")
    scale = let("scale", 1.0 / total)
    for c in range_(chunks, name="c", unroll=True):
        col, inside = column(c)
        with if_(inside):
            store_values(y, (row, col), [values[c * width + i] * scale for i in range(width)])


def _stream_path(x: Buffer, y: Buffer, row: Expr, column: Any, chunks: int, width: int, unroll: int,
                 layout: GroupLayout, tid: Expr) -> None:
    running_max = var("running_max", f32, NEG_INF)
    running_sum = var("running_sum", f32, 0.0)
    lost = var("lost", f32, 0.0)  # compensation of running_sum
    for c in range_(chunks, name="c", unroll=unroll if unroll > 1 else False):
        col, inside = column(c)
        with if_(inside):
            loaded = [let(f"v{i}", v) for i, v in enumerate(load_values(x, (row, col), width))]
            top: Expr = loaded[0]
            for v in loaded[1:]:
                top = max_(top, v)
            new_max = let("new_max", max_(running_max, top))
            factor = let("factor", select(running_max == new_max, 1.0, exp(running_max - new_max)))
            assign(running_sum, running_sum * factor)
            assign(lost, lost * factor)
            added: Expr = exp(loaded[0] - new_max)
            for v in loaded[1:]:
                added = added + exp(v - new_max)
            compensated_add(running_sum, lost, added)
            assign(running_max, new_max)
    partial = let("partial", running_sum - lost)
    row_max, total = group_allreduce((running_max, partial), _online_merge, layout, tid, name="on")
    row_max = let("row_max", row_max)
    scale = let("scale", 1.0 / total)
    for c in range_(chunks, name="c", unroll=unroll if unroll > 1 else False):
        col, inside = column(c)
        with if_(inside):
            again = load_values(x, (row, col), width)  # the second pass reads the row again
            store_values(y, (row, col), [exp(v - row_max) * scale for v in again])


def softmax_inputs(spec: SoftmaxSpec, rng: np.random.Generator) -> dict[str, np.ndarray]:
    # A spread of several units makes the max subtraction matter and exp values span decades.
    return {"x": to_storage(rng.normal(0.0, 3.0, (spec.rows, spec.cols)), spec.dtype)}


def softmax_outputs(spec: SoftmaxSpec) -> tuple[TensorSpec, ...]:
    return (TensorSpec("y", (spec.rows, spec.cols), spec.dtype, reduction=spec.cols),)  # the row's sum of exp


def softmax_reference(spec: SoftmaxSpec, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """float64 softmax of the (already rounded) inputs, max-subtracted."""
    x = from_storage(inputs["x"], spec.dtype).reshape(spec.rows, spec.cols)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return {"y": e / e.sum(axis=1, keepdims=True)}


def softmax_flops(spec: SoftmaxSpec) -> int:
    """Five operations per element: max, subtract, exp, sum, scale (exp counted as one)."""
    return 5 * spec.rows * spec.cols


def softmax_min_bytes(spec: SoftmaxSpec) -> int:
    """The input read once and the output written once."""
    return 2 * spec.rows * spec.cols * DTYPE_BYTES[spec.dtype]


_TEMPLATE = Template(space=softmax_space, build=build_softmax)

OPERATOR = TemplatedOperator(
    name="softmax",
    spec_model=SoftmaxSpec,
    workload=Workload(softmax_inputs, softmax_outputs, softmax_reference, softmax_flops, softmax_min_bytes),
    templates=MappingProxyType({
        **dict.fromkeys([("cuda", d) for d in ("float32", "float16", "bfloat16")], _TEMPLATE),
        ("cpu", "float32"): LazyTemplate("compiler.ops.cpu.softmax"),
    }),
)
