"""Rendering of lowered IR statements to indented C-family text."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from compiler.codegen.dialect import Dialect
from compiler.codegen.expressions import ExprRenderer, type_name
from compiler.codegen.names import CodegenError, Names
from compiler.ir.bounds import RangeEnv, after, assume, inside
from compiler.ir.expr import Binary, Load
from compiler.ir.rewrite import structurally_equal
from compiler.ir.stmt import (
    Assign,
    Body,
    Declare,
    DeclareBuffer,
    Evaluate,
    For,
    If,
    Stmt,
    Store,
    Sync,
    TaskLoop,
    VectorStore,
    While,
)

INDENT = "    "
_COMPOUND = {"add": "+=", "sub": "-=", "mul": "*="}


@dataclass(frozen=True)
class StmtRenderer:
    """Renders statements, tracking the ranges known at each one as ``simplify_body`` does."""

    dialect: Dialect
    names: Names
    env: RangeEnv = field(default_factory=RangeEnv)

    @property
    def expr(self) -> ExprRenderer:
        return ExprRenderer(self.dialect, self.names, self.env)

    def within(self, env: RangeEnv) -> StmtRenderer:
        return replace(self, env=env)

    def body(self, body: Body, depth: int) -> list[str]:
        lines: list[str] = []
        renderer = self
        for stmt in body:
            lines.extend(renderer.stmt(stmt, depth))
            renderer = renderer.within(after(stmt, renderer.env))
        return lines

    def stmt(self, stmt: Stmt, depth: int) -> list[str]:
        pad = INDENT * depth
        e, d = self.expr, self.dialect
        if isinstance(stmt, TaskLoop):
            raise CodegenError(
                f"unlowered task loop: {stmt.mapping!r}.on({stmt.worker!r}); "
                "lower the kernel with compiler.ir.lower(kernel) before rendering it"
            )
        if isinstance(stmt, Declare):
            const = "const " if stmt.const else ""
            init = "" if stmt.init is None else f" = {e(stmt.init)}"
            return [f"{pad}{const}{type_name(d, stmt.var.type)} {self.names.var(stmt.var)}{init};"]
        if isinstance(stmt, Assign):
            return [f"{pad}{self.names.var(stmt.var)} = {e(stmt.value)};"]
        if isinstance(stmt, Store):
            return [pad + self._store(stmt)]
        if isinstance(stmt, VectorStore):
            pointer = e.address(stmt.buffer, stmt.indices)[0]
            return [f"{pad}*reinterpret_cast<{type_name(d, stmt.value.type)}*>({pointer}) = {e(stmt.value)};"]
        if isinstance(stmt, DeclareBuffer):
            return self._declare_buffer(stmt, pad)
        if isinstance(stmt, Evaluate):
            return [f"{pad}{e(stmt.expr)};"]
        if isinstance(stmt, Sync):
            if stmt.scope == "block":
                return [pad + d.block_barrier]
            if stmt.mask == 0xFFFFFFFF:
                return [pad + d.warp_barrier_full]
            return [pad + d.warp_barrier.format(mask=f"{stmt.mask:#x}u")]
        if isinstance(stmt, If):
            return self._if(stmt, depth)
        if isinstance(stmt, For):
            return self._for(stmt, depth)
        if isinstance(stmt, While):
            return [f"{pad}while ({e(stmt.cond)}) {{", *self.body(stmt.body, depth + 1), pad + "}"]
        raise CodegenError(f"cannot render statement {type(stmt).__name__}")

    def _store(self, stmt: Store) -> str:
        e = self.expr
        target = e.element(stmt.buffer, stmt.indices)
        value = stmt.value
        # acc[i] = acc[i] + x  reads better as  acc[i] += x
        if (isinstance(value, Binary) and value.op in _COMPOUND and isinstance(value.a, Load)
                and value.a.buffer is stmt.buffer
                and all(map(structurally_equal, value.a.indices, stmt.indices))):
            return f"{target} {_COMPOUND[value.op]} {e(value.b)};"
        return f"{target} = {e(value)};"

    def _declare_buffer(self, stmt: DeclareBuffer, pad: str) -> list[str]:
        buffer, d = stmt.buffer, self.dialect
        name = self.names.buffer(buffer)
        dims = "".join(f"[{n}]" for n in buffer.const_shape)
        element = type_name(d, buffer.dtype)
        if buffer.scope == "shared":
            return [pad + d.shared_array.format(type=element, name=name, dims=dims)]
        if buffer.scope == "register":
            return [f"{pad}{element} {name}{dims};"]
        if buffer.scope == "dynamic_shared":
            where = f"at byte {buffer.byte_offset} of {d.dynamic_shared_name}"
            return [f"{pad}// {name}: {element}{dims} {where}"]
        raise CodegenError(f"global tensor {name} cannot be declared inside a kernel")

    def _if(self, stmt: If, depth: int) -> list[str]:
        pad = INDENT * depth
        then = self.within(assume(stmt.cond, self.env)).body(stmt.then, depth + 1)
        lines = [f"{pad}if ({self.expr(stmt.cond)}) {{", *then]
        otherwise = stmt.otherwise
        while len(otherwise) == 1 and isinstance(otherwise[0], If):
            chained = otherwise[0]
            then = self.within(assume(chained.cond, self.env)).body(chained.then, depth + 1)
            lines += [f"{pad}}} else if ({self.expr(chained.cond)}) {{", *then]
            otherwise = chained.otherwise
        if otherwise:
            lines += [f"{pad}}} else {{", *self.body(otherwise, depth + 1)]
        return [*lines, pad + "}"]

    def _for(self, stmt: For, depth: int) -> list[str]:
        pad = INDENT * depth
        lines: list[str] = []
        if stmt.unroll is not None and stmt.unroll.explicit:
            raise CodegenError(f"loop over {stmt.var.name} is marked for explicit unrolling: lower it")
        if stmt.simd and self.dialect.simd_pragma:
            # GCC takes one pragma before a loop: vector lanes subsume the unroll request.
            lines.append(pad + self.dialect.simd_pragma)
        elif stmt.unroll is not None:
            pragma = self.dialect.unroll_pragma if stmt.unroll.factor is None else (
                self.dialect.unroll_factor_pragma.format(factor=stmt.unroll.factor))
            lines.append(pad + pragma)
        name = self.names.var(stmt.var)
        start = "0" if stmt.start is None else self.expr(stmt.start)
        advance = f"++{name}" if stmt.step == 1 else f"{name} += {stmt.step}"
        header = f"for (int {name} = {start}; {name} < {self.expr(stmt.extent)}; {advance}) {{"
        inner = self.within(inside(stmt, self.env)).body(stmt.body, depth + 1)
        return [*lines, pad + header, *inner, pad + "}"]
