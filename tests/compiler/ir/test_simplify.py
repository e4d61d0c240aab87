"""Simplification: readable folds, and values preserved on every input the ranges allow."""

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from compiler.ir.bounds import RangeEnv, interval
from compiler.ir.evaluate import evaluate_expr
from compiler.ir.expr import BuiltinVar, Const, Var
from compiler.ir.intrinsics import logical_and, logical_or, select
from compiler.ir.simplify import c_div, c_mod, simplify_expr
from compiler.ir.types import f32, i32

tid = BuiltinVar("threadIdx.x")
i, j = Var("i", i32), Var("j", i32)
ENV = RangeEnv.for_launch((256, 1, 1), (8, 1, 1)).with_var(i, (0, 3)).with_var(j, (0, 7))


def show(expr):
    return repr(simplify_expr(expr, ENV))


def test_identities_fold_away():
    x = Var("x", i32)
    assert show(x * 1 + 0) == "x"
    assert show(x * 0 + 5) == "5"
    assert show(x // 1) == "x"
    assert show(x % 1) == "0"
    assert show((x + 3) + 4) == "(x + 7)"
    assert show((x * 4) * 2) == "(x * 8)"
    assert show(x - x) == "0"
    assert show(1 - (x + 1)) == "-x"
    assert show(Var("y", f32) * 1.0) == "y"


def test_nested_affine_index_is_flattened():
    # The shape of spatial(4, 2).repeat(2, 2).spatial(2, 16).repeat(4, 4) on 256 threads.
    row = (((tid // 32 // 2 % 4) * 2 + i) * 2 + tid % 32 // 16 % 2) * 4 + j % 4
    expected = "(((((threadIdx.x // 64) * 16) + (i * 8)) + (((threadIdx.x % 32) // 16) * 4)) + (j % 4))"
    assert show(row) == expected


def test_division_cancels_whole_multiples_only_when_provably_non_negative():
    assert show((i * 8 + j) // 8) == "i"  # j < 8
    assert show((i * 8 + j) % 8) == "j"
    assert show((i * 8 + j + 3) // 4) == "((i * 2) + ((j + 3) // 4))"
    assert show(tid // 32 % 8) == "(threadIdx.x // 32)"  # 256 threads: 8 warps
    assert show(tid // 32 // 2) == "(threadIdx.x // 64)"
    assert show(tid % 64 % 32) == "(threadIdx.x % 32)"
    x = Var("x", i32)  # no range known: may be negative, (x * 4 - 1) // 4 != x + (-1 // 4)
    assert show((x * 4 + 1) // 4) == "(((x * 4) + 1) // 4)"


def test_comparisons_and_logic_fold_on_ranges():
    assert show(tid < 256) == "true"
    assert show(tid >= 256) == "false"
    assert show(i + j < 11) == "true"
    assert show(logical_and(tid < 256, i < j)) == "(i < j)"
    assert show(logical_or(i < 4, j < 2)) == "true"
    assert show(select(i < 4, j, 0)) == "j"
    assert show(Const(-7, i32) // 2) == "-3" and show(Const(-7, i32) % 2) == "-1"  # C truncation


def test_c_division_truncates():
    for a, b in itertools.product(range(-9, 10), (-4, -3, 2, 5)):
        assert c_div(a, b) * b + c_mod(a, b) == a
        assert abs(c_mod(a, b)) < abs(b) and (c_mod(a, b) == 0 or (c_mod(a, b) > 0) == (a > 0))


def _exprs():
    leaves = st.sampled_from([i, j, tid]) | st.integers(0, 40).map(lambda v: Const(v, i32))

    def extend(children):
        consts = st.integers(1, 16)
        return (
            st.tuples(children, children).map(lambda p: p[0] + p[1])
            | st.tuples(children, children).map(lambda p: p[0] - p[1])
            | st.tuples(children, consts).map(lambda p: p[0] * p[1])
            | st.tuples(children, consts).map(lambda p: p[0] // p[1])
            | st.tuples(children, consts).map(lambda p: p[0] % p[1])
        )

    return st.recursive(leaves, extend, max_leaves=8)


@settings(max_examples=300, deadline=None)
@given(_exprs(), st.integers(0, 3), st.integers(0, 7), st.integers(0, 255))
def test_simplification_preserves_values(expr, iv, jv, tv):
    simplified = simplify_expr(expr, ENV)
    values = {i: iv, j: jv}
    builtins = {"threadIdx.x": tv}
    assert evaluate_expr(simplified, values, builtins) == evaluate_expr(expr, values, builtins)
    bounds = interval(expr, ENV)
    if bounds is not None:
        assert bounds[0] <= evaluate_expr(expr, values, builtins) <= bounds[1]
