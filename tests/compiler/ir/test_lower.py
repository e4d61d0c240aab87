"""Lowering of task loops, checked against ``mapping.worker2task`` (the golden truth) by interpretation."""

import numpy as np
import pytest

from compiler.codegen import render_cuda
from compiler.ir import lower
from compiler.ir.evaluate import run_thread
from compiler.ir.lang import assign, kernel, let, threadIdx, var
from compiler.ir.rewrite import walk
from compiler.ir.stmt import For, If, Store, TaskLoop, Unroll
from compiler.ir.types import i32
from compiler.mapping import auto_map, repeat, spatial

MAPPINGS = [
    spatial(4, 8),
    spatial(4, 8, ranks=[1, 0]),
    repeat(2, 3),
    repeat(3, 5, ranks=[1, 0], attrs="u+."),
    repeat(2, 2) * spatial(2, 2),
    spatial(2, 3) * repeat(2, 2),
    spatial(4, 2).repeat(2, 2).spatial(2, 16).repeat(4, 4),
    auto_map(8, 96, workers=64),
    auto_map(8, 96, workers=64, ranks=[1, 0]),
    spatial(2, 3).projection({1: 0}),
    (repeat(2, 2) * spatial(4, 4)).projection({0: 0}),
    spatial(2, 2, 2).repeat(2, 1, 2, ranks=[2, 0, 1]),
    repeat(4, attrs="u4") * spatial(32),
]


def record_tasks(mapping, threads):
    """The tasks each thread visits, in order, when the lowered loop runs on ``threads`` threads."""
    rank, slots = len(mapping.task_shape), max(1, max(len(mapping.worker2task(w)) for w in range(threads)))
    with kernel("record", block=threads) as k:
        out = k.tensor("out", i32, (threads, slots, rank))
        count = var("count", i32, 0)
        for task in mapping.on(threadIdx.x):
            for dim, index in enumerate(task):
                out[threadIdx.x, count, dim] = index
            assign(count, count + 1)
    lowered = lower(k.kernel)
    visited = np.full((threads, slots, rank), -1, dtype=np.int32)
    for t in range(threads):
        run_thread(lowered, {"out": visited}, (t, 0, 0))
    return lowered, [[tuple(map(int, task)) for task in visited[t] if task[0] >= 0] for t in range(threads)]


@pytest.mark.parametrize("mapping", MAPPINGS, ids=repr)
@pytest.mark.parametrize("extra_threads", [0, 32])
def test_lowered_loops_visit_the_tasks_of_worker2task(mapping, extra_threads):
    threads = mapping.num_workers + extra_threads
    lowered, visited = record_tasks(mapping, threads)
    assert visited == [mapping.worker2task(w) for w in range(threads)]
    assert not any(isinstance(node, TaskLoop) for s in lowered.body for node in walk(s))


def test_bound_check_only_when_workers_can_exceed_the_mapping():
    exact, _ = record_tasks(spatial(4, 8), 32)
    assert not any(isinstance(s, If) for s in exact.body)
    padded, _ = record_tasks(spatial(4, 8), 64)
    guards = [s for s in padded.body if isinstance(s, If)]
    assert len(guards) == 1 and repr(guards[0].cond) == "(threadIdx.x < 32)"


@pytest.mark.parametrize(
    ("worker", "workers", "guarded"),
    [(threadIdx.x % 32, 32, False), (threadIdx.x // 32, 8, False), (threadIdx.x // 32, 4, True)],
)
def test_the_worker_range_decides_the_bound_check(worker, workers, guarded):
    with kernel("k", block=256) as k:
        out = k.tensor("out", i32, (256,))
        for (w,) in spatial(workers).on(worker):
            out[threadIdx.x] = w
    body = lower(k.kernel).body
    assert isinstance(body[0], If) is guarded


def test_repeat_attrs_become_pragmas_plain_loops_or_replicated_code():
    with kernel("k", block=1) as k:
        out = k.tensor("out", i32, (4, 8, 2))
        for i, j, t in repeat(4, 8, 2, attrs="u u4 u+").on(threadIdx.x):
            out[i, j, t] = 1
    (outer,) = lower(k.kernel).body
    assert isinstance(outer, For) and outer.unroll == Unroll(None) and outer.extent.value == 4
    (inner,) = outer.body
    assert isinstance(inner, For) and inner.unroll == Unroll(4)
    copies = inner.body
    assert len(copies) == 2 and all(isinstance(s, Store) for s in copies)
    assert [repr(s.indices[2]) for s in copies] == ["0", "1"]

    with kernel("k", block=1) as k:
        out = k.tensor("out", i32, (8,))
        for (i,) in repeat(8, attrs=".").on(threadIdx.x):
            out[i] = 1
    (plain,) = lower(k.kernel).body
    assert isinstance(plain, For) and plain.unroll is None


def test_replicated_bodies_declare_their_own_locals():
    with kernel("k", block=1) as k:
        out = k.tensor("out", i32, (3,))
        for (i,) in repeat(3, attrs="u+").on(threadIdx.x):
            doubled = let("doubled", i * 2)
            out[i] = doubled
    source = render_cuda(lower(k.kernel)).source
    assert "const int doubled = 0;" in source and "const int doubled_1 = 2;" in source
    assert "out[2] = doubled_2;" in source
