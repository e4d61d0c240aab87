"""Generic traversal of IR trees: rebuild a node with its child expressions or bodies transformed.

Passes stay short by handling only the nodes they care about and delegating the rest to
``map_children``. Buffers are leaves here (their shapes belong to the declaration, not the use).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from typing import Any, TypeVar, cast

from compiler.ir.expr import Expr, Var
from compiler.ir.stmt import Body, Declare, For, Stmt
from compiler.ir.types import DataType, PointerType, VectorType

Node = TypeVar("Node", bound=Expr | Stmt)

ExprFn = Callable[[Expr], Expr]
BodyFn = Callable[[Body], Body]


def map_children(node: Node, on_expr: ExprFn, on_body: BodyFn) -> Node:
    """``node`` with every child expression passed through ``on_expr`` and every body through ``on_body``.

    Returns ``node`` itself when nothing changed, so unchanged trees are shared.
    """
    changes: dict[str, Any] = {}
    for name in _field_names(type(node)):
        value = getattr(node, name)
        new = _map_value(value, on_expr, on_body)
        if new is not value:
            changes[name] = new
    return replace(node, **changes) if changes else node  # type: ignore[type-var]


def _field_names(cls: type) -> tuple[str, ...]:
    # The dataclass's own field table: faster than dataclasses.fields() on these hot paths.
    return tuple(getattr(cls, "__dataclass_fields__", ()))


def _map_value(value: Any, on_expr: ExprFn, on_body: BodyFn) -> Any:
    if isinstance(value, Expr):
        return on_expr(value)
    if isinstance(value, tuple) and value:
        if all(isinstance(v, Stmt) for v in value):
            return on_body(value)
        if all(isinstance(v, Expr) for v in value):
            mapped = tuple(on_expr(v) for v in value)
            return value if all(a is b for a, b in zip(mapped, value, strict=True)) else mapped
    return value


def rewrite_expr(expr: Expr, fn: ExprFn) -> Expr:
    """Rebuild ``expr`` bottom-up, applying ``fn`` to every node after its children."""
    return fn(map_children(expr, lambda e: rewrite_expr(e, fn), lambda b: b))


def substitute(node: Node, values: Mapping[Var, Expr]) -> Node:
    """``node`` with every use of the variables in ``values`` replaced by their expression."""
    if not values:
        return node

    def on_expr(expr: Expr) -> Expr:
        if isinstance(expr, Var) and expr in values:
            return values[expr]
        return map_children(expr, on_expr, on_body)

    def on_body(body: Body) -> Body:
        return tuple(substitute(s, values) for s in body)

    if isinstance(node, Expr):
        return cast(Node, on_expr(node))
    return map_children(node, on_expr, on_body)


def walk(node: Expr | Stmt) -> Iterator[Expr | Stmt]:
    """Every node under ``node`` (itself included), statements and expressions, in pre-order."""
    yield node
    children: list[Expr | Stmt] = []

    def collect_expr(expr: Expr) -> Expr:
        children.append(expr)
        return expr

    def collect_body(body: Body) -> Body:
        children.extend(body)
        return body

    map_children(node, collect_expr, collect_body)
    for child in children:
        yield from walk(child)


def statements(body: Body) -> Iterator[Stmt]:
    """Every statement in ``body`` and the bodies nested in it, in pre-order (expressions skipped)."""
    for stmt in body:
        yield stmt
        for name in _field_names(type(stmt)):
            value = getattr(stmt, name)
            if isinstance(value, tuple) and value and isinstance(value[0], Stmt):
                yield from statements(value)


def fresh_copy(body: Body) -> Body:
    """``body`` with every variable it declares (locals, loop indices) replaced by a new one.

    Replicating a body (explicit unrolling) needs this: each copy must declare its own variables.
    """
    renamed: dict[Var, Expr] = {}
    for stmt in statements(body):
        if isinstance(stmt, Declare | For) and stmt.var not in renamed:
            renamed[stmt.var] = Var(stmt.var.name, stmt.var.type)

    # Binders are expression fields too, so one substitution renames declarations and uses alike.
    return tuple(substitute(s, renamed) for s in body)


def structurally_equal(a: Expr, b: Expr) -> bool:
    """Whether two expressions are the same tree (variables compared by identity)."""
    return structure_key(a) == structure_key(b)


def structure_key(node: Any) -> Any:
    """A hashable key equal for structurally equal trees (variables by identity)."""
    if isinstance(node, Var):
        return ("var", id(node))
    if isinstance(node, Expr):
        fields = getattr(node, "__dataclass_fields__", {})
        return (type(node).__name__, *(structure_key(getattr(node, f)) for f in fields))
    if isinstance(node, tuple):
        return tuple(structure_key(x) for x in node)
    if isinstance(node, float | int | bool | str | None | DataType | VectorType | PointerType):
        return node
    return ("obj", id(node))

