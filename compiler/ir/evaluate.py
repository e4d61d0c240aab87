"""A small reference interpreter of lowered IR, one thread at a time, for tests of lowering and folding.

It runs scalar code (no barriers between threads, no vectors, no atomics): enough to check that the
loops and index arithmetic of a lowered task mapping visit exactly ``mapping.worker2task(w)``, and that
simplification preserves values. Integer arithmetic follows C++ for the operands' type: division and
remainder truncate toward zero, unsigned values wrap modulo ``2**bits``, and what C++ leaves undefined
(signed overflow, division by zero, shifts by the width or more) raises :class:`UndefinedBehaviorError`.

    >>> from compiler.ir.types import i32
    >>> x = Var("x", i32)
    >>> evaluate_expr((x * 7 - 3) // 2, {x: 1})
    2
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from compiler.ir.buffer import Buffer
from compiler.ir.expr import Binary, BuiltinVar, Call, Cast, Const, Expr, Load, Select, Unary, Var
from compiler.ir.kernel import Kernel
from compiler.ir.simplify import c_div, c_mod
from compiler.ir.stmt import Assign, Body, Declare, DeclareBuffer, Evaluate, For, If, Store, Sync, While
from compiler.ir.types import DataType, c_integer, convert_integer, integer_range


class UndefinedBehaviorError(ArithmeticError):
    """The expression has no value in C++ (signed overflow, division by zero, an oversized shift)."""

_BINARY = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b, "floordiv": c_div, "mod": c_mod,
    "bitand": lambda a, b: a & b, "bitor": lambda a, b: a | b, "bitxor": lambda a, b: a ^ b,
    "shl": lambda a, b: a << b, "shr": lambda a, b: a >> b,
    "lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b,
    "ge": lambda a, b: a >= b, "eq": lambda a, b: a == b, "ne": lambda a, b: a != b,
}


class _State:
    def __init__(self, values: dict[int, Any], builtins: Mapping[str, int],
                 globals_: Mapping[str, np.ndarray]) -> None:
        self.values = values
        self.builtins = builtins
        self.globals = globals_
        self.arrays: dict[int, np.ndarray] = {}

    def storage(self, buffer: Buffer) -> tuple[np.ndarray, bool]:
        """The array behind ``buffer`` and whether it is flat (global, addressed by strides)."""
        if buffer.scope == "global":
            return self.globals[buffer.name].reshape(-1), True
        if id(buffer) not in self.arrays:
            raise KeyError(f"buffer {buffer.name} used before its declaration")
        return self.arrays[id(buffer)], False


def evaluate_expr(expr: Expr, values: Mapping[Var, Any], builtins: Mapping[str, int] | None = None) -> Any:
    """The value of ``expr`` with variables bound by ``values`` (and built-ins by name)."""
    state = _State({id(k): v for k, v in values.items()}, builtins or {}, {})
    return _eval(expr, state)


def run_thread(kernel: Kernel, arrays: Mapping[str, np.ndarray], thread: tuple[int, int, int],
               block: tuple[int, int, int] = (0, 0, 0)) -> None:
    """Run ``kernel``'s lowered body for one thread, reading and writing the global ``arrays`` by name."""
    builtins: dict[str, int] = {}
    for axis, t, b, bd, gd in zip("xyz", thread, block, kernel.block, kernel.grid, strict=True):
        builtins.update({f"threadIdx.{axis}": t, f"blockIdx.{axis}": b, f"blockDim.{axis}": bd,
                         f"gridDim.{axis}": gd})
    _run(kernel.body, _State({}, builtins, arrays))


def _run(body: Body, state: _State) -> None:
    for stmt in body:
        if isinstance(stmt, Declare):
            state.values[id(stmt.var)] = None if stmt.init is None else _eval(stmt.init, state)
        elif isinstance(stmt, Assign):
            state.values[id(stmt.var)] = _eval(stmt.value, state)
        elif isinstance(stmt, DeclareBuffer):
            state.arrays[id(stmt.buffer)] = np.zeros(stmt.buffer.const_shape, dtype=stmt.buffer.dtype.dtype)
        elif isinstance(stmt, Store):
            array, flat = state.storage(stmt.buffer)
            array[_position(stmt.buffer, stmt.indices, flat, state)] = _eval(stmt.value, state)
        elif isinstance(stmt, If):
            _run(stmt.then if _eval(stmt.cond, state) else stmt.otherwise, state)
        elif isinstance(stmt, For):
            start = 0 if stmt.start is None else _eval(stmt.start, state)
            for value in range(start, _eval(stmt.extent, state), stmt.step):
                state.values[id(stmt.var)] = value
                _run(stmt.body, state)
        elif isinstance(stmt, While):
            while _eval(stmt.cond, state):
                _run(stmt.body, state)
        elif not isinstance(stmt, Sync | Evaluate):
            raise NotImplementedError(f"the reference interpreter does not run {type(stmt).__name__}")


def _position(buffer: Buffer, indices: tuple[Expr, ...], flat: bool, state: _State) -> Any:
    if flat:
        return int(_eval(buffer.flat_index(indices), state))
    return tuple(int(_eval(i, state)) for i in indices)


def _eval(expr: Expr, state: _State) -> Any:
    if isinstance(expr, Const):
        return expr.value
    if isinstance(expr, Var):
        if id(expr) not in state.values:
            raise KeyError(f"variable {expr.name} is not bound")
        return state.values[id(expr)]
    if isinstance(expr, BuiltinVar):
        return state.builtins[expr.name]
    if isinstance(expr, Binary):
        if expr.op in ("and", "or"):
            left = _eval(expr.a, state)
            return (left and _eval(expr.b, state)) if expr.op == "and" else (left or _eval(expr.b, state))
        left, right = _eval(expr.a, state), _eval(expr.b, state)
        operand = expr.a.type
        if isinstance(operand, DataType) and operand.is_integer:
            return integer_binary(expr.op, int(left), int(right), operand)
        return _BINARY[expr.op](left, right)
    if isinstance(expr, Unary):
        value = _eval(expr.a, state)
        if expr.op != "not" and expr.type.is_integer:
            return _in_type(-value if expr.op == "neg" else ~value, expr.type, expr)
        return {"neg": lambda v: -v, "not": lambda v: not v, "bitnot": lambda v: ~v}[expr.op](value)
    if isinstance(expr, Cast):
        value = _eval(expr.value, state)
        if expr.type.kind == "bool":
            return bool(value)
        if expr.type.is_float:
            return float(value)
        if isinstance(value, float):
            low, high = integer_range(expr.type)
            if not low <= int(value) <= high:
                raise UndefinedBehaviorError(f"{expr!r}: {value} does not fit {expr.type}")
            return int(value)
        return convert_integer(int(value), expr.type)
    if isinstance(expr, Select):
        return _eval(expr.then if _eval(expr.cond, state) else expr.otherwise, state)
    if isinstance(expr, Load):
        array, flat = state.storage(expr.buffer)
        return array[_position(expr.buffer, expr.indices, flat, state)].item()
    if isinstance(expr, Call) and expr.func in ("min", "max", "fmin", "fmax"):
        args = [_eval(a, state) for a in expr.args]
        return min(args) if expr.func in ("min", "fmin") else max(args)
    raise NotImplementedError(f"the reference interpreter does not evaluate {expr!r}")


def integer_binary(op: str, a: int, b: int, dtype: DataType) -> Any:
    """``a op b`` on integers of ``dtype`` as C++ computes it (comparisons give a bool)."""
    if op in ("lt", "le", "gt", "ge", "eq", "ne"):
        return _BINARY[op](a, b)
    bits = 8 * dtype.nbytes
    if op in ("floordiv", "mod") and b == 0:
        raise UndefinedBehaviorError(f"integer {'division' if op == 'floordiv' else 'remainder'} of {a} by zero")
    if op in ("shl", "shr"):
        if not 0 <= b < bits:
            raise UndefinedBehaviorError(f"shift of {a} by {b}, outside 0..{bits - 1}")
        if op == "shl" and dtype.kind == "int":
            # C++14..17: a non-negative signed value shifts as its unsigned twin, then converts back.
            if a < 0 or a << b >= 1 << bits:
                raise UndefinedBehaviorError(f"{a} << {b} overflows {dtype}")
            return convert_integer(a << b, dtype)
    if op == "mod" and dtype.kind == "int" and c_integer(c_div(a, b), dtype) is None:
        raise UndefinedBehaviorError(f"{a} % {b} overflows {dtype}")  # INT_MIN % -1, as INT_MIN / -1
    return _in_type(_BINARY[op](a, b), dtype, f"{a} {op} {b}")


def _in_type(value: int, dtype: DataType, what: object) -> int:
    result = c_integer(value, dtype)
    if result is None:
        raise UndefinedBehaviorError(f"{what!r} overflows {dtype}")
    return result
