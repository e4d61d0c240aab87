"""Per-thread register arrays indexed by task: each thread stores only the tasks a mapping gives it.

A thread of ``spatial(4, 2).repeat(2, 2).spatial(2, 16).repeat(4, 4)`` owns 8 x 8 of the 64 x 256
tasks: the repeat coordinates of a task, with its spatial (which-thread) parts dropped, place it in
the thread's array (Hidet's ``local_layout``). ``task_registers`` declares such an array and lets the
kernel index it with the task itself::

    acc = task_registers("acc", f32, mma)
    for i, j in mma.on(threadIdx.x):
        acc[i, j] = 0.0           # stored at acc[i // 8 % 2 * 4 + i % 4][...], folded to loop indices

The indices only make sense for tasks of the calling thread.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Any

from compiler.ir.buffer import Buffer
from compiler.ir.expr import Expr, Load, as_expr
from compiler.ir.lang import registers
from compiler.ir.types import DataType
from compiler.mapping import ComposedMapping, ProjectedMapping, RepeatMapping, SpatialMapping, TaskMapping


def local_shape(mapping: TaskMapping) -> tuple[int, ...]:
    """The per-thread extent of each task dimension: the product of the repeat extents.

    >>> from compiler.mapping import spatial
    >>> local_shape(spatial(4, 2).repeat(2, 2).spatial(2, 16).repeat(4, 4))
    (8, 8)
    """
    if isinstance(mapping, SpatialMapping):
        return (1,) * len(mapping.shape)
    if isinstance(mapping, RepeatMapping):
        return mapping.shape
    if isinstance(mapping, ComposedMapping):
        outer, inner = local_shape(mapping.outer), local_shape(mapping.inner)
        return tuple(a * b for a, b in zip(outer, inner, strict=True))
    if isinstance(mapping, ProjectedMapping):
        pinned = dict(mapping.dim2value)
        return tuple(1 if d in pinned else e for d, e in enumerate(local_shape(mapping.base)))
    raise TypeError(f"no local layout for task mapping {mapping!r}")


def local_index(mapping: TaskMapping, task: tuple[Any, ...]) -> tuple[Expr, ...]:
    """Where ``task`` (one of the calling thread's tasks) sits in its ``local_shape`` array."""
    if isinstance(mapping, SpatialMapping):
        return tuple(as_expr(0) for _ in task)
    if isinstance(mapping, RepeatMapping):
        return tuple(as_expr(t) for t in task)
    if isinstance(mapping, ComposedMapping):
        inner_shape = mapping.inner.task_shape
        outer = local_index(mapping.outer, tuple(t // e for t, e in zip(task, inner_shape, strict=True)))
        inner = local_index(mapping.inner, tuple(t % e for t, e in zip(task, inner_shape, strict=True)))
        return tuple(o * e + i for o, e, i in zip(outer, local_shape(mapping.inner), inner, strict=True))
    if isinstance(mapping, ProjectedMapping):
        pinned = dict(mapping.dim2value)
        base = local_index(mapping.base, task)
        return tuple(as_expr(0) if d in pinned else b for d, b in enumerate(base))
    raise TypeError(f"no local layout for task mapping {mapping!r}")


@dataclass(frozen=True, eq=False)
class TaskRegisters:
    """A register array holding the calling thread's tasks of ``mapping``, indexed by task."""

    buffer: Buffer
    mapping: TaskMapping

    def __getitem__(self, task: Any) -> Load:
        return self.buffer[self._local(task)]

    def __setitem__(self, task: Any, value: Any) -> None:
        self.buffer[self._local(task)] = value

    def _local(self, task: Any) -> tuple[Expr, ...]:
        items = task if isinstance(task, tuple) else (task,)
        if len(items) != len(self.mapping.task_shape):
            raise IndexError(f"{self.buffer.name}: {len(items)} indices for tasks of {self.mapping!r}")
        return local_index(self.mapping, items)


def task_registers(name: str, dtype: DataType, mapping: TaskMapping) -> TaskRegisters:
    """Declare a register array of ``local_shape(mapping)`` and index it by the thread's tasks."""
    shape = local_shape(mapping)
    if prod(shape) > 1024:
        raise ValueError(f"{name}: {prod(shape)} registers per thread for {mapping!r} is too many")
    return TaskRegisters(registers(name, dtype, shape), mapping)
