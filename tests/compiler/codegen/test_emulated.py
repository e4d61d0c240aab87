"""Generated CUDA runs on the CPU emulator with the semantics the IR interpreter gives it."""

import random

import numpy as np

from compiler.backends import emu
from compiler.backends.nvrtc import compile_source
from compiler.codegen import render_cuda
from compiler.ir import lower
from compiler.ir.evaluate import evaluate_expr
from compiler.ir.expr import Const, Expr
from compiler.ir.intrinsics import (
    cast,
    extern_call,
    floats_to_half2,
    half2_to_floats,
    lane,
    logical_and,
    make_vector,
    select,
    shfl_xor_sync,
)
from compiler.ir.lang import (
    assign,
    atomic_add,
    blockIdx,
    call,
    elif_,
    else_,
    if_,
    kernel,
    let,
    range_,
    sync_threads,
    threadIdx,
    var,
    while_,
)
from compiler.ir.types import f16, f32, i32
from compiler.mapping import repeat

THREADS = 64


def random_expr(rng: random.Random, leaves: list[Expr], depth: int) -> Expr:
    if depth == 0 or rng.random() < 0.2:
        return rng.choice([*leaves, Const(rng.randint(-20, 40), i32)])
    a = random_expr(rng, leaves, depth - 1)
    kind = rng.choice(["add", "sub", "mul", "div", "mod", "neg", "select"])
    if kind == "add":
        return a + random_expr(rng, leaves, depth - 1)
    if kind == "sub":
        return a - random_expr(rng, leaves, depth - 1)
    if kind == "mul":
        return a * rng.randint(-3, 5)
    if kind == "div":
        return a // rng.randint(1, 9)
    if kind == "mod":
        return a % rng.randint(1, 9)
    if kind == "neg":
        return -a
    return select(a < random_expr(rng, leaves, depth - 1), a, random_expr(rng, leaves, depth - 1))


def test_integer_arithmetic_matches_the_interpreter():
    rng = random.Random(7)
    tid = threadIdx.x
    count = 60
    with kernel("arith", block=THREADS) as k:
        out = k.tensor("out", i32, (count, THREADS))
        n = k.scalar("n")
        exprs = [random_expr(rng, [tid, n], depth=4) for _ in range(count)]
        for row, expr in enumerate(exprs):
            out[row, tid] = expr
    result = np.full((count, THREADS), -999, dtype=np.int32)
    emu.run(render_cuda(lower(k.kernel)), [result, 13])
    expected = [[evaluate_expr(e, {n: 13}, {"threadIdx.x": t}) for t in range(THREADS)] for e in exprs]
    assert result.tolist() == expected


def test_warp_sums_atomics_and_half_conversions():
    with kernel("reduce", block=THREADS, grid=2) as k:
        x = k.tensor("x", f16, (2 * THREADS,), const=True)
        total = k.tensor("total", f32, (1,))
        per_warp = k.tensor("per_warp", f32, (4,))
        index = let("index", blockIdx.x * THREADS + threadIdx.x)
        value = var("value", f32, cast(x[index], f32))
        for offset in (16, 8, 4, 2, 1):
            assign(value, value + shfl_xor_sync(value, offset))
        with if_(threadIdx.x % 32 == 0):
            atomic_add(total.address(0), value)
            per_warp[index // 32] = value
    rng = np.random.default_rng(3)
    x = rng.standard_normal(2 * THREADS).astype(np.float16)
    total = np.zeros(1, dtype=np.float32)
    per_warp = np.full(4, np.nan, dtype=np.float32)
    emu.run(render_cuda(lower(k.kernel)), [x, total, per_warp])
    sums = x.astype(np.float64).reshape(4, 32).sum(axis=1)
    np.testing.assert_allclose(per_warp, sums, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(total, [sums.sum()], rtol=1e-5, atol=1e-5)


def test_mapped_tile_copy_with_bound_checks_and_unrolled_loops():
    # 24 x 48 tasks on 128 of the 160 threads: a bound check, and rows past 20 guarded by if_.
    rows, cols = 20, 48
    mapping = repeat(3, 3, attrs="u+ u2").spatial(8, 16)
    with kernel("copy", block=(160,)) as k:
        src = k.tensor("src", f32, (rows, cols), const=True)
        dst = k.tensor("dst", f32, (rows, cols))
        for i, j in mapping.on(threadIdx.x):
            with if_(logical_and(i < rows, j < cols)):
                acc = var("acc", f32, 0.0)
                for step in range_(3, name="step"):
                    assign(acc, acc + src[i, j] * cast(step + 1, f32))
                dst[i, j] = acc
    a = np.random.default_rng(5).standard_normal((rows, cols)).astype(np.float32)
    b = np.full_like(a, np.nan)
    emu.run(render_cuda(lower(k.kernel)), [a, b])
    np.testing.assert_allclose(b, a * 6, rtol=1e-6)


def test_dynamic_shared_async_copies_and_vectors():
    with kernel("stage", block=32) as k:
        src = k.tensor("src", f32, (32, 4), const=True)
        dst = k.tensor("dst", f32, (32, 4))
        staged = k.dynamic_shared("staged", f32, (32, 4), byte_offset=256)
        call(extern_call("wm_cp_async_16", staged.address(threadIdx.x, 0), src.address(threadIdx.x, 0), 16))
        call(extern_call("wm_cp_async_commit"))
        call(extern_call("wm_cp_async_wait", template_args=(0,)))
        sync_threads()
        quad = let("quad", staged.load_vector(31 - threadIdx.x, 0))
        reversed_quad = make_vector(*(lane(quad, 3 - n) for n in range(4)))
        dst.store_vector((threadIdx.x, 0), reversed_quad)
    source = render_cuda(lower(k.kernel))
    assert source.shared_bytes == 256 + 32 * 16
    a = np.random.default_rng(9).standard_normal((32, 4)).astype(np.float32)
    b = np.full_like(a, np.nan)
    emu.run(source, [a, b])
    np.testing.assert_array_equal(b, a[::-1, ::-1])


def test_while_loops_and_else_if_chains():
    with kernel("collatz", block=THREADS) as k:
        steps = k.tensor("steps", i32, (THREADS,))
        kinds = k.tensor("kinds", i32, (THREADS,))
        value = var("value", i32, threadIdx.x + 1)
        count = var("count", i32, 0)
        with while_(value != 1):
            with if_(value % 2 == 0):
                assign(value, value // 2)
            with else_():
                assign(value, value * 3 + 1)
            assign(count, count + 1)
        steps[threadIdx.x] = count
        with if_(count < 5):
            kinds[threadIdx.x] = 0
        with elif_(count < 20):
            kinds[threadIdx.x] = 1
        with else_():
            kinds[threadIdx.x] = 2
    source = render_cuda(lower(k.kernel))
    assert "    } else if (count < 20) {" in source.source
    steps, kinds = np.full(THREADS, -1, np.int32), np.full(THREADS, -1, np.int32)
    emu.run(source, [steps, kinds])

    def collatz(n: int) -> int:
        count = 0
        while n != 1:
            n, count = (n // 2 if n % 2 == 0 else 3 * n + 1), count + 1
        return count

    expected = [collatz(t + 1) for t in range(THREADS)]
    assert steps.tolist() == expected
    assert kinds.tolist() == [0 if c < 5 else 1 if c < 20 else 2 for c in expected]


def test_half_pairs_round_trip():
    with kernel("pairs", block=32) as k:
        x = k.tensor("x", f32, (32, 2), const=True)
        h = k.tensor("h", f16, (32, 2))
        y = k.tensor("y", f32, (32, 2))
        pair = let("pair", floats_to_half2(x[threadIdx.x, 0], x[threadIdx.x, 1]))
        h.store_vector((threadIdx.x, 0), pair)
        widened = let("widened", half2_to_floats(h.load_vector(threadIdx.x, 0, lanes=2)))
        y.store_vector((threadIdx.x, 0), widened)
    source = render_cuda(lower(k.kernel))
    assert "    const __half2 pair = __floats2half2_rn(x[tid * 2], x[tid * 2 + 1]);" in (
        source.source.splitlines())
    assert compile_source(source, "sm_80").ok
    x = np.random.default_rng(2).standard_normal((32, 2)).astype(np.float32)
    h = np.full((32, 2), np.nan, dtype=np.float16)
    y = np.full((32, 2), np.nan, dtype=np.float32)
    emu.run(source, [x, h, y])
    np.testing.assert_array_equal(h, x.astype(np.float16))
    np.testing.assert_array_equal(y, x.astype(np.float16).astype(np.float32))
