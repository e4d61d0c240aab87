"""Expressions: operators build typed nodes, mixing types and Python truth tests are errors."""

import dataclasses

import pytest

from compiler.ir.expr import Binary, Const, Var
from compiler.ir.intrinsics import cast, exp, logical_and, logical_not, logical_or, max_, min_, select
from compiler.ir.rewrite import structurally_equal
from compiler.ir.types import bf16, boolean, f16, f32, i32, u32


def test_operators_build_typed_nodes():
    i, x = Var("i", i32), Var("x", f32)
    index = i * 4 + 1
    assert isinstance(index, Binary) and index.op == "add" and index.type == i32
    assert repr(index) == "((i * 4) + 1)"
    assert (x * 2).type == f32 and isinstance((x * 2).b, Const) and (x * 2).b.value == 2.0
    assert (i < 3).type == boolean and (i == 3).op == "eq" and (i != 3).op == "ne"
    assert repr(10 - i) == "(10 - i)" and repr(-i) == "-i"


def test_mixed_types_are_rejected_with_both_operands_named():
    i, x = Var("i", i32), Var("x", f32)
    with pytest.raises(TypeError, match=r"operands of \+ differ in type: x is f32, i is i32"):
        x + i
    with pytest.raises(TypeError, match="u32"):
        i + Var("u", u32)
    with pytest.raises(TypeError, match=r"float literal 0\.5"):
        i + 0.5
    with pytest.raises(TypeError, match="use //"):
        i / 2
    with pytest.raises(TypeError, match="integer operands"):
        x % 2.0
    with pytest.raises(TypeError, match="logical_and needs a bool condition, got i"):
        logical_and(i, True)


def test_python_truth_test_on_a_symbol_points_at_if_():
    i = Var("i", i32)
    with pytest.raises(TypeError, match=r"\(i < 4\) has no truth value.*if_"):
        bool(i < 4)  # what `if i < 4:` calls
    with pytest.raises(TypeError, match="logical_and"):
        _ = (i < 4) and (i > 0)
    with pytest.raises(TypeError, match="range_"):
        range(i)


def test_logic_select_cast_and_math():
    i, x = Var("i", i32), Var("x", f32)
    both = logical_and(i < 4, i > 0, i != 2)
    assert both.type == boolean and repr(both) == "(((i < 4) && (i > 0)) && (i != 2))"
    assert repr(logical_or(i < 0, logical_not(i < 4))) == "((i < 0) || !(i < 4))"
    assert select(i < 4, x, 0.0).type == f32
    with pytest.raises(TypeError, match="select branches differ"):
        select(i < 4, x, i)
    assert cast(i, f32).type == f32 and cast(x, f32) is x
    assert cast(x, f16).type == f16 and cast(x, bf16).type == bf16
    assert min_(i, 3).type == i32 and max_(x, 0.0).func == "fmax"
    with pytest.raises(TypeError, match="f32 arguments"):
        exp(i)


def test_structural_equality_compares_trees_and_variables_by_identity():
    i, j = Var("i", i32), Var("i", i32)
    assert structurally_equal(i * 2 + 1, i * 2 + 1)
    assert not structurally_equal(i * 2 + 1, j * 2 + 1)
    assert hash(i) != hash(j)


def test_nodes_are_frozen():
    i = Var("i", i32)
    node = i + 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        node.op = "sub"
    with pytest.raises(dataclasses.FrozenInstanceError):
        i.name = "j"
