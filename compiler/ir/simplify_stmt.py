"""Simplification of statements: fold every expression with the ranges known at its position.

Loop indices range over their extent, ``const`` locals over their value's range, and the then-branch
of ``if (x < c)`` knows ``x < c``. Branches on a constant condition are replaced by the taken branch,
loops of extent 0 vanish and loops of extent 1 become their body.
"""

from __future__ import annotations

from dataclasses import replace

from compiler.ir.bounds import RangeEnv, after, assume, inside
from compiler.ir.expr import Const, Expr, Var
from compiler.ir.rewrite import map_children, substitute
from compiler.ir.simplify import simplify_expr
from compiler.ir.stmt import Body, Declare, For, If, Stmt, While
from compiler.ir.types import i32


def simplify_body(body: Body, env: RangeEnv) -> Body:
    """``body`` simplified under ``env`` (see the module docstring)."""
    out: list[Stmt] = []
    for stmt in body:
        simplified, env = _statement(stmt, env)
        out.extend(simplified)
    return tuple(out)


def _statement(stmt: Stmt, env: RangeEnv) -> tuple[Body, RangeEnv]:
    if isinstance(stmt, If):
        cond = simplify_expr(stmt.cond, env)
        if isinstance(cond, Const):
            return simplify_body(stmt.then if cond.value else stmt.otherwise, env), env
        then = simplify_body(stmt.then, assume(cond, env))
        otherwise = simplify_body(stmt.otherwise, env)
        if not then and not otherwise:
            return (), env
        return (If(cond, then, otherwise),), env
    if isinstance(stmt, For):
        extent = simplify_expr(stmt.extent, env)
        start = None if stmt.start is None else simplify_expr(stmt.start, env)
        if isinstance(start, Const) and start.value == 0:
            start = None
        first = 0 if start is None else start.value if isinstance(start, Const) else None
        if isinstance(extent, Const) and first is not None and extent.value <= first:
            return (), env
        if isinstance(extent, Const) and first is not None and extent.value - first <= stmt.step:
            inlined = tuple(substitute(s, {stmt.var: Const(first, i32)}) for s in stmt.body)
            return simplify_body(inlined, env), env
        loop = replace(stmt, extent=extent, start=start)
        return (replace(loop, body=simplify_body(stmt.body, inside(loop, env))),), env
    if isinstance(stmt, While):
        return (While(simplify_expr(stmt.cond, env), simplify_body(stmt.body, env)),), env
    if isinstance(stmt, Declare) and stmt.const and stmt.init is not None:
        declared = replace(stmt, init=simplify_expr(stmt.init, env))
        return (declared,), after(declared, env)
    return (map_children(stmt, lambda e: _expr(e, env), lambda b: simplify_body(b, env)),), env


def _expr(expr: Expr, env: RangeEnv) -> Expr:
    # Binders (the variable of a Declare or Assign) pass through untouched.
    return expr if isinstance(expr, Var) else simplify_expr(expr, env)
