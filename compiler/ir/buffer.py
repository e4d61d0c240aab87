"""Buffers: global tensors over pointer parameters, shared and register arrays, with ``a[i, j]`` indexing.

Reading ``a[i, j]`` builds a ``Load``; writing ``a[i, j] = v`` inside a kernel emits a ``Store``, so
``acc[i, j] += x * y`` works as in Python. Global tensors are flat memory addressed through ``strides``
(row-major unless given); shared and register buffers render as C arrays (``T name[A][B]``), and views
of dynamic shared memory as offsets into the kernel's one dynamic byte array.

Index width is part of a global tensor's declaration: ``index_type`` is the type its element offsets
are computed in. ``make_buffer`` picks it from the tensor's constant shape and strides (see
:func:`index_type_for`): ``i32`` when every offset a kernel can form fits an ``int`` (fast), ``i64``
otherwise, so a template cannot overflow by forgetting to ask.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Any, Literal

from compiler.ir.expr import Address, Cast, Const, Expr, Load, Var, VectorLoad, as_expr, literal
from compiler.ir.scope import active_builder
from compiler.ir.stmt import Store, VectorStore
from compiler.ir.types import DataType, PointerType, VectorType, i32, i64, integer_range, vec

Scope = Literal["global", "shared", "dynamic_shared", "register"]

#: Coordinates a kernel may form outside a tensor's extent, each way, in every dimension, under a
#: predicate that keeps them from being dereferenced (a block tile past the edge, a k tile past the
#: end; offsets may be computed early by hoisting). No block tile is wider than a block (1024 threads
#: times a few elements); a template that reaches further (conv2d padding) says so.
OVERSHOOT = 4096


def largest_offset(shape: tuple[int, ...], strides: tuple[int, ...], overshoot: int = OVERSHOOT) -> int:
    """The largest magnitude of an element offset with each coordinate in ``-overshoot .. extent - 1 + overshoot``.

    >>> largest_offset((65536, 65536), (65536, 1), overshoot=0) == 2**32 - 1
    True
    """
    ends = [((extent - 1 + overshoot) * stride, -overshoot * stride)
            for extent, stride in zip(shape, strides, strict=True)]
    return max(sum(max(pair) for pair in ends), -sum(min(pair) for pair in ends))


def index_type_for(shape: tuple[int, ...], strides: tuple[int, ...], overshoot: int = OVERSHOOT) -> DataType:
    """``i32`` if every offset of ``largest_offset``, every stride and every extent fits an ``int``; else ``i64``.

    >>> index_type_for((1024, 1024), (1024, 1)), index_type_for((65536, 65536), (65536, 1))
    (i32, i64)
    >>> index_type_for((2**31,), (1,), overshoot=0)  # the last offset fits; the extent, a bound, does not
    i64
    """
    high = integer_range(i32)[1]
    # Every stride and extent is a literal of the index type too (a batch-1 tensor's batch stride, the
    # bound a guard compares a coordinate with).
    fits = (largest_offset(shape, strides, overshoot) <= high and all(abs(s) <= high for s in strides)
            and all(abs(extent) <= high for extent in shape))
    return i32 if fits else i64


def row_major_strides(shape: tuple[Any, ...]) -> tuple[Any, ...]:
    """Element strides of a row-major tensor: ``(4, 8) -> (8, 1)``; extents may be expressions."""
    strides: list[Any] = []
    running: Any = 1
    for extent in reversed(shape):
        strides.append(running)
        running = extent * running
    return tuple(reversed(strides))


def column_major_strides(shape: tuple[Any, ...]) -> tuple[Any, ...]:
    """Element strides of a column-major tensor: ``(4, 8) -> (1, 4)``."""
    return tuple(reversed(row_major_strides(tuple(reversed(shape)))))


@dataclass(frozen=True, eq=False)
class Buffer:
    """``shape`` elements of ``dtype`` in ``scope``. Compared and hashed by identity.

    ``pointer`` is the parameter a global tensor lives behind; ``byte_offset`` places a view inside the
    dynamic shared memory array. Shared and register buffers need constant shapes.
    """

    name: str
    dtype: DataType
    shape: tuple[Expr, ...]
    scope: Scope
    strides: tuple[Expr, ...]
    pointer: Var | None = None
    byte_offset: int = 0
    #: The type element offsets are computed in (global tensors; on-chip buffers always use i32).
    index_type: DataType = i32

    def __post_init__(self) -> None:
        pointer_type = None if self.pointer is None else self.pointer.type
        if self.scope == "global" and not isinstance(pointer_type, PointerType):
            raise TypeError(f"global tensor {self.name!r} needs a pointer parameter")
        if self.scope != "global" and not all(isinstance(e, Const) for e in self.shape):
            raise TypeError(f"{self.scope} buffer {self.name!r} needs a constant shape, got {self.shape}")
        if len(self.strides) != len(self.shape):
            raise ValueError(f"buffer {self.name!r}: {len(self.strides)} strides for rank {len(self.shape)}")

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def const_shape(self) -> tuple[int, ...]:
        """The shape as ints (shared and register buffers, and constant-shaped global tensors)."""
        if not all(isinstance(e, Const) for e in self.shape):
            raise TypeError(f"buffer {self.name!r} has a symbolic shape {self.shape}")
        return tuple(int(e.value) for e in self.shape)  # type: ignore[attr-defined]

    @property
    def nbytes(self) -> int:
        return prod(self.const_shape) * self.dtype.nbytes

    def __getitem__(self, indices: Any) -> Load:
        return Load(self, self._indices(indices), self.dtype)

    def __setitem__(self, indices: Any, value: Any) -> None:
        active_builder().emit(Store(self, self._indices(indices), self._value(value)))

    def address(self, *indices: Any) -> Address:
        """``&buffer[indices]``, for atomics and the ``wm_*`` wrappers."""
        return Address(self[indices], PointerType(self.dtype))

    def load_vector(self, *indices: Any, lanes: int = 4) -> VectorLoad:
        """``lanes`` consecutive elements from ``buffer[indices]`` as one vector (8 or 16 bytes).

        The caller guarantees the alignment: the flat index must be a multiple of ``lanes``.
        """
        return VectorLoad(self, self._indices(indices), vec(self.dtype, lanes))

    def store_vector(self, indices: Any, value: Expr) -> None:
        """Write the vector ``value`` to consecutive elements from ``buffer[indices]`` (aligned)."""
        if not isinstance(value.type, VectorType) or value.type.element != self.dtype:
            raise TypeError(f"{self.name}: cannot store {value!r} of type {value.type} as {self.dtype} lanes")
        active_builder().emit(VectorStore(self, self._indices(indices), value))

    def flat_index(self, indices: tuple[Expr, ...]) -> Expr:
        """The element offset of ``indices``: ``sum(index * stride)``, computed in ``index_type``."""
        total: Expr = literal(0, self.index_type)
        for index, stride in zip(indices, self.strides, strict=True):
            total = total + self._widen(index) * self._widen(stride)
        return total

    def _widen(self, value: Expr) -> Expr:
        if isinstance(value, Const) and value.type != self.index_type:
            return literal(int(value.value), self.index_type)
        return value if value.type == self.index_type else Cast(value, self.index_type)

    def _indices(self, indices: Any) -> tuple[Expr, ...]:
        items = indices if isinstance(indices, tuple) else (indices,)
        if len(items) != self.rank:
            raise IndexError(f"{self.name} has shape {self.shape}: got {len(items)} indices {items!r}")
        exprs = tuple(as_expr(i) for i in items)
        for dim, index in enumerate(exprs):
            if not isinstance(index.type, DataType) or not index.type.is_integer:
                raise TypeError(f"{self.name}: index {index!r} (dimension {dim}) is {index.type}, not an int")
            extent = self.shape[dim]
            if isinstance(index, Const) and isinstance(extent, Const) and not 0 <= index.value < extent.value:
                raise IndexError(f"{self.name}: index {index.value} out of range for {self.shape}, dim {dim}")
        return exprs

    def _value(self, value: Any) -> Expr:
        expr = as_expr(value, self.dtype) if not isinstance(value, Expr) else value
        if expr.type != self.dtype:
            raise TypeError(f"cannot store {expr!r} of type {expr.type} into {self.name} of {self.dtype}")
        return expr


def make_buffer(
    name: str,
    dtype: DataType,
    shape: tuple[Any, ...],
    scope: Scope,
    *,
    strides: tuple[Any, ...] | None = None,
    pointer: Var | None = None,
    byte_offset: int = 0,
    index_type: DataType | None = None,
    overshoot: int = OVERSHOOT,
) -> Buffer:
    """A buffer with ``shape`` given as ints or integer expressions (row-major unless ``strides``).

    A global tensor's ``index_type`` defaults to what :func:`index_type_for` proves enough for its
    constant shape and strides (``overshoot`` coordinates past each edge); with a symbolic shape it is
    ``i32`` unless given.
    """
    if not shape:
        raise ValueError(f"buffer {name!r} needs at least one dimension")
    for extent in shape:
        if isinstance(extent, int) and extent < 1:
            raise ValueError(f"buffer {name!r}: extents must be positive, got shape {shape}")
    raw = strides if strides is not None else row_major_strides(tuple(shape))
    if index_type is None:
        constant = all(isinstance(e, int) for e in (*shape, *raw))
        index_type = index_type_for(tuple(shape), tuple(raw), overshoot) if scope == "global" and constant else i32
    if scope != "global" and index_type != i32:
        raise ValueError(f"{scope} buffer {name!r} indexes with i32, not {index_type}")
    # Extents read as i32 (coordinates are ints) unless one alone passes what an int holds.
    dims = tuple(literal(e, i32 if e <= integer_range(i32)[1] else index_type) if isinstance(e, int)
                 else as_expr(e) for e in shape)
    stride_exprs = tuple(literal(s, index_type) if isinstance(s, int) else as_expr(s) for s in raw)
    return Buffer(name, dtype, dims, scope, stride_exprs, pointer, byte_offset, index_type)
