"""Simplification is exact in C's integer semantics: unsigned wrap-around, signed overflow, shifts.

The differential test draws random expression trees over signed (32- and 64-bit) and unsigned
variables with known ranges, simplifies them under those ranges, and evaluates both forms (``compiler.ir.evaluate``, C++
semantics for each type) at random points of the ranges. Where the original has no value in C++
(signed overflow, a zero divisor) the point is skipped; everywhere else the simplified form must give
the same value, never raise where the original did not, and contain only literals its types hold.
"""

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from compiler.ir.bounds import RangeEnv, interval
from compiler.ir.evaluate import UndefinedBehaviorError, evaluate_expr
from compiler.ir.expr import Binary, Cast, Const, Expr, Unary, Var
from compiler.ir.rewrite import walk
from compiler.ir.simplify import simplify_expr
from compiler.ir.types import DataType, boolean, i32, i64, integer_range, u32


def test_unsigned_compare_does_not_fold_across_wrap():
    x = Var("x", u32)
    env = RangeEnv().with_var(x, (0, 5))
    expr = (x - 1) < 10
    assert evaluate_expr(expr, {x: 0}) is False  # 0u - 1u wraps to 4294967295
    assert not isinstance(simplify_expr(expr, env), Const)
    assert interval(x - 1, env) is None


def test_unsigned_constants_wrap():
    zero = Const(0, u32)
    assert simplify_expr(zero - 1).value == 2**32 - 1
    assert simplify_expr(Const(3, u32) * Const(2**31, u32)).value == 2**31
    assert simplify_expr(Unary("bitnot", Const(5, u32), u32)).value == 2**32 - 6


def test_signed_overflow_is_not_folded():
    shifted = simplify_expr(Const(1, i32) << Const(31, i32))
    # C++17 defines 1 << 31 as INT_MIN (the unsigned value converted back); never a literal 2**31.
    assert isinstance(shifted, Const) and shifted.value == -(2**31)
    assert isinstance(simplify_expr(Const(2, i32) << Const(31, i32)), Binary)
    assert isinstance(simplify_expr(Const(2**30, i32) * Const(4, i32)), Binary)
    assert isinstance(simplify_expr(Const(1, i32) << Const(32, i32)), Binary)
    assert simplify_expr(Const(2**30, i64) * Const(4, i64)).value == 2**32
    x = Var("x", i32)
    assert all(_literals_fit(simplify_expr(e)) for e in (x * 65536 * 65536, (x // 65536) // 65536))


def test_signed_sums_are_not_reordered_into_overflow():
    a, b, c = (Var(n, i32) for n in "abc")
    top = 2**31 - 1
    expr = (a - b) + c
    for env in (RangeEnv(), RangeEnv().with_var(a, (0, top)).with_var(b, (0, top)).with_var(c, (0, top))):
        simplified = simplify_expr(expr, env)
        assert evaluate_expr(simplified, {a: top, b: top, c: top}) == top, simplified
    small = RangeEnv().with_var(a, (0, 9)).with_var(b, (0, 9)).with_var(c, (0, 9))
    assert repr(simplify_expr(expr, small)) == "((a + c) - b)"  # proved safe: positive terms first


def test_cast_folds_modulo():
    assert simplify_expr(Cast(Const(-1, i32), u32)).value == 2**32 - 1
    assert simplify_expr(Cast(Const(2**32 + 7, i64), i32)).value == 7


def _literals_fit(expr: Expr) -> bool:
    for node in walk(expr):
        if isinstance(node, Const) and isinstance(node.type, DataType) and node.type.is_integer:
            low, high = integer_range(node.type)
            if not low <= node.value <= high:
                return False
    return True


# -- the differential test ---------------------------------------------------------------------

TYPES = (i32, u32, i64)
OPS = ("add", "sub", "mul", "floordiv", "mod", "bitand", "bitor", "bitxor", "shl", "shr")
COMPARE = ("lt", "le", "gt", "ge", "eq", "ne")
EDGES = {i32: (0, 1, -1, 2**31 - 1, -(2**31), 2**16), u32: (0, 1, 2**31, 2**32 - 1, 2**16),
         i64: (0, 1, -1, 2**31, 2**32, 2**63 - 1, -(2**63))}


@st.composite
def ranges(draw, dtype):
    low, high = integer_range(dtype)
    # Small ranges, whole ranges, and ranges hugging either end of the type (where sums overflow).
    kind = draw(st.sampled_from(("small", "whole", "top", "bottom")))
    span = {"small": (-64 if dtype.kind == "int" else 0, 64), "whole": (low, high),
            "top": (high - 64, high), "bottom": (low, low + 64)}[kind]
    a = draw(st.integers(*span))
    b = draw(st.integers(*span))
    return (min(a, b), max(a, b))


def constants(dtype):
    low, high = integer_range(dtype)
    return st.one_of(st.sampled_from(EDGES[dtype]), st.integers(-8 if low < 0 else 0, 40),
                     st.integers(low, high))


def trees(variables, dtype):
    leaves = st.one_of(st.sampled_from([v for v in variables if v.type == dtype]),
                       constants(dtype).map(lambda c: Const(c, dtype)))

    def extend(children):
        binary = st.tuples(st.sampled_from(OPS), children, children).map(
            lambda t: Binary(t[0], t[1], t[2], dtype))
        unary = st.tuples(st.sampled_from(("neg", "bitnot")), children).map(
            lambda t: Unary(t[0], t[1], dtype))
        return st.one_of(binary, unary)

    return st.recursive(leaves, extend, max_leaves=8)


def variables():
    return tuple(Var(f"{t.name}_{n}", t) for t in TYPES for n in "ab")


VARS = variables()


@st.composite
def cases(draw):
    dtype = draw(st.sampled_from(TYPES))
    expr = draw(trees(VARS, dtype))
    if draw(st.booleans()):
        expr = Binary(draw(st.sampled_from(COMPARE)), expr, draw(trees(VARS, dtype)), boolean)
    bounds = {v: draw(ranges(v.type)) for v in VARS}
    points = [{v: draw(st.integers(*bounds[v])) for v in VARS} for _ in range(6)]
    return expr, bounds, points


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_simplify_agrees_with_c_semantics(case):
    expr, bounds, points = case
    env = RangeEnv()
    for v, b in bounds.items():
        env = env.with_var(v, b)
    simplified = simplify_expr(expr, env)
    assert _literals_fit(simplified), f"{expr!r} -> {simplified!r}"
    defined = 0
    for point in points:
        try:
            expected = evaluate_expr(expr, point)
        except UndefinedBehaviorError:
            continue
        defined += 1
        try:
            got = evaluate_expr(simplified, point)
        except UndefinedBehaviorError as error:
            raise AssertionError(f"{expr!r} -> {simplified!r} is undefined at {point}: {error}") from None
        assert got == expected, f"{expr!r} -> {simplified!r} at {point}: {got} != {expected}"
    assume(defined > 0)


def test_merged_signed_terms_that_may_overflow_stay_as_written() -> None:
    """``a - (1 - a)`` is defined at a = 2**30 (it is INT_MAX); ``a * 2 - 1`` is not: without a range
    that proves the merged form safe, the expression keeps its written shape."""
    a = Var("i32_a", i32)
    written = Binary("sub", a, Binary("sub", Const(1, i32), a, i32), i32)
    simplified = simplify_expr(written, RangeEnv())
    assert evaluate_expr(simplified, {a: 1 << 30}) == evaluate_expr(written, {a: 1 << 30}) == (1 << 31) - 1
    bounded = simplify_expr(written, RangeEnv().with_var(a, (0, 1000)))
    assert repr(bounded) == "((i32_a * 2) - 1)"  # proven safe there: merged


def test_unproven_signed_sums_are_not_regrouped_into_overflow() -> None:
    """``a - (b - c)`` is defined at a = -2, b = c = INT_MAX; ``a - b + c`` computes ``a - b`` first,
    which is not; nor is ``(a + b) * 2`` as ``a * 2 + b * 2`` at a = 2**30, b = -2**30."""
    a, b, c = (Var(n, i32) for n in "abc")
    top = 2**31 - 1
    cases = [
        (a - (b - c), {a: -2, b: top, c: top}, "((a - b) + c)"),
        ((a + b) * 2, {a: 1 << 30, b: -(1 << 30)}, "((a * 2) + (b * 2))"),
    ]
    small = RangeEnv().with_var(a, (0, 9)).with_var(b, (0, 9)).with_var(c, (0, 9))
    for written, point, regrouped in cases:
        simplified = simplify_expr(written, RangeEnv())
        assert evaluate_expr(simplified, point) == evaluate_expr(written, point), simplified
        assert repr(simplified) != regrouped
        assert repr(simplify_expr(written, small)) in (regrouped, "((a + c) - b)")  # proven: regrouped


def test_unproven_signed_sums_still_fold_their_constants() -> None:
    """Folding that computes only values the written form computed is kept without any range."""
    a, b = Var("a", i32), Var("b", i32)
    assert repr(simplify_expr((a + 1) + 2)) == "(a + 3)"
    assert repr(simplify_expr((a - b) + b)) == "a"
    assert repr(simplify_expr(a * 4 * 8)) == "(a * 32)"
