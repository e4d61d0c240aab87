"""The active statement builder: a context variable, so building is scoped, never global state.

A ``StatementBuilder`` is a stack of open bodies. ``push`` opens a nested body (a loop, a branch),
``emit`` appends to the innermost one, ``pop`` closes it and returns its statements. The kernel
language (``compiler.ir.lang``) enters a builder with ``with kernel(...)``; writing a statement
outside one raises a clear error.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from compiler.ir.stmt import Body, Stmt

_ACTIVE: ContextVar[StatementBuilder | None] = ContextVar("warpmap_ir_builder", default=None)


class StatementBuilder:
    """Collects statements into nested bodies while a kernel is being written."""

    def __init__(self) -> None:
        self._bodies: list[list[Stmt]] = [[]]
        self._mutable: set[int] = set()

    def declare_mutable(self, var: object) -> None:
        """Allow ``assign`` to ``var``, a ``var()`` local (loop indices and ``let`` values stay fixed)."""
        self._mutable.add(id(var))

    def is_mutable(self, var: object) -> bool:
        return id(var) in self._mutable

    @property
    def depth(self) -> int:
        """How many bodies are open (1 = only the kernel body)."""
        return len(self._bodies)

    def emit(self, stmt: Stmt) -> None:
        self._bodies[-1].append(stmt)

    def push(self) -> None:
        self._bodies.append([])

    def pop(self) -> Body:
        if len(self._bodies) == 1:
            raise RuntimeError("no nested body is open")
        return tuple(self._bodies.pop())

    def last(self) -> Stmt | None:
        """The statement most recently emitted into the innermost body."""
        body = self._bodies[-1]
        return body[-1] if body else None

    def replace_last(self, stmt: Stmt) -> None:
        self._bodies[-1][-1] = stmt

    def finish(self) -> Body:
        """The kernel body; refuses if a nested body is still open (a ``break`` out of ``range_``)."""
        if len(self._bodies) != 1:
            raise RuntimeError(
                f"{len(self._bodies) - 1} loop or branch bodies were never closed: a Python `break`, "
                "`return` or exception left a range_ / mapping.on loop early"
            )
        return tuple(self._bodies[0])


def active_builder() -> StatementBuilder:
    """The builder of the kernel being written, or a clear error outside ``with kernel(...)``."""
    builder = _ACTIVE.get()
    if builder is None:
        raise RuntimeError("kernel statements can only be written inside `with kernel(...) as k:`")
    return builder


@contextmanager
def building(builder: StatementBuilder) -> Iterator[StatementBuilder]:
    """Make ``builder`` the active one for the duration of the ``with`` block."""
    token = _ACTIVE.set(builder)
    try:
        yield builder
    finally:
        _ACTIVE.reset(token)
