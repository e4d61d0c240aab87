"""Statements of the kernel IR. Every node is a frozen dataclass; a body is a tuple of statements.

``TaskLoop`` is the only high-level statement: ``lower_task_loops`` replaces it with ``For`` loops,
``If`` bound checks and index arithmetic, and code generation rejects any that remain.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from compiler.ir.buffer import Buffer
    from compiler.ir.expr import Expr, Var


class Stmt:
    """Base of all statement nodes."""


Body = tuple[Stmt, ...]


@dataclass(frozen=True)
class Unroll:
    """How a ``For`` is unrolled: ``#pragma unroll`` (factor None) or ``#pragma unroll N``.

    ``explicit`` loops are replicated by ``lower_task_loops`` itself (the ``u+`` repeat attribute), so
    codegen never sees them.
    """

    factor: int | None = None
    explicit: bool = False


@dataclass(frozen=True)
class Evaluate(Stmt):
    """An expression evaluated for its effect: an atomic, a barrier-free intrinsic, an extern call."""

    expr: Expr


@dataclass(frozen=True)
class Declare(Stmt):
    """``T var = init;`` (``const`` when the value never changes)."""

    var: Var
    init: Expr | None
    const: bool = False


@dataclass(frozen=True)
class Assign(Stmt):
    """``var = value;`` for a mutable scalar declared with ``Declare``."""

    var: Var
    value: Expr


@dataclass(frozen=True)
class DeclareBuffer(Stmt):
    """A shared (static or dynamic) or register buffer coming into scope."""

    buffer: Buffer


@dataclass(frozen=True)
class Store(Stmt):
    """``buffer[indices] = value;``"""

    buffer: Buffer
    indices: tuple[Expr, ...]
    value: Expr


@dataclass(frozen=True)
class VectorStore(Stmt):
    """Store the vector ``value`` into ``value.type.lanes`` consecutive elements from ``buffer[indices]``."""

    buffer: Buffer
    indices: tuple[Expr, ...]
    value: Expr


@dataclass(frozen=True)
class If(Stmt):
    cond: Expr
    then: Body
    otherwise: Body = ()


@dataclass(frozen=True)
class For(Stmt):
    """``for (var = start; var < extent; var += step) body``: ``extent`` is the exclusive end.

    ``start`` is an i32 expression, ``None`` for zero (the form every pass and target knew first,
    rendered as before); ``step`` is a positive constant, so a loop's index range is known from its
    ends alone. ``simd`` is the writer's promise that iterations are independent (no value carried
    from one to the next), so a host target may run them in vector lanes (``#pragma omp simd``); GPU
    targets ignore it.
    """

    var: Var
    extent: Expr
    body: Body
    unroll: Unroll | None = None
    simd: bool = False
    start: Expr | None = None
    step: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.step, int) or isinstance(self.step, bool) or self.step < 1:
            raise ValueError(f"loop over {self.var.name}: step must be a positive int, got {self.step!r}")


@dataclass(frozen=True)
class While(Stmt):
    cond: Expr
    body: Body


@dataclass(frozen=True)
class Sync(Stmt):
    """A barrier: ``block`` is ``__syncthreads()``, ``warp`` is ``__syncwarp(mask)``."""

    scope: Literal["block", "warp"] = "block"
    mask: int = 0xFFFFFFFF


@dataclass(frozen=True)
class TaskLoop(Stmt):
    """The body run for every task that ``mapping`` assigns to ``worker`` (``mapping.on(worker)``).

    ``indices`` are the symbolic task indices the body was written with, one per task dimension.
    """

    mapping: Any
    worker: Expr
    indices: tuple[Var, ...]
    body: Body
