"""Value types of the kernel IR: scalars, 2/4-lane vectors and pointers.

Scalar types are singletons compared by value (``f32 == DataType("f32", ...)``); every IR expression
carries one of these types, and binary operators demand equal types on both sides (a Python literal
takes the type of the other operand), so a mix such as ``f32 + i32`` is an error, not a silent cast.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

ScalarKind = Literal["float", "int", "uint", "bool"]


@dataclass(frozen=True)
class DataType:
    """A scalar element type: ``name`` is warpmap's short name, ``dtype`` the numpy-style name."""

    name: str
    dtype: str
    kind: ScalarKind
    nbytes: int

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def is_integer(self) -> bool:
        return self.kind in ("int", "uint")

    def __repr__(self) -> str:
        return self.name


@dataclass(frozen=True)
class VectorType:
    """``lanes`` scalars moved as one value: ``float4``, ``int2`` ..., or a 16-bit pair (``__half2``)."""

    element: DataType
    lanes: int

    def __post_init__(self) -> None:
        if self.element.kind == "float" and self.element.nbytes == 2:
            if self.lanes != 2:
                raise TypeError(f"16-bit {self.element} vectors are pairs, not {self.lanes} lanes")
            return
        if self.element.kind not in ("float", "int", "uint") or self.element.nbytes != 4:
            raise TypeError(f"vectors hold 4-byte float/int/uint elements or f16/bf16 pairs, not {self.element}")
        if self.lanes not in (2, 4):
            raise TypeError(f"vectors have 2 or 4 lanes, not {self.lanes}")

    @property
    def nbytes(self) -> int:
        return self.element.nbytes * self.lanes

    def __repr__(self) -> str:
        return f"{self.element}x{self.lanes}"


@dataclass(frozen=True)
class PointerType:
    """A pointer to global memory holding ``element`` values; ``const`` if the kernel only reads it."""

    element: DataType
    const: bool = False

    def __repr__(self) -> str:
        return f"{'const ' if self.const else ''}{self.element}*"


@dataclass(frozen=True)
class VoidType:
    """The result of a call made for its effect only (``wm_cp_async_commit()``)."""

    def __repr__(self) -> str:
        return "void"


Type = DataType | VectorType | PointerType | VoidType

f32 = DataType("f32", "float32", "float", 4)
f16 = DataType("f16", "float16", "float", 2)
bf16 = DataType("bf16", "bfloat16", "float", 2)
i32 = DataType("i32", "int32", "int", 4)
#: 64-bit indices, for tensors whose element offsets pass what an ``int`` holds.
i64 = DataType("i64", "int64", "int", 8)
u32 = DataType("u32", "uint32", "uint", 4)
boolean = DataType("bool", "bool", "bool", 1)
void = VoidType()

SCALAR_TYPES: tuple[DataType, ...] = (f32, f16, bf16, i32, i64, u32, boolean)


def ptr(element: DataType, *, const: bool = False) -> PointerType:
    """The type of a kernel parameter pointing at ``element`` values: ``ptr(f32)`` is ``float*``."""
    return PointerType(element, const)


def vec(element: DataType, lanes: int) -> VectorType:
    """A vector type: ``vec(f32, 4)`` is ``float4``."""
    return VectorType(element, lanes)


def scalar_type(name: str) -> DataType:
    """The scalar type called ``name`` (``"f32"`` or ``"float32"``)."""
    for dtype in SCALAR_TYPES:
        if name in (dtype.name, dtype.dtype):
            return dtype
    known = ", ".join(d.name for d in SCALAR_TYPES)
    raise ValueError(f"unknown scalar type {name!r}; known: {known}")


def integer_range(dtype: DataType) -> tuple[int, int]:
    """The inclusive range of values an integer (or bool) type holds: ``i32`` is ``-2**31 .. 2**31 - 1``."""
    if dtype.kind == "bool":
        return (0, 1)
    if not dtype.is_integer:
        raise TypeError(f"{dtype} is not an integer type")
    bits = 8 * dtype.nbytes
    return (0, (1 << bits) - 1) if dtype.kind == "uint" else (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)


def c_integer(value: int, dtype: DataType) -> int | None:
    """The result of C arithmetic whose exact value is ``value``, in ``dtype``; None if C leaves it undefined.

    Unsigned arithmetic wraps modulo ``2**bits``; signed overflow is undefined behaviour, so a signed
    result out of range has no value (and nothing may fold to it).

    >>> c_integer(-1, u32), c_integer(2**31, i32), c_integer(2**31, i64)
    (4294967295, None, 2147483648)
    """
    low, high = integer_range(dtype)
    if dtype.kind == "uint":
        return value % (high + 1)
    return value if low <= value <= high else None


def convert_integer(value: int, dtype: DataType) -> int:
    """``value`` converted to the integer type ``dtype`` as C++ (and every GPU) does: modulo ``2**bits``."""
    low, high = integer_range(dtype)
    span = high - low + 1
    return (value - low) % span + low
