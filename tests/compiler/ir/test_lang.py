"""The kernel language: scoping, control flow, buffers and the errors of misuse."""

import pytest

from compiler.ir.expr import Var
from compiler.ir.lang import (
    assign,
    blockIdx,
    elif_,
    else_,
    if_,
    kernel,
    let,
    range_,
    registers,
    shared,
    sync_threads,
    threadIdx,
    var,
    while_,
)
from compiler.ir.stmt import Assign, Declare, DeclareBuffer, For, If, Store, Sync, TaskLoop, Unroll, While
from compiler.ir.types import f16, f32, i32
from compiler.mapping import spatial


def test_a_kernel_collects_statements_in_order():
    with kernel("k", block=(32, 2), grid=4, min_blocks=2) as k:
        x = k.tensor("x", f32, (4, 64))
        n = k.scalar("n")
        total = var("total", f32, 0.0)
        for step in range_(n, name="step", unroll=4):
            assign(total, total + x[blockIdx.x, step])
        with if_(threadIdx.x == 0):
            x[blockIdx.x, 0] = total
        with else_():
            sync_threads()
    kern = k.kernel
    assert kern.block == (32, 2, 1) and kern.grid == (4, 1, 1) and kern.min_blocks == 2
    assert [p.name for p in kern.params] == ["x", "n"]
    declare, loop, branch = kern.body
    assert isinstance(declare, Declare) and declare.var is total
    assert isinstance(loop, For) and loop.unroll == Unroll(4) and loop.extent is n
    assert isinstance(loop.body[0], Assign)
    assert isinstance(branch, If) and isinstance(branch.then[0], Store)
    assert isinstance(branch.otherwise[0], Sync)


def test_task_loop_yields_symbolic_indices_and_records_the_mapping():
    mapping = spatial(4, 8)
    with kernel("k", block=32) as k:
        out = k.tensor("out", i32, (4, 8))
        for i, j in mapping.on(threadIdx.x):
            out[i, j] = i * 8 + j
    (loop,) = k.kernel.body
    assert isinstance(loop, TaskLoop) and loop.mapping == mapping and loop.worker is threadIdx.x
    assert [v.name for v in loop.indices] == ["i", "j"] and isinstance(loop.body[0], Store)


def test_statements_outside_a_kernel_are_refused():
    with pytest.raises(RuntimeError, match="inside `with kernel"):
        sync_threads()
    with pytest.raises(RuntimeError, match="inside `with kernel"):
        list(spatial(4).on(threadIdx.x))


def test_elif_chains_nest_in_the_else_branch():
    with kernel("k", block=32) as k:
        out = k.tensor("out", i32, (32,))
        with if_(threadIdx.x < 4):
            out[threadIdx.x] = 0
        with elif_(threadIdx.x < 8):
            out[threadIdx.x] = 1
        with elif_(threadIdx.x < 16):
            out[threadIdx.x] = 2
        with else_():
            out[threadIdx.x] = 3
    (chain,) = k.kernel.body
    conditions = []
    while isinstance(chain, If):
        conditions.append(repr(chain.cond))
        last = chain
        chain = chain.otherwise[0] if len(chain.otherwise) == 1 else None
    assert conditions == ["(threadIdx.x < 4)", "(threadIdx.x < 8)", "(threadIdx.x < 16)"]
    assert isinstance(last.otherwise[0], Store) and last.otherwise[0].value.value == 3
    with pytest.raises(SyntaxError, match="must directly follow"), kernel("k", block=32):  # noqa: PT012
        with if_(threadIdx.x < 4):
            sync_threads()
        with else_():
            sync_threads()
        with elif_(threadIdx.x < 8):
            sync_threads()


def test_else_must_follow_an_if():
    with pytest.raises(SyntaxError, match="must directly follow"), kernel("k", block=32):  # noqa: PT012
        sync_threads()
        with else_():
            pass


def test_breaking_out_of_a_loop_is_detected():
    with pytest.raises(RuntimeError, match="never closed"), kernel("k", block=32):  # noqa: PT012
        for _ in range_(4):
            break


def test_kernel_is_available_only_after_the_with_block():
    builder = kernel("k", block=32)
    with builder, pytest.raises(RuntimeError, match="still being written"):
        _ = builder.kernel


def test_buffers_check_rank_types_and_constant_bounds():
    with kernel("k", block=32) as k:
        x = k.tensor("x", f32, (4, 8))
        tile = shared("tile", f16, (2, 16))
        acc = registers("acc", f32, (4,))
        with pytest.raises(IndexError, match="shape"):
            x[1]
        with pytest.raises(IndexError, match="out of range"):
            acc[4] = 0.0
        with pytest.raises(TypeError, match=r"cannot store .* f32 into tile of f16"):
            tile[0, 0] = x[0, 0]
        with pytest.raises(TypeError, match="not an int"):
            acc[x[0, 0]]
        with pytest.raises(TypeError, match=r"float literal 1\.5"):
            assign(var("n", i32), 1.5)
        with pytest.raises(TypeError, match="bool condition"), if_(threadIdx.x):
            pass
    declared = [s.buffer.name for s in k.kernel.body if isinstance(s, DeclareBuffer)]
    assert declared == ["tile", "acc"]


def test_let_names_a_value_and_while_loops():
    with kernel("k", block=32) as k:
        out = k.tensor("out", i32, (32,))
        lane = let("lane", threadIdx.x % 32)
        count = var("count", i32, 0)
        with while_(count < lane):
            assign(count, count + 1)
        out[lane] = count
    with pytest.raises(TypeError, match="only locals declared with var"), kernel("k", block=32):
        assign(let("fixed", threadIdx.x), 1)
    with pytest.raises(TypeError, match="only locals declared with var"), kernel("k", block=32):  # noqa: PT012
        for step in range_(4):
            assign(step, 0)
    declare, _, loop, _ = k.kernel.body
    assert isinstance(declare, Declare) and declare.const and isinstance(declare.var, Var)
    assert isinstance(loop, While)


def test_bad_launch_configuration_is_rejected():
    with pytest.raises(ValueError, match="block must be"):
        kernel("k", block=0)
    with pytest.raises(ValueError, match="not a C identifier"), kernel("bad name", block=32):
        pass
