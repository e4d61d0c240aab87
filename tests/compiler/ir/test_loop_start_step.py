"""Loops with a start and a step: built by range_, run by the interpreter, simplified and bounded."""

from __future__ import annotations

import numpy as np
import pytest

from compiler.ir import f32, i32, kernel, let, lower, range_
from compiler.ir.bounds import RangeEnv, loop_interval
from compiler.ir.evaluate import run_thread
from compiler.ir.expr import Const, Var
from compiler.ir.rewrite import statements
from compiler.ir.simplify_stmt import simplify_body
from compiler.ir.stmt import For, Store


def _strided(start: int, stop: int, step: int):
    with kernel("strided", block=1) as k:
        x = k.tensor("x", f32, (64,))
        for i in range_(stop, name="i", start=start, step=step):
            x[i] = x[i] + 1.0
    return k.kernel


@pytest.mark.parametrize(("start", "stop", "step"), [(0, 10, 1), (3, 17, 4), (5, 6, 3), (9, 9, 1), (7, 40, 7)])
def test_the_interpreter_visits_range_start_stop_step(start: int, stop: int, step: int) -> None:
    x = np.zeros(64, np.float32)
    run_thread(lower(_strided(start, stop, step)), {"x": x}, (0, 0, 0))
    expected = np.zeros(64, np.float32)
    expected[list(range(start, stop, step))] = 1.0
    np.testing.assert_array_equal(x, expected)


def test_a_zero_start_is_the_plain_loop() -> None:
    loop = next(s for s in statements(_strided(0, 10, 1).body) if isinstance(s, For))
    assert loop.start is None and loop.step == 1


def test_simplify_drops_empty_and_inlines_single_iteration_loops() -> None:
    empty = lower(_strided(9, 9, 1))
    assert not any(isinstance(s, For) for s in statements(empty.body))
    single = lower(_strided(5, 6, 3))
    assert not any(isinstance(s, For) for s in statements(single.body))
    (store,) = [s for s in statements(single.body) if isinstance(s, Store)]
    assert isinstance(store.indices[0], Const) and store.indices[0].value == 5


def test_the_index_range_starts_at_start() -> None:
    i = Var("i", i32)
    loop = For(i, Const(20, i32), (), start=Const(4, i32), step=3)
    assert loop_interval(loop, RangeEnv()) == (4, 19)
    assert loop_interval(For(i, Const(20, i32), ()), RangeEnv()) == (0, 19)
    assert loop_interval(For(i, Const(2, i32), (), start=Const(4, i32)), RangeEnv()) == (4, 4)
    s = Var("s", i32)
    assert loop_interval(For(i, Const(20, i32), (), start=s), RangeEnv()) is None


def test_simplification_knows_the_index_is_at_least_start() -> None:
    with kernel("bounded", block=1) as k:
        x = k.tensor("x", f32, (64,))
        for i in range_(30, name="i", start=8, step=2):
            small = let("small", (i // 8) > 0)  # always true: i >= 8
            x[i] = x[i] + 1.0
            del small
    body = simplify_body(k.kernel.body, RangeEnv())
    (decl,) = [s for s in statements(body) if type(s).__name__ == "Declare"]
    assert isinstance(decl.init, Const) and decl.init.value is True


def test_bad_steps_and_starts_are_refused() -> None:
    with kernel("bad", block=1), pytest.raises(ValueError, match="step"):
        for _ in range_(4, step=0):
            pass
    with kernel("bad", block=1), pytest.raises(TypeError, match="i32"):
        for _ in range_(4, start=1.5):
            pass
    with pytest.raises(ValueError, match="step"):
        For(Var("i", i32), Const(4, i32), (), step=-1)
