"""Rendering of IR expressions to C-family text, with the fewest parentheses C's precedence allows."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from compiler.codegen.dialect import Dialect
from compiler.codegen.names import CodegenError, Names
from compiler.ir.bounds import RangeEnv
from compiler.ir.buffer import Buffer
from compiler.ir.expr import (
    Address,
    Binary,
    BuiltinVar,
    Call,
    Cast,
    Const,
    Expr,
    Lane,
    Load,
    MakeVector,
    Select,
    Unary,
    Var,
    VectorLoad,
)
from compiler.ir.simplify import simplify_expr
from compiler.ir.types import DataType, PointerType, Type, VectorType, f32, integer_range

# C precedence levels (higher binds tighter).
PRIMARY, UNARY, TERNARY = 16, 15, 3
_BINARY = {
    "mul": ("*", 13), "div": ("/", 13), "floordiv": ("/", 13), "mod": ("%", 13),
    "add": ("+", 12), "sub": ("-", 12), "shl": ("<<", 11), "shr": (">>", 11),
    "lt": ("<", 10), "le": ("<=", 10), "gt": (">", 10), "ge": (">=", 10), "eq": ("==", 9), "ne": ("!=", 9),
    "bitand": ("&", 8), "bitxor": ("^", 7), "bitor": ("|", 6), "and": ("&&", 5), "or": ("||", 4),
}
_UNARY = {"neg": "-", "not": "!", "bitnot": "~"}


def type_name(dialect: Dialect, t: Type) -> str:
    """The target spelling of a scalar, vector or pointer type."""
    if isinstance(t, DataType):
        return dialect.type_names[t.name]
    if isinstance(t, VectorType):
        key = f"{t.element.name}x{t.lanes}"
        if key not in dialect.type_names:
            raise CodegenError(f"vector type {t} has no {dialect.name} spelling")
        return dialect.type_names[key]
    if isinstance(t, PointerType):
        return f"{'const ' if t.const else ''}{dialect.type_names[t.element.name]}*"
    raise CodegenError(f"a value of type {t} cannot be stored or declared")


@dataclass(frozen=True)
class ExprRenderer:
    """Renders expressions; ``env`` holds the ranges known where they stand, so flattened indices
    simplify as far as those ranges prove safe."""

    dialect: Dialect
    names: Names
    env: RangeEnv = field(default_factory=RangeEnv)

    def __call__(self, expr: Expr) -> str:
        return self.render(expr)[0]

    def render(self, expr: Expr) -> tuple[str, int]:
        """The text of ``expr`` and its precedence level."""
        d = self.dialect
        if isinstance(expr, Const):
            return self._const(expr)
        if isinstance(expr, Var):
            return self.names.var(expr), PRIMARY
        if isinstance(expr, BuiltinVar):
            text = d.index_names.get(expr.name)
            if text is None:
                raise CodegenError(f"built-in {expr.name} has no {d.name} spelling")
            return text, UNARY if text.startswith("(") else PRIMARY
        if isinstance(expr, Binary):
            symbol, level = _BINARY[expr.op]
            left = self._operand(expr.a, level, right=False)
            right = self._operand(expr.b, level, right=True)
            return f"{left} {symbol} {right}", level
        if isinstance(expr, Unary):
            return f"{_UNARY[expr.op]}{self._operand(expr.a, UNARY, right=True)}", UNARY
        if isinstance(expr, Cast):
            return self._cast(expr)
        if isinstance(expr, Select):
            cond = self._operand(expr.cond, TERNARY + 1, right=False)
            then = self._operand(expr.then, TERNARY, right=True)
            return f"{cond} ? {then} : {self(expr.otherwise)}", TERNARY
        if isinstance(expr, Call):
            return self._call(expr), PRIMARY
        if isinstance(expr, Load):
            return self.element(expr.buffer, expr.indices), PRIMARY
        if isinstance(expr, Address):
            return self.address(expr.load.buffer, expr.load.indices)
        if isinstance(expr, VectorLoad):
            pointer = self.address(expr.buffer, expr.indices)[0]
            return f"reinterpret_cast<const {type_name(d, expr.type)}*>({pointer})[0]", PRIMARY
        if isinstance(expr, Lane):
            text, level = self.render(expr.vector)
            vector = text if level == PRIMARY else f"({text})"
            return f"{vector}.{'xyzw'[expr.index]}", PRIMARY
        if isinstance(expr, MakeVector):
            args = ", ".join(self(e) for e in expr.elements)
            return f"make_{type_name(d, expr.type)}({args})", PRIMARY
        raise CodegenError(f"cannot render expression {expr!r} of type {type(expr).__name__}")

    def _operand(self, expr: Expr, parent: int, *, right: bool) -> str:
        text, level = self.render(expr)
        # Left-associative: an equal-precedence right operand needs parentheses (a - (b - c)).
        return f"({text})" if level < parent or (right and level == parent) else text

    def _const(self, const: Const) -> tuple[str, int]:
        value, t = const.value, const.type
        if t.kind == "bool":
            return ("true" if value else "false"), PRIMARY
        if t.is_integer:
            return _integer_literal(int(value), t)
        number = float(value)
        if math.isnan(number):
            raise CodegenError("NaN constants cannot be rendered")
        if math.isinf(number):
            text, level = self.dialect.float_infinity, PRIMARY
            if number < 0:
                text, level = f"-{text}", UNARY
        else:
            text = f"{number!r}f"
            level = UNARY if number < 0 else PRIMARY
        if t != f32:
            conversion = self.dialect.conversions[f"f32->{t.name}"]
            return f"{conversion}({text})", PRIMARY
        return text, level

    def _cast(self, cast: Cast) -> tuple[str, int]:
        source, target = cast.value.type, cast.type
        assert isinstance(source, DataType)
        conversions = self.dialect.conversions
        key = f"{source.name}->{target.name}"
        if key in conversions:
            return f"{conversions[key]}({self(cast.value)})", PRIMARY
        # Half types convert through float: (int)__half2float(h), __float2half_rn((float)i).
        if f"{source.name}->f32" in conversions:
            as_float = f"{conversions[f'{source.name}->f32']}({self(cast.value)})"
            return f"({type_name(self.dialect, target)}){as_float}", UNARY
        if f"f32->{target.name}" in conversions:
            return f"{conversions[f'f32->{target.name}']}({self(Cast(cast.value, f32))})", PRIMARY
        # A cast of a cast needs no parentheses: (unsigned int)(int)x.
        return f"({type_name(self.dialect, target)}){self._operand(cast.value, UNARY, right=False)}", UNARY

    def _call(self, call: Call) -> str:
        name = self.dialect.functions.get(call.func)
        if name is None:
            if call.header is None:
                raise CodegenError(f"function {call.func!r} has no {self.dialect.name} spelling")
            name = call.func
        template = f"<{', '.join(map(str, call.template_args))}>" if call.template_args else ""
        return f"{name}{template}({', '.join(self(a) for a in call.args)})"

    def element(self, buffer: Buffer, indices: tuple[Expr, ...]) -> str:
        """The lvalue text of ``buffer[indices]``."""
        name = self.names.buffer(buffer)
        if buffer.scope in ("shared", "register"):
            return name + "".join(f"[{self(simplify_expr(i, self.env))}]" for i in indices)
        return f"{self._base_pointer(buffer, name)}[{self(simplify_expr(buffer.flat_index(indices), self.env))}]"

    def address(self, buffer: Buffer, indices: tuple[Expr, ...]) -> tuple[str, int]:
        """A pointer to ``buffer[indices]``."""
        name = self.names.buffer(buffer)
        if buffer.scope in ("shared", "register"):
            return "&" + self.element(buffer, indices), UNARY
        offset = simplify_expr(buffer.flat_index(indices), self.env)
        base = self._base_pointer(buffer, name)
        if isinstance(offset, Const) and offset.value == 0:
            return base, PRIMARY
        return f"{base} + {self._operand(offset, 12, right=True)}", 12

    def _base_pointer(self, buffer: Buffer, name: str) -> str:
        if buffer.scope != "dynamic_shared":
            return name
        element = type_name(self.dialect, buffer.dtype)
        offset = f" + {buffer.byte_offset}" if buffer.byte_offset else ""
        return f"reinterpret_cast<{element}*>({self.dialect.dynamic_shared_name}{offset})"


#: Literal suffixes by integer type: an unsuffixed literal is an int in C.
_SUFFIXES = {"i32": "", "u32": "u", "i64": "LL"}


def _integer_literal(value: int, t: DataType) -> tuple[str, int]:
    """``value`` spelled as a literal of type ``t``; refuses a value the type cannot hold."""
    low, high = integer_range(t)
    if not low <= value <= high or t.name not in _SUFFIXES:
        raise CodegenError(f"integer literal {value} does not fit {t} ({low} .. {high})")
    suffix = _SUFFIXES[t.name]
    if value == low and value < 0:
        # -2147483648 would be the negation of a literal too big for an int (a long long).
        return f"({value + 1}{suffix} - 1{suffix})", PRIMARY
    return f"{value}{suffix}", UNARY if value < 0 else PRIMARY


def pointer_param(dialect: Dialect, names: Names, param: Var) -> str:
    """``const float* __restrict__ a`` or ``int m``."""
    t = param.type
    if isinstance(t, PointerType):
        return f"{type_name(dialect, t)} {dialect.restrict} {names.var(param)}"
    return f"{type_name(dialect, t)} {names.var(param)}"
