"""Constant folding and algebraic simplification, so generated index arithmetic reads like hand-written code.

Integer sums and products by constants are normalised to a linear form (``(a * 4 + b) * 2 + 1`` becomes
``a * 8 + b * 2 + 1``); division and modulo by a constant cancel whole multiples and vanish when the
interval analysis proves them idle, which is sound because index values are non-negative (checked, not
assumed: a rule that needs it asks ``bounds.interval``)::

    >>> from compiler.ir.expr import BuiltinVar
    >>> tid = BuiltinVar("threadIdx.x")
    >>> env = RangeEnv.for_launch(block=(256, 1, 1), grid=(1, 1, 1))
    >>> simplify_expr((tid // 32 * 32 + tid % 32) // 32 % 8, env)
    (threadIdx.x // 32)

Folding is exact in the operands' C type: constants fold with C's truncating division (never Python's
floor), unsigned results wrap modulo ``2**bits``, and a signed result C leaves undefined (overflow) is
not folded at all. Linear forms of unsigned values are exact modulo ``2**bits`` (a ring); range facts
come from ``bounds.interval``, which refuses any expression that may wrap.
"""

from __future__ import annotations

from collections.abc import Callable

from compiler.ir.bounds import Interval, RangeEnv, interval
from compiler.ir.expr import Binary, Cast, Const, Expr, Select, Unary
from compiler.ir.rewrite import map_children, structure_key
from compiler.ir.types import DataType, boolean, c_integer, convert_integer, integer_range

_COMPARE: dict[str, Callable[[int | float, int | float], bool]] = {
    "lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b,
    "ge": lambda a, b: a >= b, "eq": lambda a, b: a == b, "ne": lambda a, b: a != b,
}


def c_div(a: int, b: int) -> int:
    """Integer division rounding toward zero, as C does."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def c_mod(a: int, b: int) -> int:
    """The remainder of ``c_div``: takes the sign of the dividend."""
    return a - b * c_div(a, b)


def simplify_expr(expr: Expr, env: RangeEnv | None = None) -> Expr:
    """``expr`` folded and simplified, bottom-up, using the ranges known in ``env``."""
    ranges = env if env is not None else RangeEnv()
    return _simplify(expr, ranges)


def _simplify(expr: Expr, env: RangeEnv) -> Expr:
    node = map_children(expr, lambda e: _simplify(e, env), lambda b: b)
    if isinstance(node, Binary):
        return _binary(node, env)
    if isinstance(node, Unary):
        return _unary(node, env)
    if isinstance(node, Select) and isinstance(node.cond, Const):
        return node.then if node.cond.value else node.otherwise
    if isinstance(node, Cast) and isinstance(node.value, Const) and node.type != boolean:
        return _fold_cast(node)
    return node


def _fold_cast(node: Cast) -> Expr:
    assert isinstance(node.value, Const)
    value = node.value.value
    if node.type.is_float:
        return Const(float(value), node.type)
    if isinstance(value, float):
        low, high = integer_range(node.type)
        # Float to int truncates; out of range it is undefined, so it stays a run-time cast.
        return Const(int(value), node.type) if low <= int(value) <= high else node
    return Const(convert_integer(int(value), node.type), node.type)


def _binary(node: Binary, env: RangeEnv) -> Expr:
    a, b, dtype = node.a, node.b, node.type
    if node.op in _COMPARE:
        return _compare(node, env)
    if node.op in ("and", "or"):
        return _logical(node)
    if not isinstance(a.type, DataType) or not a.type.is_integer:
        if node.op == "mul" and isinstance(b, Const) and b.value == 1:
            return a
        if node.op == "mul" and isinstance(a, Const) and a.value == 1:
            return b
        return node
    if node.op in ("add", "sub", "mul"):
        return _normalised(node, dtype, env)
    if isinstance(b, Const) and b.value > 0:
        if node.op == "floordiv":
            return _floordiv(a, int(b.value), dtype, env)
        if node.op == "mod":
            return _mod(a, int(b.value), dtype, env)
    if isinstance(a, Const) and isinstance(b, Const):
        folded = fold_integer(node.op, int(a.value), int(b.value), dtype)
        return node if folded is None else Const(folded, dtype)
    return node


def fold_integer(op: str, a: int, b: int, dtype: DataType) -> int | None:
    """``a op b`` for integers of ``dtype`` as C++ computes it, or None where C++ leaves it undefined."""
    bits = 8 * dtype.nbytes
    if op in ("floordiv", "mod") and b == 0:
        return None
    if op in ("shl", "shr") and not 0 <= b < bits:
        return None
    if op == "shl" and dtype.kind == "int":
        # C++14..17: a non-negative signed value shifts as its unsigned twin, then converts back.
        return convert_integer(a << b, dtype) if a >= 0 and a << b < 1 << bits else None
    if op == "mod" and dtype.kind == "int" and c_integer(c_div(a, b), dtype) is None:
        return None  # INT_MIN % -1 is undefined, as INT_MIN / -1 is
    folds: dict[str, Callable[[int, int], int]] = {
        "add": lambda x, y: x + y, "sub": lambda x, y: x - y, "mul": lambda x, y: x * y,
        "floordiv": c_div, "mod": c_mod, "bitand": lambda x, y: x & y, "bitor": lambda x, y: x | y,
        "bitxor": lambda x, y: x ^ y, "shl": lambda x, y: x << y, "shr": lambda x, y: x >> y,
    }
    return c_integer(folds[op](a, b), dtype)


def _normalised(node: Expr, dtype: DataType, env: RangeEnv) -> Expr:
    """The linear form of ``node`` rebuilt, or ``node`` itself where that would not be exact.

    Unsigned coefficients reduce modulo ``2**bits`` (to the representative nearest zero, so ``x - 1``
    keeps reading that way); a signed coefficient or constant out of range means the expression
    overflows (or was built so that it may), and then it is left as written. Signed terms are put
    positive first only where the ranges prove no partial sum overflows; otherwise they keep the
    order they were written in (``a - b + c`` must not become ``a + c - b``, which may overflow), and
    the rebuilt form is taken only if each of its partial results is a value the written form computed.
    """
    terms, const = _linear(node)
    if dtype.kind == "uint":
        terms = {k: (atom, _nearest(c, dtype)) for k, (atom, c) in terms.items() if _nearest(c, dtype)}
        const = _nearest(const, dtype)
        if not terms:
            return Const(const % (1 << 8 * dtype.nbytes), dtype)
    else:
        if not _fits(terms, const, dtype):
            return node
    rebuilt = _rebuild(terms, const, dtype)
    if dtype.kind == "uint" or interval(rebuilt, env) is not None:
        return rebuilt
    # Unproven, the rebuilt form is taken only where each of its steps computes a value the written
    # one computed too: those fit wherever the written form is defined. ``a - (b - c)`` read as
    # ``a - b + c`` would compute ``a - b``, which may overflow where ``b - c`` did not, and
    # ``a - (1 - a)`` read as ``a * 2 - 1`` would compute ``a * 2``.
    ordered = _rebuild(terms, const, dtype, keep_order=True)
    computed = _steps(node)
    return ordered if _steps(ordered) <= computed else node


def _steps(expr: Expr) -> set[object]:
    """The linear forms of every sum, difference, negation and product by a constant ``expr`` computes."""
    found: set[object] = set()
    pending = [expr]
    while pending:
        e = pending.pop()
        if isinstance(e, Binary) and e.op in ("add", "sub", "mul"):
            children = [e.a, e.b]
        elif isinstance(e, Unary) and e.op == "neg":
            children = [e.a]
        else:
            continue
        terms, const = _linear(e)
        if structure_key(e) in terms:
            continue  # a product of two non-constants is an atom: it computes only itself here
        found.add((frozenset((key, c) for key, (_, c) in terms.items()), const))
        pending.extend(children)
    return found


def _fits(terms: Terms, const: int, dtype: DataType) -> bool:
    """Whether every literal of the rebuilt form fits ``dtype``."""
    high = integer_range(dtype)[1]
    # -high, not low: a negative coefficient renders as a subtraction of its magnitude.
    return all(-high <= c <= high for c in (const, *(c for _, c in terms.values())))


def _nearest(value: int, dtype: DataType) -> int:
    """The representative of ``value`` modulo ``2**bits`` in ``-2**(bits-1) .. 2**(bits-1) - 1``."""
    half = 1 << (8 * dtype.nbytes - 1)
    return (value + half) % (2 * half) - half


# -- linear forms: {key: (atom, coefficient)} plus a constant -----------------------------------

Terms = dict[object, tuple[Expr, int]]


def _linear(expr: Expr) -> tuple[Terms, int]:
    """``expr`` as {atom key: (atom, coefficient)} plus a constant."""
    if isinstance(expr, Const) and isinstance(expr.value, int) and not isinstance(expr.value, bool):
        return {}, expr.value
    if isinstance(expr, Unary) and expr.op == "neg":
        terms, const = _linear(expr.a)
        return _scale(terms, -1), -const
    if isinstance(expr, Binary) and expr.op in ("add", "sub"):
        left, lconst = _linear(expr.a)
        right, rconst = _linear(expr.b)
        sign = 1 if expr.op == "add" else -1
        return _merge(left, _scale(right, sign)), lconst + sign * rconst
    if isinstance(expr, Binary) and expr.op == "mul":
        left, lconst = _linear(expr.a)
        right, rconst = _linear(expr.b)
        if not right or not left:
            return (_scale(left, rconst), lconst * rconst) if not right else (_scale(right, lconst), lconst * rconst)
    return {structure_key(expr): (expr, 1)}, 0


def _scale(terms: Terms, factor: int) -> Terms:
    if factor == 0:
        return {}
    return {key: (atom, coeff * factor) for key, (atom, coeff) in terms.items()}


def _merge(left: Terms, right: Terms) -> Terms:
    merged = dict(left)
    for key, (atom, coeff) in right.items():
        total = merged[key][1] + coeff if key in merged else coeff
        if total:
            merged[key] = (atom, total)
        else:
            merged.pop(key, None)
    return merged


def _rebuild(terms: Terms, const: int, dtype: DataType, *, keep_order: bool = False) -> Expr:
    """The expression of a linear form, positive terms first (unless ``keep_order``), the constant last."""
    ordered = list(terms.values()) if keep_order else sorted(terms.values(), key=lambda t: t[1] < 0)
    result: Expr | None = None
    if ordered and ordered[0][1] < 0 and const > 0 and not keep_order:
        result, const = Const(const, dtype), 0  # 1 - x rather than -x + 1
    for atom, coeff in ordered:
        magnitude = atom if abs(coeff) == 1 else Binary("mul", atom, Const(abs(coeff), dtype), dtype)
        if result is None:
            result = magnitude if coeff > 0 else Unary("neg", magnitude, dtype)
        else:
            result = Binary("add" if coeff > 0 else "sub", result, magnitude, dtype)
    if result is None:
        return Const(const, dtype)
    if const:
        result = Binary("add" if const > 0 else "sub", result, Const(abs(const), dtype), dtype)
    return result


def _split(expr: Expr, divisor: int, env: RangeEnv) -> tuple[Expr, Expr, DataType] | None:
    """``expr == divisor * quotient + rest`` with both parts provably non-negative, or None."""
    dtype = expr.type
    assert isinstance(dtype, DataType)
    if interval(expr, env) is None:
        return None  # it may wrap: its value is not the linear form's
    terms, const = _linear(expr)
    whole: Terms = {k: (a, c // divisor) for k, (a, c) in terms.items() if c % divisor == 0}
    rest: Terms = {k: t for k, t in terms.items() if k not in whole}
    whole_const, rest_const = (const // divisor, const % divisor) if const >= 0 else (0, const)
    if not (_fits(whole, whole_const, dtype) and _fits(rest, rest_const, dtype)):
        return None
    quotient = _rebuild(whole, whole_const, dtype)
    remainder = _rebuild(rest, rest_const, dtype)
    if not (_nonnegative(quotient, env) and _nonnegative(remainder, env)):
        return None
    return quotient, remainder, dtype


def _nonnegative(expr: Expr, env: RangeEnv) -> bool:
    bounds = interval(expr, env)
    return bounds is not None and bounds[0] >= 0


def _below(expr: Expr, limit: int, env: RangeEnv) -> bool:
    bounds: Interval | None = interval(expr, env)
    return bounds is not None and bounds[0] >= 0 and bounds[1] < limit


def _floordiv(a: Expr, c: int, dtype: DataType, env: RangeEnv) -> Expr:
    if c == 1:
        return a
    if isinstance(a, Const):
        return Const(c_div(int(a.value), c), dtype)
    if _below(a, c, env):
        return Const(0, dtype)
    if (isinstance(a, Binary) and a.op == "floordiv" and isinstance(a.b, Const) and a.b.value > 0
            and int(a.b.value) * c <= integer_range(dtype)[1]):
        # (x / p) / q == x / (p * q) for C's truncating division, whatever the sign of x.
        return _floordiv(a.a, int(a.b.value) * c, dtype, env)
    parts = _split(a, c, env)
    if parts is not None and not (isinstance(parts[0], Const) and parts[0].value == 0):
        quotient, remainder, _ = parts
        rest = _floordiv(remainder, c, dtype, env)
        return _normalised(Binary("add", quotient, rest, dtype), dtype, env)
    return Binary("floordiv", a, Const(c, dtype), dtype)


def _mod(a: Expr, c: int, dtype: DataType, env: RangeEnv) -> Expr:
    if c == 1:
        return Const(0, dtype)
    if isinstance(a, Const):
        return Const(c_mod(int(a.value), c), dtype)
    if _below(a, c, env):
        return a
    if (isinstance(a, Binary) and a.op == "mod" and isinstance(a.b, Const) and a.b.value % c == 0
            and _nonnegative(a.a, env)):
        return _mod(a.a, c, dtype, env)
    parts = _split(a, c, env)
    if parts is not None and not (isinstance(parts[0], Const) and parts[0].value == 0):
        return _mod(parts[1], c, dtype, env)
    return Binary("mod", a, Const(c, dtype), dtype)


def _compare(node: Binary, env: RangeEnv) -> Expr:
    a, b = node.a, node.b
    if isinstance(a, Const) and isinstance(b, Const):
        return Const(_COMPARE[node.op](a.value, b.value), boolean)
    if not isinstance(a.type, DataType) or not a.type.is_integer:
        return node
    left, right = interval(a, env), interval(b, env)
    if left is None or right is None:
        return node
    (alo, ahi), (blo, bhi) = left, right
    decided = {
        "lt": (ahi < blo, alo >= bhi), "le": (ahi <= blo, alo > bhi),
        "gt": (alo > bhi, ahi <= blo), "ge": (alo >= bhi, ahi < blo),
        "eq": (alo == ahi == blo == bhi, ahi < blo or alo > bhi),
        "ne": (ahi < blo or alo > bhi, alo == ahi == blo == bhi),
    }[node.op]
    if decided[0]:
        return Const(True, boolean)
    if decided[1]:
        return Const(False, boolean)
    return node


def _logical(node: Binary) -> Expr:
    a, b = node.a, node.b
    absorbing = node.op == "or"  # true absorbs ||, false absorbs &&
    for first, second in ((a, b), (b, a)):
        if isinstance(first, Const):
            return first if first.value == absorbing else second
    return node


def _unary(node: Unary, env: RangeEnv) -> Expr:
    a = node.a
    if isinstance(a, Const):
        if node.op == "not":
            return Const(not a.value, boolean)
        if node.op == "neg" and node.type.is_float:
            return Const(-a.value, node.type)
        if node.op in ("neg", "bitnot"):
            value = -int(a.value) if node.op == "neg" else ~int(a.value)
            folded = c_integer(value, node.type)
            return node if folded is None else Const(folded, node.type)
    if node.op == "not" and isinstance(a, Unary) and a.op == "not":
        return a.a
    if node.op == "neg" and isinstance(a, Unary) and a.op == "neg":
        return a.a
    if node.op == "neg" and isinstance(a.type, DataType) and a.type.is_integer:
        return _normalised(node, node.type, env)
    return node
