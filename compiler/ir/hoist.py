"""Hoisting of thread- and block-derived index terms into named ``const int`` locals.

Lowered task mappings repeat the same built-in arithmetic in every index: each store of a matmul's
output spells out ``threadIdx.x / 64 * 4096 + threadIdx.x % 32 / 16 * 1024 + ...``. Built-ins are
never written, so an integer expression built only from built-ins and constants has one value for the
whole thread and may be computed once at the top of the kernel. This pass

- gives every built-in used a local (``tid = threadIdx.x``, ``bid_y = blockIdx.y``);
- in every sum, gathers the built-in-only terms into one sum (integer addition is associative and
  commutative, so the value is unchanged) and the constant terms at the end;
- replaces every maximal built-in-only subexpression by a ``const int`` local, one per distinct
  expression, named after where it is first used (``c_offset`` for the flat index of ``c``,
  ``smem_a_row`` for a row index) or after its shape (``tid_div8``, ``tid_mod32_div16``).

A division or remainder is hoisted only by a non-zero constant, so hoisting out of a branch never
introduces a fault the branch guarded against. For example the store index of the efficient matmul,
``blockIdx.x * 16384 + threadIdx.x / 64 * 4096 + ii * 256 + blockIdx.y * 256 + jj + 64``, becomes
``c_offset + ii * 256 + jj + 64`` with ``const int c_offset = bid_x * 16384 + tid / 64 * 4096 +
bid_y * 256;`` declared once.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from compiler.ir.buffer import Buffer
from compiler.ir.expr import Address, Binary, BuiltinVar, Const, Expr, Load, Var, VectorLoad
from compiler.ir.kernel import Kernel
from compiler.ir.rewrite import map_children, statements, structure_key
from compiler.ir.stmt import Body, Declare, DeclareBuffer, For, Stmt, Store, TaskLoop, VectorStore
from compiler.ir.types import i32

#: Operators a hoisted expression may contain (division and remainder only by a non-zero constant).
_HOISTABLE_OPS = frozenset({"add", "sub", "mul", "floordiv", "mod", "bitand", "bitor", "bitxor", "shl", "shr"})
_OP_WORDS = {"sub": "minus", "mul": "x", "floordiv": "div", "mod": "mod", "bitand": "and", "bitor": "or",
             "bitxor": "xor", "shl": "shl", "shr": "shr"}
_BUILTIN_PREFIX = {"threadIdx": "tid", "blockIdx": "bid", "blockDim": "bdim", "gridDim": "gdim"}


def builtin_local_name(builtin: BuiltinVar) -> str:
    """The local standing for a built-in: ``tid`` for ``threadIdx.x``, ``bid_y`` for ``blockIdx.y``."""
    base, _, axis = builtin.name.partition(".")
    prefix = _BUILTIN_PREFIX.get(base, base)
    return prefix if builtin.name == "threadIdx.x" else f"{prefix}_{axis}"


def is_thread_invariant(expr: Expr) -> bool:
    """Whether ``expr`` is an i32 expression of built-ins and constants that can never fault."""
    if isinstance(expr, BuiltinVar | Const):
        return expr.type == i32
    if not isinstance(expr, Binary) or expr.op not in _HOISTABLE_OPS or expr.type != i32:
        return False
    if expr.op in ("floordiv", "mod") and not (isinstance(expr.b, Const) and expr.b.value != 0):
        return False
    return is_thread_invariant(expr.a) and is_thread_invariant(expr.b)


def _uses_builtin(expr: Expr) -> bool:
    if isinstance(expr, BuiltinVar):
        return True
    return isinstance(expr, Binary) and (_uses_builtin(expr.a) or _uses_builtin(expr.b))


def _shape_name(expr: Expr) -> str:
    """A name spelling ``expr``'s structure: ``tid_mod32_div16`` for ``threadIdx.x % 32 / 16``."""
    if isinstance(expr, BuiltinVar):
        return builtin_local_name(expr)
    if isinstance(expr, Const):
        return str(expr.value).replace("-", "m")
    assert isinstance(expr, Binary)
    if expr.op == "add" or isinstance(expr.b, Binary) or isinstance(expr.a, Const):
        return "thread_offset"
    return f"{_shape_name(expr.a)}_{_OP_WORDS[expr.op]}{_shape_name(expr.b)}"


def _terms(expr: Expr) -> list[Expr]:
    if isinstance(expr, Binary) and expr.op == "add":
        return _terms(expr.a) + _terms(expr.b)
    return [expr]


def _sum(terms: list[Expr]) -> Expr:
    total = terms[0]
    for term in terms[1:]:
        total = Binary("add", total, term, i32)
    return total


@dataclass
class _Hoister:
    """The locals found so far, in first-use order. Lives for one call of ``hoist_thread_invariants``."""

    taken: set[str]
    #: Names chosen by an earlier walk: a sum first met in a condition is still named after its index.
    preferred: dict[Any, str] = field(default_factory=dict)
    index_hints: dict[Any, str] = field(default_factory=dict)
    locals_: dict[Any, tuple[Var, Expr]] = field(default_factory=dict)

    def local(self, expr: Expr, hint: str) -> Var:
        key = structure_key(expr)
        if key not in self.locals_:
            name, n = hint, 0
            while name in self.taken:
                n += 1
                name = f"{hint}_{n}"
            self.taken.add(name)
            self.locals_[key] = (Var(name, i32), expr)
        return self.locals_[key][0]

    def builtin(self, builtin: BuiltinVar) -> Var:
        return self.local(builtin, builtin_local_name(builtin))

    def invariant(self, expr: Expr, hint: str | None) -> Expr:
        """The local holding the built-in-only ``expr`` (its built-ins read from their own locals)."""
        if isinstance(expr, Const):
            return expr
        if isinstance(expr, BuiltinVar):
            return self.builtin(expr)
        origin = structure_key(expr)
        if hint is not None:
            self.index_hints.setdefault(origin, hint)
        name = self.preferred.get(origin) or hint or _shape_name(expr)
        return self.local(self._builtins_to_locals(expr), name)

    def _builtins_to_locals(self, expr: Expr) -> Expr:
        if isinstance(expr, BuiltinVar):
            return self.builtin(expr)
        if isinstance(expr, Binary):
            return replace(expr, a=self._builtins_to_locals(expr.a), b=self._builtins_to_locals(expr.b))
        return expr

    def expr(self, expr: Expr, hint: str | None = None) -> Expr:
        # Sums first, so that ``row + 32`` reuses the local of ``row`` instead of declaring another.
        if isinstance(expr, Binary) and expr.op == "add" and expr.type == i32:
            return self._sum(expr, hint)
        if is_thread_invariant(expr) and _uses_builtin(expr):
            return self.invariant(expr, hint)
        if isinstance(expr, Load | VectorLoad):
            return replace(expr, indices=self.indices(expr.buffer, expr.indices))
        if isinstance(expr, Address):  # the address of an element: its indices, as a load's
            load = expr.load
            return replace(expr, load=replace(load, indices=self.indices(load.buffer, load.indices)))
        return map_children(expr, self.expr, lambda b: b)

    def _sum(self, expr: Binary, hint: str | None) -> Expr:
        terms = _terms(expr)
        invariant = [t for t in terms if is_thread_invariant(t) and _uses_builtin(t)]
        constants: list[Expr] = [t for t in terms if isinstance(t, Const)]
        rest = [self.expr(t) for t in terms if not isinstance(t, Const) and not any(t is i for i in invariant)]
        head = [self.invariant(_sum(invariant), hint)] if invariant else []
        return _sum(head + rest + constants)

    def indices(self, buffer: Buffer, indices: tuple[Expr, ...]) -> tuple[Expr, ...]:
        return tuple(self.expr(index, _index_hint(buffer, dim, len(indices))) for dim, index in enumerate(indices))

    def stmt(self, stmt: Stmt) -> Stmt:
        if isinstance(stmt, TaskLoop):
            return stmt  # unlowered: codegen rejects it, naming the loop as it was written
        if isinstance(stmt, Store | VectorStore):
            return replace(stmt, indices=self.indices(stmt.buffer, stmt.indices), value=self.expr(stmt.value))
        if isinstance(stmt, Declare) and stmt.init is not None and is_thread_invariant(stmt.init):
            return stmt  # already a hoisted local: running the pass twice changes nothing
        if isinstance(stmt, Declare | For):
            # The binder is an expression field too; it must stay the very same variable.
            rebuilt = map_children(stmt, self.expr, self.body)
            return replace(rebuilt, var=stmt.var)
        return map_children(stmt, self.expr, self.body)

    def body(self, body: Body) -> Body:
        return tuple(self.stmt(s) for s in body)

    def declarations(self) -> Body:
        # Built-ins first: every other local reads only them, so this order declares before use.
        hoisted = sorted(self.locals_.values(), key=lambda local: not isinstance(local[1], BuiltinVar))
        return tuple(Declare(var, init, const=True) for var, init in hoisted)


def _index_hint(buffer: Buffer, dim: int, rank: int) -> str:
    if rank == 1:
        return f"{buffer.name}_offset"
    position = rank - 1 - dim
    return f"{buffer.name}_{('col', 'row')[position]}" if position < 2 else f"{buffer.name}_d{dim}"


def hoist_thread_invariants(kernel: Kernel) -> Kernel:
    """``kernel`` with built-in-only index arithmetic computed once into named ``const int`` locals.

    The locals are declared after the leading shared-buffer declarations, built-ins first, each after
    the locals it reads. See the module docstring for what is hoisted.
    """
    taken = {p.name for p in kernel.params}
    for stmt in statements(kernel.body):
        if isinstance(stmt, Declare | For):
            taken.add(stmt.var.name)
        elif isinstance(stmt, DeclareBuffer):
            taken.add(stmt.buffer.name)
    survey = _Hoister(set(taken))
    survey.body(kernel.body)
    hoister = _Hoister(taken, preferred=survey.index_hints)
    body = hoister.body(kernel.body)
    lead = 0
    for stmt in body:
        if not (isinstance(stmt, DeclareBuffer) and stmt.buffer.scope == "shared"):
            break
        lead += 1
    return replace(kernel, body=body[:lead] + hoister.declarations() + body[lead:])
