"""Lowering of task loops: ``mapping.on(worker)`` becomes loops, index arithmetic and a bound check.

For a worker ``w`` and a mapping tree:

- ``spatial(shape)``: task ``d`` is ``w // stride_d % extent_d`` (no loop);
- ``repeat(shape)``: one loop per dimension of extent > 1, the largest stride outermost, each emitted
  per its ``LoopAttr`` (plain, ``#pragma unroll [N]``, or replicated here for ``u+``);
- ``outer * inner``: ``outer`` on ``w // inner.num_workers`` around ``inner`` on
  ``w % inner.num_workers``, task ``outer * inner.task_shape + inner``;
- projection: the pinned dimensions are the constant 0.

A guard ``if (w < num_workers)`` wraps the loops only when the worker's range (``threadIdx.x`` ranges
over the block) can exceed the mapping's workers. Everything is then simplified, so the row of
``spatial(4, 2).repeat(2, 2, attrs="u").spatial(2, 16).repeat(4, 4)`` on 256 threads reads
``threadIdx.x / 64 * 16 + i * 8 + threadIdx.x % 32 / 16 * 4 + ii`` (``i``, ``ii``: the repeat loops).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from compiler.ir.bounds import RangeEnv, interval, loop_interval
from compiler.ir.expr import TASK_INDEX_NAMES, Const, Expr, Var
from compiler.ir.kernel import Kernel
from compiler.ir.rewrite import fresh_copy, map_children, substitute
from compiler.ir.simplify_stmt import simplify_body
from compiler.ir.stmt import Body, For, If, Stmt, TaskLoop, Unroll
from compiler.ir.types import i32
from compiler.mapping import (
    ComposedMapping,
    LoopAttr,
    ProjectedMapping,
    RepeatMapping,
    SpatialMapping,
    TaskMapping,
)


@dataclass(frozen=True)
class _Loop:
    var: Var
    extent: int
    attr: LoopAttr


def lower(kernel: Kernel) -> Kernel:
    """``kernel`` with every task loop lowered and the whole body simplified: ready for codegen."""
    env = RangeEnv.for_launch(kernel.block, kernel.grid)
    return replace(kernel, body=simplify_body(lower_task_loops(kernel.body, env), env))


def lower_task_loops(body: Body, env: RangeEnv) -> Body:
    """``body`` with every ``TaskLoop`` replaced by plain statements (see the module docstring)."""
    out: list[Stmt] = []
    for stmt in body:
        if isinstance(stmt, TaskLoop):
            out.extend(_lower_task_loop(stmt, env))
        elif isinstance(stmt, For):
            bounds = loop_interval(stmt, env)
            inner = env if bounds is None else env.with_var(stmt.var, bounds)
            out.append(replace(stmt, body=lower_task_loops(stmt.body, inner)))
        else:
            out.append(map_children(stmt, lambda e: e, lambda b: lower_task_loops(b, env)))
    return tuple(out)


def _lower_task_loop(loop: TaskLoop, env: RangeEnv) -> Body:
    mapping: TaskMapping = loop.mapping
    loops, tasks = _tasks(mapping, loop.worker, level=0)
    body = substitute_body(lower_task_loops(loop.body, env), dict(zip(loop.indices, tasks, strict=True)))
    for spec in reversed(loops):
        body = _emit_loop(spec, body)
    worker_range = interval(loop.worker, env)
    if worker_range is None or worker_range[1] >= mapping.num_workers:
        body = (If(loop.worker < mapping.num_workers, body),)
    return body


def substitute_body(body: Body, values: dict[Var, Expr]) -> Body:
    return tuple(substitute(s, values) for s in body)


def _emit_loop(spec: _Loop, body: Body) -> Body:
    if spec.attr.explicit:
        copies: list[Stmt] = []
        for value in range(spec.extent):
            copies.extend(substitute_body(fresh_copy(body), {spec.var: Const(value, i32)}))
        return tuple(copies)
    unroll = Unroll(spec.attr.factor) if spec.attr.unroll else None
    return (For(spec.var, Const(spec.extent, i32), body, unroll),)


def _tasks(mapping: TaskMapping, worker: Expr, level: int) -> tuple[list[_Loop], tuple[Expr, ...]]:
    """The loops (outermost first) and the task index expressions of ``mapping`` on ``worker``."""
    if isinstance(mapping, SpatialMapping):
        return [], tuple(worker // s % e for s, e in zip(mapping.strides, mapping.shape, strict=True))
    if isinstance(mapping, RepeatMapping):
        return _repeat(mapping, level)
    if isinstance(mapping, ComposedMapping):
        n = mapping.inner.num_workers
        outer_loops, outer = _tasks(mapping.outer, worker // n, level)
        inner_loops, inner = _tasks(mapping.inner, worker % n, level + _count_repeats(mapping.outer))
        shape = mapping.inner.task_shape
        tasks = tuple(o * e + i for o, e, i in zip(outer, shape, inner, strict=True))
        return outer_loops + inner_loops, tasks
    if isinstance(mapping, ProjectedMapping):
        loops, tasks = _tasks(mapping.base, worker, level)
        pinned = dict(mapping.dim2value)
        return loops, tuple(Const(pinned[d], i32) if d in pinned else t for d, t in enumerate(tasks))
    raise TypeError(f"cannot lower task mapping {mapping!r} of type {type(mapping).__name__}")


def _repeat(mapping: RepeatMapping, level: int) -> tuple[list[_Loop], tuple[Expr, ...]]:
    tasks: list[Expr] = [Const(0, i32)] * len(mapping.shape)
    loops: list[_Loop] = []
    order = sorted(range(len(mapping.shape)), key=lambda d: -mapping.strides[d])
    for dim in order:
        if mapping.shape[dim] == 1:
            continue
        base = TASK_INDEX_NAMES[dim] if dim < len(TASK_INDEX_NAMES) else f"t{dim}"
        var = Var(base * (level + 1), i32)
        loops.append(_Loop(var, mapping.shape[dim], mapping.attrs[dim]))
        tasks[dim] = var
    return loops, tuple(tasks)


def _count_repeats(mapping: TaskMapping) -> int:
    """How many repeat nodes ``mapping`` holds: inner repeats name their loops ``ii``, ``jj``, ..."""
    if isinstance(mapping, RepeatMapping):
        return 1
    if isinstance(mapping, ComposedMapping):
        return _count_repeats(mapping.outer) + _count_repeats(mapping.inner)
    if isinstance(mapping, ProjectedMapping):
        return _count_repeats(mapping.base)
    return 0
