"""Unique C names for a kernel's parameters, locals, loop indices and buffers.

IR names are hints: two variables may share one (``i`` in two task loops). Every declared variable
and buffer gets a name unique in the whole kernel (``i``, ``i_1`` ...), so no declaration shadows
another and replicated code stays valid.
"""

from __future__ import annotations

from dataclasses import dataclass

from compiler.ir.buffer import Buffer
from compiler.ir.expr import Var
from compiler.ir.kernel import Kernel
from compiler.ir.rewrite import statements
from compiler.ir.stmt import Declare, DeclareBuffer, For

#: Names a variable must not take: C++ keywords in generated code and the built-ins it uses.
RESERVED = frozenset({
    "int", "float", "bool", "char", "void", "const", "if", "else", "for", "while", "do", "return", "break",
    "continue", "unsigned", "signed", "short", "long", "double", "struct", "class", "static", "extern",
    "auto", "switch", "case", "default", "true", "false", "new", "delete", "this", "template", "typename",
    "threadIdx", "blockIdx", "blockDim", "gridDim", "min", "max", "dynamic_smem",
})


@dataclass(frozen=True)
class Names:
    """The C name of every variable (by identity) and buffer (by identity) of one kernel."""

    variables: dict[int, str]
    buffers: dict[int, str]

    def var(self, var: Var) -> str:
        try:
            return self.variables[id(var)]
        except KeyError:
            raise CodegenError(
                f"variable {var.name!r} is used but never declared in this kernel "
                "(a task-loop index used outside its loop, or a value from another kernel?)"
            ) from None

    def buffer(self, buffer: Buffer) -> str:
        if buffer.scope == "global":
            assert buffer.pointer is not None
            return self.var(buffer.pointer)
        try:
            return self.buffers[id(buffer)]
        except KeyError:
            raise CodegenError(f"buffer {buffer.name!r} is used but never declared in this kernel") from None


class CodegenError(ValueError):
    """The IR cannot be rendered: an unlowered construct, an undeclared name, an unsupported type."""


def assign_names(kernel: Kernel) -> Names:
    """Give every parameter, declared variable and declared buffer of ``kernel`` a unique name."""
    taken: set[str] = set(RESERVED)
    variables: dict[int, str] = {}
    buffers: dict[int, str] = {}

    def unique(hint: str) -> str:
        name, n = hint, 0
        while name in taken:
            n += 1
            name = f"{hint}_{n}"
        taken.add(name)
        return name

    if kernel.name in RESERVED:
        raise CodegenError(f"kernel name {kernel.name!r} is reserved in the generated source")
    for param in kernel.params:
        if param.name in taken:
            raise CodegenError(f"kernel {kernel.name}: parameter name {param.name!r} is reserved")
        variables[id(param)] = unique(param.name)
    for stmt in statements(kernel.body):
        if isinstance(stmt, Declare | For) and id(stmt.var) not in variables:
            variables[id(stmt.var)] = unique(stmt.var.name)
        elif isinstance(stmt, DeclareBuffer) and id(stmt.buffer) not in buffers:
            buffers[id(stmt.buffer)] = unique(stmt.buffer.name)
    return Names(variables, buffers)
