"""Task-indexed register arrays: each thread's tasks fill its local array exactly once."""

from math import prod

import pytest

from compiler.codegen import render_cuda
from compiler.ir import lower
from compiler.ir.evaluate import evaluate_expr
from compiler.ir.lang import kernel, threadIdx
from compiler.ir.local import local_index, local_shape, task_registers
from compiler.ir.types import f32
from compiler.mapping import auto_map, repeat, spatial

MAPPINGS = [
    spatial(4, 8),
    repeat(2, 3),
    repeat(3, 5, ranks=[1, 0]),
    repeat(2, 2) * spatial(2, 2),
    spatial(2, 3) * repeat(2, 2),
    spatial(4, 2).repeat(2, 2).spatial(2, 16).repeat(4, 4),
    auto_map(8, 96, workers=64),
    spatial(2, 2, 2).repeat(2, 1, 2, ranks=[2, 0, 1]),
]


@pytest.mark.parametrize("mapping", MAPPINGS, ids=repr)
def test_each_worker_fills_its_local_array_once(mapping):
    shape = local_shape(mapping)
    for w in range(mapping.num_workers):
        tasks = mapping.worker2task(w)
        slots = [tuple(evaluate_expr(e, {}) for e in local_index(mapping, task)) for task in tasks]
        assert len(set(slots)) == len(slots) == prod(shape)
        assert all(0 <= s < e for slot in slots for s, e in zip(slot, shape, strict=True))


def test_projected_dimensions_take_one_slot():
    mapping = (repeat(2, 2) * spatial(4, 4)).projection({0: 0})
    assert local_shape(mapping) == (1, 2)
    assert {tuple(evaluate_expr(e, {}) for e in local_index(mapping, t)) for t in mapping.worker2task(5)} == {
        (0, 0), (0, 1)}


def test_task_indexing_folds_to_the_repeat_loop_indices():
    mma = spatial(4, 2).repeat(2, 2).spatial(2, 16).repeat(4, 4, attrs="u")
    with kernel("k", block=256) as k:
        out = k.tensor("out", f32, (64, 256))
        acc = task_registers("acc", f32, mma)
        for i, j in mma.on(threadIdx.x):
            acc[i, j] = 1.0
            out[i, j] = acc[i, j]
    source = render_cuda(lower(k.kernel)).source
    assert "    float acc[8][8];" in source
    assert "acc[ii][jj] = 1.0f;" in source and "acc[ii_3 + 4][jj_3 + 4] = 1.0f;" in source
    with pytest.raises(IndexError, match="1 indices"), kernel("k", block=32):
        task_registers("r", f32, spatial(4, 8))[0] = 1.0
