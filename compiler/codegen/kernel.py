"""A whole kernel to text: includes, the entry point's signature, its body."""

from __future__ import annotations

from compiler.codegen.dialect import Dialect
from compiler.codegen.expressions import pointer_param
from compiler.codegen.names import assign_names
from compiler.codegen.statements import INDENT, StmtRenderer
from compiler.ir.bounds import RangeEnv
from compiler.ir.buffer import Buffer
from compiler.ir.expr import Call, Expr, Load, VectorLoad
from compiler.ir.hoist import hoist_thread_invariants
from compiler.ir.kernel import Kernel
from compiler.ir.rewrite import walk
from compiler.ir.stmt import DeclareBuffer, Store, VectorStore
from compiler.ir.types import DataType, PointerType, Type, VectorType


def render_kernel(kernel: Kernel, dialect: Dialect) -> str:
    """The complete translation unit of ``kernel`` in ``dialect`` (a pure function of its arguments).

    Thread-invariant index arithmetic is first hoisted into named locals, so indices read
    ``c[c_row * 256 + ii * 256 + c_col + jj]`` rather than repeating ``threadIdx.x`` terms.
    """
    kernel = hoist_thread_invariants(kernel)
    names = assign_names(kernel)
    renderer = StmtRenderer(dialect, names, RangeEnv.for_launch(kernel.block, kernel.grid))
    params = [pointer_param(dialect, names, p) for p in kernel.params]
    if kernel.min_blocks is None:
        bounds = dialect.launch_bounds.format(threads=kernel.threads_per_block)
    else:
        bounds = dialect.launch_bounds_min_blocks.format(threads=kernel.threads_per_block,
                                                         min_blocks=kernel.min_blocks)
    signature = f"{dialect.entry_qualifiers} void {bounds} {kernel.name}("
    one_line = signature + ", ".join(params) + ") {"
    if len(one_line) <= 110:
        head = [one_line]
    else:
        wrapped = [f"{INDENT}{INDENT}{p}," for p in params]
        head = [signature, *wrapped[:-1], wrapped[-1][:-1] + ") {"]
    body: list[str] = []
    if kernel.dynamic_shared_bytes:
        body.append(INDENT + dialect.dynamic_shared_array.format(name=dialect.dynamic_shared_name))
    body += renderer.body(kernel.body, 1)
    includes = [_include(h, dialect) for h in sorted(required_headers(kernel, dialect))]
    preamble = [*includes, ""] if includes else []
    return "\n".join([*preamble, *head, *body, "}", ""])


def _include(header: str, dialect: Dialect) -> str:
    return f'#include "{header}"' if header in dialect.local_headers else f"#include <{header}>"


def required_headers(kernel: Kernel, dialect: Dialect) -> set[str]:
    """Headers for the element types and extern functions ``kernel`` uses."""
    headers: set[str] = set()
    types: list[Type] = [p.type for p in kernel.params]
    for stmt in kernel.body:
        for node in walk(stmt):
            if isinstance(node, Expr):
                types.append(node.type)
                if isinstance(node, Call) and node.header is not None and node.func not in dialect.functions:
                    headers.add(node.header)
                if isinstance(node, Call) and node.func in dialect.function_headers:
                    headers.add(dialect.function_headers[node.func])
            buffer = _buffer_of(node)
            if buffer is not None:
                types.append(buffer.dtype)
    for t in types:
        scalar = _scalar(t)
        if scalar is not None and scalar.name in dialect.type_headers:
            headers.add(dialect.type_headers[scalar.name])
    return headers


def _buffer_of(node: object) -> Buffer | None:
    if isinstance(node, Load | VectorLoad | Store | VectorStore | DeclareBuffer):
        return node.buffer
    return None


def _scalar(t: Type) -> DataType | None:
    if isinstance(t, PointerType | VectorType):
        return t.element
    return t if isinstance(t, DataType) else None
