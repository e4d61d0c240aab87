"""Hoisting of built-in-only index arithmetic: same values for every thread, unique names, declared first."""

import importlib.util
import re
from pathlib import Path

import numpy as np
import pytest

from compiler.codegen import render_cuda
from compiler.ir.evaluate import run_thread
from compiler.ir.expr import Binary, BuiltinVar, Const, Var
from compiler.ir.hoist import builtin_local_name, hoist_thread_invariants, is_thread_invariant
from compiler.ir.lang import assign, blockIdx, if_, kernel, range_, threadIdx, var
from compiler.ir.lower import lower
from compiler.ir.rewrite import walk
from compiler.ir.stmt import Declare
from compiler.ir.types import i32
from compiler.mapping import auto_map, repeat, spatial

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "efficient_matmul.py"
_spec = importlib.util.spec_from_file_location("efficient_matmul_for_hoist", EXAMPLE)
assert _spec is not None and _spec.loader is not None
example = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(example)

MAPPINGS = [
    spatial(4, 8),
    repeat(2, 2) * spatial(2, 2),
    spatial(4, 2).repeat(2, 2).spatial(2, 16).repeat(4, 4),
    auto_map(8, 96, workers=64, ranks=[1, 0]),
    (repeat(2, 2) * spatial(4, 4)).projection({0: 0}),
]


def simplified(k):
    """The lowered, simplified kernel: what codegen receives and hoists."""
    return lower(k)


def run_all(k, arrays, blocks):
    for b in blocks:
        for t in range(k.block[0]):
            run_thread(k, arrays, (t, 0, 0), b)
    return arrays


def out_shape(mapping, threads):
    rows, cols = (*mapping.task_shape, 1)[:2]
    return 3 * rows + threads // 8 + 8, 2 * cols + 64


def mapping_kernel(mapping, threads):
    """Every task writes a value mixing its indices, the block and a loop-carried counter."""
    rows, cols = (*mapping.task_shape, 1)[:2]
    with kernel("tasks", block=threads, grid=(2, 3)) as k:
        out = k.tensor("out", i32, out_shape(mapping, threads))
        count = var("count", i32, 0)
        for task in mapping.on(threadIdx.x):
            i, j = (*task, 0)[:2]
            with if_(threadIdx.x % 3 < 2):
                out[blockIdx.y * rows + i, blockIdx.x * cols + j + threadIdx.x % 7] = (
                    count * 1000 + threadIdx.x // 5 * 7 + i * 3 + j)
            assign(count, count + threadIdx.x % 4 + 1)
        for step in range_(3):
            out[threadIdx.x // 8 + count % 5, threadIdx.x % 8 + step] = count + step
    return k.kernel


@pytest.mark.parametrize("mapping", MAPPINGS, ids=repr)
def test_hoisting_preserves_every_threads_writes(mapping):
    threads = mapping.num_workers + 32
    before = simplified(mapping_kernel(mapping, threads))
    after = hoist_thread_invariants(before)
    assert any(isinstance(s, Declare) and s.const for s in after.body)
    shape = out_shape(mapping, threads)
    blocks = [(0, 0, 0), (1, 2, 0)]
    expected = run_all(before, {"out": np.full(shape, -1, np.int32)}, blocks)["out"]
    got = run_all(after, {"out": np.full(shape, -1, np.int32)}, blocks)["out"]
    assert (expected != -1).any()
    np.testing.assert_array_equal(got, expected)


def test_the_example_matmul_writes_the_same_values_after_hoisting():
    k = example.efficient_matmul(64, 256, 8)
    before = simplified(k)
    after = hoist_thread_invariants(before)
    rng = np.random.default_rng(3)
    a = rng.standard_normal((64, 8)).astype(np.float32)
    b = rng.standard_normal((8, 256)).astype(np.float32)

    def run(kern):
        arrays = {"a": a.copy(), "b": b.copy(), "c": np.full((64, 256), np.nan, np.float32)}
        return run_all(kern, arrays, [(0, 0, 0)])["c"]

    expected = run(before)
    assert np.isfinite(expected).all()
    np.testing.assert_array_equal(run(after), expected)


def declarations(text):
    return re.findall(r"^ *const int (\w+) = (.*);$", text, flags=re.MULTILINE)


def test_hoisted_names_are_unique_and_declared_before_their_first_use():
    k = hoist_thread_invariants(simplified(mapping_kernel(spatial(4, 2).repeat(2, 2).spatial(2, 16), 160)))
    text = render_cuda(k).source
    declared = declarations(text)
    names = [name for name, _ in declared]
    assert len(names) == len(set(names)) and "tid" in names and "bid_x" in names
    for name, _ in declared:
        first = re.search(rf"\b{name}\b", text)
        assert first is not None and text[first.start() - len("const int "):first.start()] == "const int "
    for position, (_, init) in enumerate(declared):
        used = set(re.findall(r"\b[a-z_][a-z0-9_]*\b", init)) & set(names)
        assert used <= set(names[:position])


def test_only_initialisers_mention_builtins_and_hoisting_twice_changes_nothing():
    once = hoist_thread_invariants(simplified(mapping_kernel(repeat(2, 2) * spatial(4, 8), 64)))
    text = render_cuda(once).source
    for line in text.splitlines():
        if "Idx." in line:
            assert re.fullmatch(r" *const int \w+ = \(int\)(threadIdx|blockIdx)\.[xyz];", line), line
    assert render_cuda(hoist_thread_invariants(once)).source == text


def test_the_example_store_no_longer_repeats_thread_terms():
    text = example.efficient_matmul_source(1024, 1024, 1024).source
    stores = [line.strip() for line in text.splitlines() if line.strip().startswith("c[")]
    assert stores[1] == "c[c_row * 1024 + ii_9 * 1024 + c_col + jj_9 + 64] = regs_c[ii_9][jj_9 + 4];"
    assert all("threadIdx" not in s and "tid" not in s for s in stores)
    hoisted = dict(declarations(text))
    assert hoisted["tid"] == "(int)threadIdx.x"
    assert hoisted["c_row"] == "bid_x * 64 + tid / 64 * 16 + tid % 32 / 16 * 4"
    assert hoisted["c_col"] == "bid_y * 256 + tid / 32 % 2 * 128 + tid % 16 * 4"


def test_only_faultless_builtin_arithmetic_counts_as_thread_invariant():
    tid, x = BuiltinVar("threadIdx.x"), Var("x", i32)
    assert is_thread_invariant(Binary("mod", Binary("floordiv", tid, Const(32, i32), i32), Const(2, i32), i32))
    assert not is_thread_invariant(Binary("floordiv", tid, Const(0, i32), i32))
    assert not is_thread_invariant(Binary("floordiv", Const(64, i32), tid, i32))
    assert not is_thread_invariant(Binary("add", tid, x, i32))
    assert [builtin_local_name(BuiltinVar(n)) for n in ("threadIdx.x", "threadIdx.y", "blockIdx.x")] == [
        "tid", "tid_y", "bid_x"]


def test_nothing_is_hoisted_from_a_kernel_without_builtins():
    with kernel("plain", block=32) as k:
        out = k.tensor("out", i32, (8,))
        for step in range_(8):
            out[step] = step * 2
    lowered = simplified(k.kernel)
    assert hoist_thread_invariants(lowered).body == lowered.body
    assert not any(isinstance(n, BuiltinVar) for s in lowered.body for n in walk(s))
