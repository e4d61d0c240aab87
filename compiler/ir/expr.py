"""Expressions of the kernel IR, built with Python operators.

Every node is a frozen dataclass carrying its result ``type``. Operators build new nodes and check
types: both operands of a binary operator must have the same type, except that a Python literal takes
the type of the other side::

    >>> i = Var("i", i32)
    >>> (i * 4 + 1) < 10
    (((i * 4) + 1) < 10)
    >>> Var("x", f32) + i
    Traceback (most recent call last):
    TypeError: operands of + differ in type: x is f32, i is i32; cast one with cast(value, type)

``==`` and ``!=`` build comparisons too, so nodes compare by identity (``is``), hash by identity, and
have no truth value: a Python ``if``/``and``/``or`` on a symbolic value raises, pointing at ``if_`` and
``logical_and``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from compiler.ir.scope import active_builder
from compiler.ir.stmt import TaskLoop
from compiler.ir.types import DataType, PointerType, Type, VectorType, boolean, f32, i32

if TYPE_CHECKING:
    from compiler.ir.buffer import Buffer

#: Binary operators: our name -> the symbol shown in messages and reprs.
ARITHMETIC = {"add": "+", "sub": "-", "mul": "*", "div": "/", "floordiv": "//", "mod": "%"}
BITWISE = {"bitand": "&", "bitor": "|", "bitxor": "^", "shl": "<<", "shr": ">>"}
COMPARISON = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}
LOGICAL = {"and": "&&", "or": "||"}
SYMBOLS = {**ARITHMETIC, **BITWISE, **COMPARISON, **LOGICAL}

#: Names given to the task indices of a mapping's dimensions, in order.
TASK_INDEX_NAMES = ("i", "j", "k", "l", "m", "n")

class Expr:
    """Base of all expression nodes. Subclasses are frozen dataclasses with a ``type`` field."""

    type: Type

    # -- arithmetic ---------------------------------------------------------------------------
    def __add__(self, other: Any) -> Expr:
        return binary("add", self, other)

    def __radd__(self, other: Any) -> Expr:
        return binary("add", other, self)

    def __sub__(self, other: Any) -> Expr:
        return binary("sub", self, other)

    def __rsub__(self, other: Any) -> Expr:
        return binary("sub", other, self)

    def __mul__(self, other: Any) -> Expr:
        return binary("mul", self, other)

    def __rmul__(self, other: Any) -> Expr:
        return binary("mul", other, self)

    def __truediv__(self, other: Any) -> Expr:
        return binary("div", self, other)

    def __rtruediv__(self, other: Any) -> Expr:
        return binary("div", other, self)

    def __floordiv__(self, other: Any) -> Expr:
        return binary("floordiv", self, other)

    def __rfloordiv__(self, other: Any) -> Expr:
        return binary("floordiv", other, self)

    def __mod__(self, other: Any) -> Expr:
        return binary("mod", self, other)

    def __rmod__(self, other: Any) -> Expr:
        return binary("mod", other, self)

    def __and__(self, other: Any) -> Expr:
        return binary("bitand", self, other)

    def __rand__(self, other: Any) -> Expr:
        return binary("bitand", other, self)

    def __or__(self, other: Any) -> Expr:
        return binary("bitor", self, other)

    def __ror__(self, other: Any) -> Expr:
        return binary("bitor", other, self)

    def __xor__(self, other: Any) -> Expr:
        return binary("bitxor", self, other)

    def __rxor__(self, other: Any) -> Expr:
        return binary("bitxor", other, self)

    def __lshift__(self, other: Any) -> Expr:
        return binary("shl", self, other)

    def __rshift__(self, other: Any) -> Expr:
        return binary("shr", self, other)

    def __neg__(self) -> Expr:
        if not isinstance(self.type, DataType) or self.type.kind not in ("float", "int"):
            raise TypeError(f"cannot negate {self!r} of type {self.type}")
        return Unary("neg", self, self.type)

    def __invert__(self) -> Expr:
        if not isinstance(self.type, DataType) or not self.type.is_integer:
            raise TypeError(f"~ needs an integer, got {self!r} of type {self.type}")
        return Unary("bitnot", self, self.type)

    # -- comparisons --------------------------------------------------------------------------
    def __lt__(self, other: Any) -> Expr:
        return binary("lt", self, other)

    def __le__(self, other: Any) -> Expr:
        return binary("le", self, other)

    def __gt__(self, other: Any) -> Expr:
        return binary("gt", self, other)

    def __ge__(self, other: Any) -> Expr:
        return binary("ge", self, other)

    def __eq__(self, other: Any) -> Expr:  # type: ignore[override]
        return binary("eq", self, other)

    def __ne__(self, other: Any) -> Expr:  # type: ignore[override]
        return binary("ne", self, other)

    __hash__ = object.__hash__

    # -- misuse -------------------------------------------------------------------------------
    def __bool__(self) -> bool:
        raise TypeError(
            f"the symbolic value {self!r} has no truth value while the kernel is being built: use "
            "`with if_(cond):` for a run-time branch, `select(cond, a, b)` for a value, and "
            "logical_and / logical_or / logical_not instead of `and` / `or` / `not`"
        )

    def __index__(self) -> int:
        raise TypeError(f"the symbolic value {self!r} is not a Python int: use range_() for a run-time loop")

    def map_tasks(self, mapping: Any) -> Iterator[tuple[Var, ...]]:
        """The tasks of ``mapping`` for the worker ``self``: ``mapping.on(threadIdx.x)`` lands here.

        Opens a task-loop scope in the active kernel builder, yields the symbolic task indices once
        (a tuple, one per dimension) while the loop body is written, then closes the scope. The
        ``TaskLoop`` statement is lowered to loops and index arithmetic by ``lower_task_loops``.
        """
        if not isinstance(self.type, DataType) or not self.type.is_integer:
            raise TypeError(f"a task mapping needs an integer worker index, got {self!r} of type {self.type}")
        builder = active_builder()
        rank = len(mapping.task_shape)
        names = [TASK_INDEX_NAMES[d] if d < len(TASK_INDEX_NAMES) else f"t{d}" for d in range(rank)]
        indices = tuple(Var(name, i32) for name in names)
        builder.push()
        yield indices
        builder.emit(TaskLoop(mapping, self, indices, builder.pop()))


@dataclass(frozen=True, eq=False, repr=False)
class Const(Expr):
    value: int | float | bool
    type: DataType

    def __repr__(self) -> str:
        if self.type is boolean or self.type == boolean:
            return "true" if self.value else "false"
        return repr(self.value)


@dataclass(frozen=True, eq=False, repr=False)
class Var(Expr):
    """A named value: a parameter, a local, a loop index. ``name`` is a hint, made unique at render."""

    name: str
    type: Type

    def __repr__(self) -> str:
        return self.name


@dataclass(frozen=True, eq=False, repr=False)
class BuiltinVar(Expr):
    """A CUDA built-in index such as ``threadIdx.x``; its range comes from the kernel's launch dimensions."""

    name: str
    type: DataType = i32

    def __repr__(self) -> str:
        return self.name


@dataclass(frozen=True, eq=False, repr=False)
class Binary(Expr):
    op: str
    a: Expr
    b: Expr
    type: DataType

    def __repr__(self) -> str:
        return f"({self.a!r} {SYMBOLS[self.op]} {self.b!r})"


@dataclass(frozen=True, eq=False, repr=False)
class Unary(Expr):
    """``neg`` (-x), ``not`` (!x) or ``bitnot`` (~x)."""

    op: str
    a: Expr
    type: DataType

    def __repr__(self) -> str:
        return f"{ {'neg': '-', 'not': '!', 'bitnot': '~'}[self.op]}{self.a!r}"


@dataclass(frozen=True, eq=False, repr=False)
class Cast(Expr):
    value: Expr
    type: DataType

    def __repr__(self) -> str:
        return f"cast({self.value!r}, {self.type})"


@dataclass(frozen=True, eq=False, repr=False)
class Select(Expr):
    cond: Expr
    then: Expr
    otherwise: Expr
    type: Type

    def __repr__(self) -> str:
        return f"({self.cond!r} ? {self.then!r} : {self.otherwise!r})"


@dataclass(frozen=True, eq=False, repr=False)
class Call(Expr):
    """A call of a device function: a math built-in, an intrinsic, or an extern ``wm_*`` wrapper.

    ``header`` is the include the callee needs (``None`` for built-ins); ``template_args`` render as
    ``f<1, 2>(...)``.
    """

    func: str
    args: tuple[Expr, ...]
    type: Type
    header: str | None = None
    template_args: tuple[int, ...] = ()

    def __repr__(self) -> str:
        targs = f"<{', '.join(map(str, self.template_args))}>" if self.template_args else ""
        return f"{self.func}{targs}({', '.join(map(repr, self.args))})"


@dataclass(frozen=True, eq=False, repr=False)
class Load(Expr):
    """``buffer[indices]``: one element of a global, shared or register buffer."""

    buffer: Buffer
    indices: tuple[Expr, ...]
    type: DataType

    def __repr__(self) -> str:
        return f"{self.buffer.name}[{', '.join(map(repr, self.indices))}]"


@dataclass(frozen=True, eq=False, repr=False)
class Address(Expr):
    """The address of ``load``'s element: the first argument of atomics, async copies, ldmatrix."""

    load: Load
    type: PointerType

    def __repr__(self) -> str:
        return f"&{self.load!r}"


@dataclass(frozen=True, eq=False, repr=False)
class VectorLoad(Expr):
    """``type.lanes`` consecutive elements starting at ``buffer[indices]``, read as one vector."""

    buffer: Buffer
    indices: tuple[Expr, ...]
    type: VectorType

    def __repr__(self) -> str:
        return f"{self.buffer.name}[{', '.join(map(repr, self.indices))}:+{self.type.lanes}]"


@dataclass(frozen=True, eq=False, repr=False)
class Lane(Expr):
    """Lane ``index`` (0..3, rendered ``.x .y .z .w``) of a vector value."""

    vector: Expr
    index: int
    type: DataType

    def __repr__(self) -> str:
        return f"{self.vector!r}.{'xyzw'[self.index]}"


@dataclass(frozen=True, eq=False, repr=False)
class MakeVector(Expr):
    elements: tuple[Expr, ...]
    type: VectorType

    def __repr__(self) -> str:
        return f"make_{self.type}({', '.join(map(repr, self.elements))})"


def literal(value: int | float | bool, dtype: DataType) -> Const:
    """The Python literal ``value`` as a constant of ``dtype``, refusing lossy readings."""
    if isinstance(value, bool):
        if dtype != boolean:
            raise TypeError(f"boolean literal {value} used where {dtype} is expected")
        return Const(value, dtype)
    if isinstance(value, int):
        if dtype == boolean:
            raise TypeError(f"integer literal {value} used where bool is expected")
        if dtype.kind == "uint" and value < 0:
            raise TypeError(f"negative literal {value} used where {dtype} is expected")
        if dtype.is_integer and not _fits(value, dtype):
            raise TypeError(f"integer literal {value} does not fit {dtype}; compute in a wider type")
        return Const(float(value) if dtype.is_float else value, dtype)
    if isinstance(value, float):
        if not dtype.is_float:
            raise TypeError(f"float literal {value} used where {dtype} is expected; cast explicitly")
        return Const(value, dtype)
    raise TypeError(f"{value!r} of type {type(value).__name__} is not an IR value")


def _fits(value: int, dtype: DataType) -> bool:
    bits = 8 * dtype.nbytes
    return 0 <= value < 1 << bits if dtype.kind == "uint" else -(1 << (bits - 1)) <= value < 1 << (bits - 1)


def as_expr(value: Any, like: Type | None = None) -> Expr:
    """``value`` as an expression: an Expr as is, a literal typed like ``like`` (or by its Python type)."""
    if isinstance(value, Expr):
        return value
    if isinstance(like, DataType):
        return literal(value, like)
    if isinstance(value, bool):
        return Const(value, boolean)
    if isinstance(value, int):
        return Const(value, i32)
    if isinstance(value, float):
        return Const(value, f32)
    raise TypeError(f"{value!r} of type {type(value).__name__} is not an IR value")


def binary(op: str, left: Any, right: Any) -> Expr:
    """The node ``left op right`` after type checks; see the module docstring for the literal rule."""
    if not isinstance(left, Expr) and not isinstance(right, Expr):
        raise TypeError(f"{op} of two Python values {left!r}, {right!r} is not an IR expression")
    a = as_expr(left, right.type if isinstance(right, Expr) else None)
    b = as_expr(right, a.type)
    symbol = SYMBOLS[op]
    if a.type != b.type:
        raise TypeError(
            f"operands of {symbol} differ in type: {a!r} is {a.type}, {b!r} is {b.type}; "
            "cast one with cast(value, type)"
        )
    dtype = a.type
    if not isinstance(dtype, DataType):
        raise TypeError(f"{symbol} needs scalar operands, got {a!r} of type {dtype}")
    if op in LOGICAL:
        if dtype != boolean:
            raise TypeError(f"{symbol} needs bool operands, got {a!r} of type {dtype}")
        return Binary(op, a, b, boolean)
    if op in COMPARISON:
        return Binary(op, a, b, boolean)
    if dtype == boolean:
        raise TypeError(f"{symbol} is not defined on bool values ({a!r}, {b!r})")
    if op == "div" and not dtype.is_float:
        raise TypeError(f"/ on integers {a!r}, {b!r}: use // (integer division rounds toward zero)")
    if (op in ("floordiv", "mod") or op in BITWISE) and not dtype.is_integer:
        raise TypeError(f"{symbol} needs integer operands, got {a!r} of type {dtype}")
    return Binary(op, a, b, dtype)
