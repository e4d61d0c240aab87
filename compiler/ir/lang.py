"""The kernel language: write a kernel as Python that builds IR.

A kernel is written inside ``with kernel(...) as k:``. Parameters come from ``k.tensor`` (a pointer
parameter viewed as a shaped tensor) and ``k.scalar``; control flow uses ``range_``, ``if_`` /
``elif_`` / ``else_`` and ``while_``; task mappings iterate symbolically with ``mapping.on(threadIdx.x)``::

    with kernel("scale", block=128, grid=8) as k:
        x = k.tensor("x", f32, (1000,))
        for (i,) in spatial(128).on(threadIdx.x):
            index = let("index", blockIdx.x * 128 + i)
            with if_(index < 1000):
                x[index] = x[index] * 2.0
    scale = k.kernel          # a compiler.ir.kernel.Kernel

Statements are collected by a builder held in a context variable, so two kernels can be written in
two threads at once, and writing a statement outside ``with kernel(...)`` is an error.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, replace
from types import TracebackType
from typing import Any

from compiler.ir.buffer import OVERSHOOT, Buffer, make_buffer
from compiler.ir.expr import BuiltinVar, Call, Const, Expr, Var, as_expr
from compiler.ir.intrinsics import as_condition
from compiler.ir.kernel import Dim3, Kernel, dim3
from compiler.ir.scope import StatementBuilder, active_builder, building
from compiler.ir.stmt import Assign, Body, Declare, DeclareBuffer, Evaluate, For, If, Sync, Unroll, While
from compiler.ir.types import DataType, PointerType, Type, f32, i32, u32


@dataclass(frozen=True)
class _Dim3Vars:
    x: BuiltinVar
    y: BuiltinVar
    z: BuiltinVar


def _builtin(name: str) -> _Dim3Vars:
    return _Dim3Vars(BuiltinVar(f"{name}.x"), BuiltinVar(f"{name}.y"), BuiltinVar(f"{name}.z"))


# CUDA spells these in mixedCase; kernels read best with the same names.
threadIdx = _builtin("threadIdx")  # noqa: N816
blockIdx = _builtin("blockIdx")  # noqa: N816
blockDim = _builtin("blockDim")  # noqa: N816
gridDim = _builtin("gridDim")  # noqa: N816


class KernelBuilder:
    """Collects one kernel; use through ``with kernel(...) as k`` and read ``k.kernel`` afterwards."""

    def __init__(self, name: str, block: Dim3, grid: Dim3, min_blocks: int | None,
                 host_schedule: str = "static", host_max_workers: int | None = None) -> None:
        self.name = name
        self.host_schedule = host_schedule
        self.host_max_workers = host_max_workers
        self.block = block
        self.grid = grid
        self.min_blocks = min_blocks
        self._params: list[Var] = []
        self._statements = StatementBuilder()
        self._scope: AbstractContextManager[StatementBuilder] | None = None
        self._dynamic_shared_bytes = 0
        self._kernel: Kernel | None = None

    def __enter__(self) -> KernelBuilder:
        self._scope = building(self._statements)
        self._scope.__enter__()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        assert self._scope is not None
        self._scope.__exit__(exc_type, exc, tb)
        if exc_type is None:
            self._kernel = Kernel(self.name, tuple(self._params), self._statements.finish(), self.block,
                                  self.grid, self.min_blocks, self._dynamic_shared_bytes, self.host_schedule,
                                  self.host_max_workers)

    @property
    def kernel(self) -> Kernel:
        """The finished kernel (available once the ``with`` block has ended)."""
        if self._kernel is None:
            raise RuntimeError(f"kernel {self.name!r} is still being written: leave the `with` block first")
        return self._kernel

    def param(self, name: str, type: Type) -> Var:
        """A raw parameter: a pointer (``ptr(f32)``) or a scalar (i32, u32, f32) passed by value."""
        var = Var(name, type)
        self._params.append(var)
        return var

    def scalar(self, name: str, dtype: DataType = i32) -> Var:
        """A scalar parameter passed by value."""
        if dtype not in (i32, u32, f32):
            raise TypeError(f"scalar parameter {name!r}: {dtype} is not passed by value; use i32, u32 or f32")
        return self.param(name, dtype)

    def tensor(self, name: str, dtype: DataType, shape: tuple[Any, ...], *,
               strides: tuple[Any, ...] | None = None, const: bool = False,
               overshoot: int = OVERSHOOT, index_type: DataType | None = None) -> Buffer:
        """A pointer parameter ``name`` seen as a tensor of ``shape`` (row-major unless ``strides``).

        ``const`` marks an input the kernel only reads (``const T* __restrict__``). Element offsets
        are computed in 32-bit ints where that is proved to suffice, in 64-bit ones otherwise (see
        ``compiler.ir.buffer.index_type_for``): ``overshoot`` is how many coordinates past an edge
        the kernel may form under a predicate; ``index_type`` forces a width.
        """
        pointer = self.param(name, PointerType(dtype, const))
        return make_buffer(name, dtype, tuple(shape), "global", strides=strides, pointer=pointer,
                           overshoot=overshoot, index_type=index_type)

    def dynamic_shared(self, name: str, dtype: DataType, shape: tuple[int, ...], *,
                       byte_offset: int = 0) -> Buffer:
        """A view of dynamic shared memory at ``byte_offset`` (16-byte aligned); grows the launch request."""
        if byte_offset % 16:
            raise ValueError(f"dynamic shared view {name!r}: byte_offset {byte_offset} is not 16-aligned")
        buffer = make_buffer(name, dtype, tuple(shape), "dynamic_shared", byte_offset=byte_offset)
        self._dynamic_shared_bytes = max(self._dynamic_shared_bytes, byte_offset + buffer.nbytes)
        active_builder().emit(DeclareBuffer(buffer))
        return buffer


def kernel(name: str, *, block: int | tuple[int, ...], grid: int | tuple[int, ...] = 1,
           min_blocks: int | None = None, host_schedule: str = "static",
           host_max_workers: int | None = None) -> KernelBuilder:
    """Start writing kernel ``name`` launched with ``grid`` blocks of ``block`` threads
    (``host_schedule``, ``host_max_workers``: see ``Kernel``)."""
    return KernelBuilder(name, dim3(block, "block"), dim3(grid, "grid"), min_blocks, host_schedule,
                         host_max_workers)


def shared(name: str, dtype: DataType, shape: tuple[int, ...]) -> Buffer:
    """A static ``__shared__`` array, declared where this is called."""
    buffer = make_buffer(name, dtype, tuple(shape), "shared")
    active_builder().emit(DeclareBuffer(buffer))
    return buffer


def registers(name: str, dtype: DataType, shape: tuple[int, ...]) -> Buffer:
    """A per-thread local array (kept in registers when every index is a compile-time constant)."""
    buffer = make_buffer(name, dtype, tuple(shape), "register")
    active_builder().emit(DeclareBuffer(buffer))
    return buffer


def let(name: str, value: Any) -> Var:
    """A named constant local ``const T name = value;``: names a sub-expression for readability."""
    expr = as_expr(value)
    var = Var(name, expr.type)
    active_builder().emit(Declare(var, expr, const=True))
    return var


def var(name: str, dtype: DataType, init: Any = None) -> Var:
    """A mutable scalar local; change it with ``assign``."""
    value = None if init is None else as_expr(init, dtype)
    if value is not None and value.type != dtype:
        raise TypeError(f"local {name!r} of {dtype} initialised with {value!r} of type {value.type}")
    variable = Var(name, dtype)
    builder = active_builder()
    builder.declare_mutable(variable)
    builder.emit(Declare(variable, value))
    return variable


def assign(variable: Var, value: Any) -> None:
    """``variable = value;`` (Python's ``=`` cannot be overloaded)."""
    builder = active_builder()
    if not isinstance(variable, Var) or not builder.is_mutable(variable):
        # Loop indices and let values may be relied on (ranges, folding): only var() locals change.
        raise TypeError(f"cannot assign to {variable!r}: only locals declared with var() are mutable")
    expr = as_expr(value, variable.type)
    if expr.type != variable.type:
        raise TypeError(f"cannot assign {expr!r} of type {expr.type} to {variable.name} of {variable.type}")
    builder.emit(Assign(variable, expr))


def range_(extent: Any, *, name: str = "k", unroll: bool | int = False, simd: bool = False,
           start: Any = 0, step: int = 1) -> Iterator[Var]:
    """A run-time loop ``for (name = start; name < extent; name += step)`` (``extent`` is the end).

    ``unroll=True`` adds ``#pragma unroll``, ``unroll=N`` adds ``#pragma unroll N``. ``simd=True``
    promises independent iterations (see ``For.simd``): the host vectorises them. ``start`` is any
    i32 value, ``step`` a positive int.
    """
    bound = as_expr(extent, i32)
    if bound.type != i32:
        raise TypeError(f"range_ needs an i32 extent, got {bound!r} of type {bound.type}")
    first = as_expr(start, i32)
    if first.type != i32:
        raise TypeError(f"range_ needs an i32 start, got {first!r} of type {first.type}")
    if not isinstance(step, int) or isinstance(step, bool) or step < 1:
        raise ValueError(f"range_ step must be a positive int, got {step!r}")
    origin = None if isinstance(first, Const) and first.value == 0 else first
    if unroll is not False and (unroll is not True and (not isinstance(unroll, int) or unroll < 1)):
        raise ValueError(f"unroll must be True, False or a positive factor, got {unroll!r}")
    attr = None if unroll is False else Unroll(None if unroll is True else int(unroll))
    builder = active_builder()
    index = Var(name, i32)
    builder.push()
    yield index
    builder.emit(For(index, bound, builder.pop(), attr, simd, origin, step))


@contextmanager
def if_(cond: Any) -> Iterator[None]:
    """``with if_(cond):`` runs its block when ``cond`` holds; follow it with ``with else_():``."""
    condition = as_condition(cond, "if_")
    builder = active_builder()
    builder.push()
    yield
    builder.emit(If(condition, builder.pop()))


@contextmanager
def elif_(cond: Any) -> Iterator[None]:
    """``else if (cond)`` after a ``with if_(...)`` (or ``elif_``) block; ``else_`` may follow it."""
    condition = as_condition(cond, "elif_")
    builder = active_builder()
    head = _open_chain(builder.last(), "elif_")
    builder.push()
    yield
    builder.replace_last(_attach(head, (If(condition, builder.pop()),)))


@contextmanager
def else_() -> Iterator[None]:
    """The last branch of the ``with if_(...)`` / ``elif_(...)`` chain directly before it."""
    builder = active_builder()
    head = _open_chain(builder.last(), "else_")
    builder.push()
    yield
    builder.replace_last(_attach(head, builder.pop()))


def _open_chain(last: object, what: str) -> If:
    """The ``If`` just emitted, if its chain still lacks a final ``else``."""
    branch = last
    while isinstance(branch, If) and len(branch.otherwise) == 1 and isinstance(branch.otherwise[0], If):
        branch = branch.otherwise[0]
    if not isinstance(last, If) or not isinstance(branch, If) or branch.otherwise:
        raise SyntaxError(f"`with {what}(...):` must directly follow a `with if_(...):` or elif_ block")
    return last


def _attach(head: If, otherwise: Body) -> If:
    """``head`` with ``otherwise`` as the else-branch of the innermost ``If`` of its chain."""
    if len(head.otherwise) == 1 and isinstance(head.otherwise[0], If):
        return replace(head, otherwise=(_attach(head.otherwise[0], otherwise),))
    return replace(head, otherwise=otherwise)


@contextmanager
def while_(cond: Any) -> Iterator[None]:
    """``while (cond) { ... }``; ``cond`` is usually a comparison on a ``var``."""
    condition = as_condition(cond, "while_")
    builder = active_builder()
    builder.push()
    yield
    builder.emit(While(condition, builder.pop()))


def sync_threads() -> None:
    """``__syncthreads()``: a barrier for the whole block."""
    active_builder().emit(Sync("block"))


def sync_warp(mask: int = 0xFFFFFFFF) -> None:
    """``__syncwarp(mask)``."""
    active_builder().emit(Sync("warp", mask))


def call(expr: Expr) -> None:
    """Evaluate ``expr`` as a statement (an extern call with no result, for instance)."""
    if not isinstance(expr, Call):
        raise TypeError(f"only calls can be statements, got {expr!r}")
    active_builder().emit(Evaluate(expr))


def atomic_add(address: Expr, value: Any) -> None:
    """``atomicAdd(address, value)`` on an i32, u32 or f32 element (``address = buf.address(i)``)."""
    _atomic("atomic_add", address, value, (i32, u32, f32))


def atomic_max(address: Expr, value: Any) -> None:
    """``atomicMax(address, value)`` on an i32 or u32 element."""
    _atomic("atomic_max", address, value, (i32, u32))


def _atomic(name: str, address: Expr, value: Any, allowed: tuple[DataType, ...]) -> None:
    if not isinstance(address.type, PointerType):
        raise TypeError(f"{name} needs an address (buffer.address(...)), got {address!r}")
    element = address.type.element
    if element not in allowed:
        raise TypeError(f"{name} is not available for {element}")
    v = as_expr(value, element)
    if v.type != element:
        raise TypeError(f"{name}: value {v!r} of type {v.type} does not match the {element} element")
    active_builder().emit(Evaluate(Call(name, (address, v), element)))
