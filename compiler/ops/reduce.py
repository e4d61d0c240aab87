"""Reductions (sum, max, mean) over one axis of a row-major tensor, accumulated in f32.

The tensor is seen as ``[outer, extent, inner]``: ``extent`` is the reduced axis, ``outer`` the product
of the axes before it and ``inner`` of those after. There are ``outer * inner`` outputs, numbered
row-major (output ``q`` is ``(q // inner, q % inner)``), each reduced by a group of ``split`` threads;
a block holds ``tile`` groups (see ``compiler.ops.rowwise`` for the group layouts and trees).

- ``inner == 1`` (the last axis): a group's threads are consecutive and read consecutive elements of
  their row, ``vector`` at a time.
- ``inner > 1`` (a middle or outer axis): consecutive threads take consecutive outputs, so at each
  step of the reduced axis they read consecutive inner elements: the loads coalesce. The members of
  a group are ``tile`` threads apart.

Each thread issues ``items`` loads per step before accumulating them, to keep several in flight.

With ``parts > 1`` (few outputs, a long reduced axis: one block per output group would leave most SMs
idle), the program has two launches: ``parts`` blocks per output group each reduce one slice of the
axis into a float32 workspace of partials, then a final pass combines each output's partials (and
divides a mean). Partials stay in f32, so the only rounding added is one f32 combine per part.
Sums are compensated (Kahan) per thread, since one thread may add millions of terms.
A negative ``axis`` is normalised when the spec is validated (``-1`` is the last axis), so both
spellings name one workload.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from math import prod
from types import MappingProxyType
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import ConfigDict, Field, model_validator

from compiler.device import DeviceSpec
from compiler.ir import (
    Expr,
    assign,
    blockIdx,
    cast,
    f32,
    if_,
    kernel,
    let,
    logical_and,
    lower,
    max_,
    range_,
    registers,
    threadIdx,
    var,
)
from compiler.ir.kernel import Kernel
from compiler.ir.types import scalar_type
from compiler.numeric import from_storage, to_storage
from compiler.ops.base import TensorSpec
from compiler.ops.rowwise import GroupLayout, Tree, compensated_add, group_allreduce, load_values
from compiler.ops.spec import DTYPE_BYTES, DType, OpSpec, check_tensor_bytes
from compiler.ops.templated import LazyTemplate, Template, TemplatedOperator, Workload
from compiler.program import Launch, Program, Workspace
from compiler.space import Constraint, Param, ScheduleDoesNotFitError, Space, with_preferred_default

#: Coordinates are 32-bit ints: the reduced extent and the number of outputs are at most 2**30, so
#: each (with a step of slack past the end) fits. Offsets are 64-bit where the tensor needs it.
MAX_ELEMENTS = 1 << 30
MAX_RANK = 8

Kind = Literal["sum", "max", "mean"]


class ReduceSpec(OpSpec):
    """``kind`` over axis ``axis`` of a ``shape`` tensor; the output drops that axis, keeps the dtype.

    >>> ReduceSpec(shape=[5, 37, 9], axis=-2, kind="max").canonical_json()
    '{"axis":1,"dtype":"float32","kind":"max","op":"reduce","shape":[5,37,9]}'
    """

    model_config = ConfigDict(json_schema_extra={"examples": [
        {"op": "reduce", "shape": [64, 4096], "axis": 1, "kind": "sum"},
        {"op": "reduce", "shape": [32, 128, 768], "axis": 1, "kind": "mean"},
    ]})

    op: Literal["reduce"] = "reduce"
    shape: tuple[Annotated[int, Field(ge=1, le=MAX_ELEMENTS)], ...] = Field(
        min_length=1, max_length=MAX_RANK, strict=False)  # a JSON list; its entries stay strict ints
    axis: int
    kind: Kind
    dtype: DType = "float32"

    @model_validator(mode="before")
    @classmethod
    def _normalise_axis(cls, data: Any) -> Any:
        if isinstance(data, dict):
            shape, axis = data.get("shape"), data.get("axis")
            if isinstance(shape, list | tuple) and type(axis) is int and -len(shape) <= axis < 0:
                return {**data, "axis": axis + len(shape)}
        return data

    @model_validator(mode="after")
    def _bounded(self) -> ReduceSpec:
        if not 0 <= self.axis < len(self.shape):
            raise ValueError(f"axis {self.axis} is out of range for the {len(self.shape)}-D shape "
                             f"{list(self.shape)} (use -{len(self.shape)}..{len(self.shape) - 1})")
        if self.outer * self.inner > MAX_ELEMENTS:
            raise ValueError(f"shape {list(self.shape)} has {self.outer * self.inner} outputs; the limit is "
                             f"{MAX_ELEMENTS} (kernels number outputs with 32-bit ints)")
        check_tensor_bytes("x", prod(self.shape), self.dtype)
        return self

    @property
    def outer(self) -> int:
        return prod(self.shape[: self.axis])

    @property
    def extent(self) -> int:
        return self.shape[self.axis]

    @property
    def inner(self) -> int:
        return prod(self.shape[self.axis + 1:])

    @property
    def out_shape(self) -> tuple[int, ...]:
        return self.shape[: self.axis] + self.shape[self.axis + 1:]


@dataclass(frozen=True)
class ReduceSchedule:
    split: int
    tile: int
    items: int
    vector: int
    tree: Tree
    #: Blocks sharing each output's reduced axis: above 1, a partial pass writes ``parts`` partial
    #: results per output to a workspace and a final pass combines them.
    parts: int = 1

    @property
    def threads(self) -> int:
        return self.split * self.tile

    @property
    def step(self) -> int:
        """Elements of the reduced axis a group covers per iteration."""
        return self.split * self.items * self.vector


_CONTIGUOUS_L1 = {"split": (32, 256), "tile": (1, 4), "items": (1, 4), "tree": ("shuffle", "shared"),
                  "parts": (1, 8)}
_STRIDED_L1 = {"split": (4, 32), "tile": (8, 32), "items": (1, 4), "vector": (1,), "tree": ("shuffle", "shared"),
               "parts": (1, 8)}
_POWERS = tuple(1 << p for p in range(11))
_L2 = {"split": _POWERS, "tile": _POWERS, "items": (1, 2, 4, 8), "vector": (1, 2, 4), "tree": ("shuffle", "shared"),
       "parts": (1, 2, 4, 8, 16, 32, 64)}
#: Threads per block of the final pass, one output each.
FINAL_THREADS = 128


def reduce_space(spec: ReduceSpec, device: DeviceSpec, level: int) -> Space[ReduceSchedule]:
    """Level 1 picks choices by layout (a contiguous or a strided reduced axis); level 2 spans both."""
    if level == 1:
        # The widest load each element type has: float4 for f32, pairs for f16 and bf16.
        widest = 4 if DTYPE_BYTES[spec.dtype] == 4 else 2
        choices: Mapping[str, tuple[Any, ...]] = (
            {**_CONTIGUOUS_L1, "vector": (1, widest)} if spec.inner == 1 else _STRIDED_L1
        )
    elif level == 2:
        choices = _L2
    else:
        raise ValueError(f"reduce: unknown space level {level}; levels are [1, 2]")
    wide = DTYPE_BYTES[spec.dtype] == 4
    constraints: tuple[Constraint[ReduceSchedule], ...] = (
        Constraint(f"threads per block <= {device.max_threads_per_block}",
                   lambda s: s.threads <= device.max_threads_per_block),
        Constraint("threads per block is a multiple of 32", lambda s: s.threads % device.warp_size == 0),
        Constraint("vector loads need the last axis reduced", lambda s: s.vector == 1 or spec.inner == 1),
        Constraint("reduced extent divisible by vector", lambda s: spec.extent % s.vector == 0),
        Constraint("16-bit loads are pairs (vector <= 2)", lambda s: wide or s.vector <= 2),
        # Splitting the reduced axis pays only where one block per output group leaves SMs idle, and
        # only when every part has at least one step of the axis to reduce.
        Constraint(f"parts > 1 only when the outputs fill fewer blocks than {device.sm_count} SMs",
                   lambda s: s.parts == 1 or -(-spec.outer * spec.inner // s.tile) < device.sm_count),
        Constraint("parts > 1 only when each part has a step of the reduced axis",
                   lambda s: s.parts == 1 or s.parts * s.step <= spec.extent),
    )
    params = tuple(Param(name, values) for name, values in choices.items())
    space = Space("reduce", params, lambda p: ReduceSchedule(**p), constraints)
    return with_preferred_default(space, _preferred(spec, device.sm_count))


def _preferred(spec: ReduceSpec, sms: int) -> Iterator[dict[str, object]]:
    """The default's candidates, in blocks of 256 threads: along the last axis a warp per output (a
    block's worth of threads on a long axis), the widest load, 4 loads a thread per step, shuffles; along
    another axis 32 consecutive outputs a block (coalesced), 8 threads sharing each axis. Where the
    outputs fill fewer blocks than the SMs, the axis is split among as many blocks as have a step each
    (up to 64; a partial and a final pass)."""
    if spec.inner == 1:
        groups: tuple[tuple[int, int], ...] = ((256, 1), (32, 8)) if spec.extent >= 8192 else ((32, 8), (256, 1))
        vectors: tuple[int, ...] = (4, 2, 1)
    else:
        groups, vectors = ((8, 32), (32, 8), (4, 32)), (1,)
    for split, tile in groups:
        few = -(-spec.outer * spec.inner // tile) < sms
        for vector in vectors:
            for items in (4, 1):
                for parts in (64, 32, 16, 8, 4, 2, 1) if few else (1,):
                    yield {"split": split, "tile": tile, "items": items, "vector": vector, "tree": "shuffle",
                           "parts": parts}


def _combine(kind: Kind) -> Any:
    if kind == "max":
        return lambda a, b: (max_(a[0], b[0]),)
    return lambda a, b: (a[0] + b[0],)


def build_reduce(spec: ReduceSpec, schedule: ReduceSchedule) -> Program:
    """One launch when ``schedule.parts == 1``; else a partial pass over ``parts`` slices of the reduced
    axis into a float32 workspace ``partials[parts][outputs]``, then :func:`_final_pass`."""
    contiguous = spec.inner == 1
    if schedule.vector > 1 and (not contiguous or spec.extent % schedule.vector):
        raise ScheduleDoesNotFitError(f"reduce: vector {schedule.vector} needs the last axis reduced and an extent "
                         f"divisible by it (extent {spec.extent}, inner {spec.inner})")
    if schedule.parts < 1:
        raise ScheduleDoesNotFitError(f"reduce: parts must be at least 1, got {schedule.parts}")
    split = schedule.parts > 1
    layout = GroupLayout(schedule.split, schedule.tile, split_minor=contiguous)
    dtype = scalar_type(spec.dtype)
    outputs, width = spec.outer * spec.inner, schedule.vector
    step = schedule.step
    # Each part takes whole steps, so vector loads stay aligned; a part past the end adds identities.
    steps = -(-spec.extent // step)
    steps_per_part = -(-steps // schedule.parts)
    identity = float("-inf") if spec.kind == "max" else 0.0
    combine = _combine(spec.kind)
    name = f"reduce_{spec.kind}_{spec.dtype}" + ("_partial" if split else "")
    with kernel(name, block=layout.threads, grid=(-(-outputs // schedule.tile), schedule.parts)) as k:
        shape = (spec.outer, spec.extent) if contiguous else (spec.outer, spec.extent, spec.inner)
        # Loads and stores are under if (live, r < extent): offsets stay inside each tensor.
        x = k.tensor("x", dtype, shape, const=True, overshoot=0)
        y = k.tensor("partials", f32, (schedule.parts * outputs,), overshoot=0) if split else \
            k.tensor("y", dtype, (outputs,), overshoot=0)
        tid = threadIdx.x
        group, member = layout.group_and_member(tid)
        q = let("q", blockIdx.x * schedule.tile + group)
        live = q < outputs

        def where(r: Expr) -> tuple[Expr, ...]:
            return (q, r) if contiguous else (q // spec.inner, r, q % spec.inner)

        acc = var("acc", f32, identity)
        lost = var("lost", f32, 0.0)  # compensation of a sum (see compensated_add)
        loaded = registers("loaded", f32, (schedule.items * width,))
        for it in range_(steps_per_part, name="it"):
            base = blockIdx.y * steps_per_part + it if split else it
            for item in range(schedule.items):
                r = let("r", ((base * schedule.items + item) * schedule.split + member) * width)
                for i in range(width):
                    loaded[item * width + i] = identity
                with if_(logical_and(live, r < spec.extent)):
                    for i, v in enumerate(load_values(x, where(r), width)):
                        loaded[item * width + i] = v
            if spec.kind == "max":
                for j in range(schedule.items * width):
                    assign(acc, max_(acc, loaded[j]))
            else:
                step_sum: Expr = loaded[0]
                for j in range(1, schedule.items * width):
                    step_sum = step_sum + loaded[j]
                compensated_add(acc, lost, step_sum)
        partial = acc if spec.kind == "max" else let("partial", acc - lost)
        (total,) = group_allreduce((partial,), combine, layout, tid, tree=schedule.tree, name="red")
        with if_(logical_and(live, member == 0)):
            if split:
                y[blockIdx.y * outputs + q] = total
            else:
                y[q] = cast(total * (1.0 / spec.extent) if spec.kind == "mean" else total, dtype)
    first = lower(k.kernel)
    if not split:
        return Program.single(first)
    return Program(
        f"reduce_{spec.kind}_{spec.dtype}_split",
        ("x", "y"),
        (Launch(first, ("x", "partials")), Launch(_final_pass(spec, schedule.parts), ("partials", "y"))),
        (Workspace("partials", (schedule.parts, outputs), "float32"),),
    )


def _final_pass(spec: ReduceSpec, parts: int) -> Kernel:
    """One thread per output combines its ``parts`` partials; consecutive threads read consecutive
    outputs of a part, so the loads coalesce."""
    dtype = scalar_type(spec.dtype)
    outputs = spec.outer * spec.inner
    with kernel(f"reduce_{spec.kind}_{spec.dtype}_final", block=FINAL_THREADS,
                grid=-(-outputs // FINAL_THREADS)) as k:
        partials = k.tensor("partials", f32, (parts * outputs,), const=True, overshoot=0)
        y = k.tensor("y", dtype, (outputs,), overshoot=0)
        q = let("q", blockIdx.x * FINAL_THREADS + threadIdx.x)
        with if_(q < outputs):
            acc = var("acc", f32, float("-inf") if spec.kind == "max" else 0.0)
            lost = var("lost", f32, 0.0)
            for p in range_(parts, name="p"):
                value = partials[p * outputs + q]
                if spec.kind == "max":
                    assign(acc, max_(acc, value))
                else:
                    compensated_add(acc, lost, value)
            total = acc if spec.kind == "max" else acc - lost
            y[q] = cast(total * (1.0 / spec.extent) if spec.kind == "mean" else total, dtype)
    return lower(k.kernel)


def reduce_inputs(spec: ReduceSpec, rng: np.random.Generator) -> dict[str, np.ndarray]:
    # Centred off zero, so sums do not cancel towards a reference that relative errors cannot judge.
    return {"x": to_storage(rng.uniform(-0.5, 1.5, spec.shape), spec.dtype)}


def reduce_outputs(spec: ReduceSpec) -> tuple[TensorSpec, ...]:
    # A max rounds nothing; a sum or mean adds the whole reduced extent.
    return (TensorSpec("y", spec.out_shape, spec.dtype, reduction=1 if spec.kind == "max" else spec.extent),)


def reduce_reference(spec: ReduceSpec, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """float64 reduction of the (already rounded) inputs."""
    x = from_storage(inputs["x"], spec.dtype).reshape(spec.shape)
    reduced = getattr(np, spec.kind)(x, axis=spec.axis)  # the kinds are numpy's names: sum, max, mean
    return {"y": np.asarray(reduced, dtype=np.float64)}


def reduce_flops(spec: ReduceSpec) -> int:
    """One operation per input element (plus one scale per output for a mean)."""
    return prod(spec.shape) + (spec.outer * spec.inner if spec.kind == "mean" else 0)


def reduce_min_bytes(spec: ReduceSpec) -> int:
    """The input read once and the output written once."""
    return (prod(spec.shape) + spec.outer * spec.inner) * DTYPE_BYTES[spec.dtype]


_TEMPLATE = Template(space=reduce_space, build=build_reduce)

OPERATOR = TemplatedOperator(
    name="reduce",
    spec_model=ReduceSpec,
    workload=Workload(reduce_inputs, reduce_outputs, reduce_reference, reduce_flops, reduce_min_bytes),
    templates=MappingProxyType({
        **dict.fromkeys([("cuda", d) for d in ("float32", "float16", "bfloat16")], _TEMPLATE),
        ("cpu", "float32"): LazyTemplate("compiler.ops.cpu.reduce"),
    }),
)
