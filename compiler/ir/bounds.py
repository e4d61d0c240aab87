"""Interval analysis of integer expressions: the facts simplification and bound checks rely on.

``RangeEnv`` knows the range of loop indices, locals and CUDA built-ins (``threadIdx.x`` ranges over
the block's x extent); ``interval`` returns the inclusive ``(low, high)`` an expression can take, or
``None`` when it cannot tell. An interval is a proof that the expression (and every part of it) takes
its exact mathematical value: where an operation may leave its type's range (unsigned wrap-around,
signed overflow) the answer is ``None``, so no rule built on it folds across a wrap.

``inside``, ``after`` and ``assume`` give the environment at a position in a body (a loop's body, after
a ``const`` local, the then-branch of a bound check): simplification and code generation both walk
bodies with them, so they agree on what is known where.

    >>> env = RangeEnv.for_launch(block=(256, 1, 1), grid=(4, 1, 1))
    >>> interval(BuiltinVar("threadIdx.x") // 32 % 16, env)   # the % 16 cannot bite
    (0, 7)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from compiler.ir.expr import Binary, BuiltinVar, Call, Cast, Const, Expr, Var
from compiler.ir.stmt import Declare, For, Stmt
from compiler.ir.types import DataType, integer_range

Interval = tuple[int, int]

_AXES = ("x", "y", "z")


@dataclass(frozen=True)
class RangeEnv:
    """Known inclusive ranges: variables by identity, built-ins by name (``"threadIdx.x"``)."""

    variables: Mapping[Var, Interval] = field(default_factory=lambda: MappingProxyType({}))
    builtins: Mapping[str, Interval] = field(default_factory=lambda: MappingProxyType({}))

    @staticmethod
    def for_launch(block: tuple[int, int, int], grid: tuple[int, int, int]) -> RangeEnv:
        """The ranges of ``threadIdx``/``blockIdx`` (and the exact ``blockDim``/``gridDim``) of a launch."""
        ranges: dict[str, Interval] = {}
        for axis, b, g in zip(_AXES, block, grid, strict=True):
            ranges[f"threadIdx.{axis}"] = (0, b - 1)
            ranges[f"blockIdx.{axis}"] = (0, g - 1)
            ranges[f"blockDim.{axis}"] = (b, b)
            ranges[f"gridDim.{axis}"] = (g, g)
        return RangeEnv(builtins=MappingProxyType(ranges))

    def with_var(self, var: Var, bounds: Interval) -> RangeEnv:
        return RangeEnv(MappingProxyType({**self.variables, var: bounds}), self.builtins)

    def with_builtin(self, name: str, bounds: Interval) -> RangeEnv:
        return RangeEnv(self.variables, MappingProxyType({**self.builtins, name: bounds}))


def interval(expr: Expr, env: RangeEnv) -> Interval | None:
    """The inclusive range of the integer ``expr`` under ``env``, or ``None`` if unknown or it may wrap."""
    bounds = _interval(expr, env)
    if bounds is None or not isinstance(expr.type, DataType) or not expr.type.is_integer:
        return bounds
    low, high = integer_range(expr.type)
    return bounds if low <= bounds[0] and bounds[1] <= high else None


def _interval(expr: Expr, env: RangeEnv) -> Interval | None:
    if isinstance(expr, Cast) and isinstance(expr.value.type, DataType) and expr.value.type.is_integer:
        return interval(expr.value, env)  # a value the target holds converts unchanged
    if isinstance(expr, Const):
        return (int(expr.value), int(expr.value)) if isinstance(expr.value, int) else None
    if isinstance(expr, Var):
        return env.variables.get(expr)
    if isinstance(expr, BuiltinVar):
        return env.builtins.get(expr.name)
    if isinstance(expr, Binary):
        return _binary(expr, env)
    if isinstance(expr, Call) and expr.func in ("min", "max") and len(expr.args) == 2:
        a, b = (interval(arg, env) for arg in expr.args)
        if a is None or b is None:
            return None
        pick = min if expr.func == "min" else max
        return (pick(a[0], b[0]), pick(a[1], b[1]))
    return None


def _binary(expr: Binary, env: RangeEnv) -> Interval | None:
    a = interval(expr.a, env)
    b = interval(expr.b, env)
    if a is None or b is None:
        return None
    (alo, ahi), (blo, bhi) = a, b
    if expr.op == "add":
        return (alo + blo, ahi + bhi)
    if expr.op == "sub":
        return (alo - bhi, ahi - blo)
    if expr.op == "mul":
        products = (alo * blo, alo * bhi, ahi * blo, ahi * bhi)
        return (min(products), max(products))
    if expr.op == "floordiv" and alo >= 0 and blo > 0:
        return (alo // bhi, ahi // blo)
    if expr.op == "mod" and alo >= 0 and blo > 0:
        return (alo, ahi) if ahi < blo else (0, min(ahi, bhi - 1))
    return None


def loop_interval(loop: For, env: RangeEnv) -> Interval | None:
    """The range of ``loop``'s index inside its body (``start`` up to ``extent - 1``), or ``None``.

    A loop that cannot run gets its start as a one-value range: its body never sees the index.
    """
    start = (0, 0) if loop.start is None else interval(loop.start, env)
    end = interval(loop.extent, env)
    if start is None or end is None:
        return None
    return start[0], max(end[1] - 1, start[0])


def inside(loop: For, env: RangeEnv) -> RangeEnv:
    """``env`` in the body of ``loop``: its index ranges over its extent."""
    bounds = loop_interval(loop, env)
    return env if bounds is None else env.with_var(loop.var, bounds)


def after(stmt: Stmt, env: RangeEnv) -> RangeEnv:
    """``env`` after ``stmt``: a ``const`` local is known to lie in its value's range."""
    if isinstance(stmt, Declare) and stmt.const and stmt.init is not None:
        bounds = interval(stmt.init, env)
        return env if bounds is None else env.with_var(stmt.var, bounds)
    return env


def assume(cond: Expr, env: RangeEnv) -> RangeEnv:
    """``env`` narrowed by the facts ``cond`` guarantees (``x < c`` and conjunctions of those)."""
    if not isinstance(cond, Binary):
        return env
    if cond.op == "and":
        return assume(cond.b, assume(cond.a, env))
    if cond.op in ("lt", "le") and isinstance(cond.b, Const) and isinstance(cond.a, Binary) and (
            cond.a.op == "add" and isinstance(cond.a.b, Const)) and interval(cond.a, env) is not None:
        # x + c < limit  is  x < limit - c, where x + c cannot wrap
        shifted = Const(int(cond.b.value) - int(cond.a.b.value), cond.b.type)
        return assume(Binary(cond.op, cond.a.a, shifted, cond.type), env)
    if cond.op in ("lt", "le") and isinstance(cond.b, Const) and isinstance(cond.a, Var | BuiltinVar):
        limit = int(cond.b.value) - (1 if cond.op == "lt" else 0)
        known = interval(cond.a, env)
        if known is None:
            return env
        bounds = (known[0], min(known[1], limit))
        if isinstance(cond.a, Var):
            return env.with_var(cond.a, bounds)
        return env.with_builtin(cond.a.name, bounds)
    return env
