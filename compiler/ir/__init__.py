"""Kernel IR and the Python kernel language that builds it: one import for writing operators.

    from compiler.ir import f32, kernel, lower, shared, threadIdx, ...

Write a kernel inside ``with kernel(...)`` (see ``compiler.ir.lang``), lower it with ``lower`` and render
it with ``compiler.codegen.render_cuda``.
"""

from compiler.ir.buffer import Buffer, column_major_strides, row_major_strides
from compiler.ir.expr import Expr, Var
from compiler.ir.intrinsics import (
    abs_,
    cast,
    exp,
    exp2,
    extern_call,
    fast_div,
    fast_exp,
    fma,
    lane,
    log,
    logical_and,
    logical_not,
    logical_or,
    make_vector,
    max_,
    min_,
    rsqrt,
    select,
    shfl_down_sync,
    shfl_sync,
    shfl_up_sync,
    shfl_xor_sync,
    sqrt,
)
from compiler.ir.kernel import Kernel
from compiler.ir.lang import (
    assign,
    atomic_add,
    atomic_max,
    blockDim,
    blockIdx,
    call,
    elif_,
    else_,
    gridDim,
    if_,
    kernel,
    let,
    range_,
    registers,
    shared,
    sync_threads,
    sync_warp,
    threadIdx,
    var,
    while_,
)
from compiler.ir.local import local_index, local_shape, task_registers
from compiler.ir.lower import lower
from compiler.ir.types import bf16, boolean, f16, f32, i32, ptr, u32, vec

__all__ = [
    "Buffer", "Expr", "Kernel", "Var", "abs_", "assign", "atomic_add", "atomic_max", "bf16", "blockDim",
    "blockIdx", "boolean", "call", "cast", "column_major_strides", "elif_", "else_", "exp", "exp2", "extern_call",
    "f16", "f32", "fast_div", "fast_exp", "fma", "gridDim", "i32", "if_", "kernel", "lane", "let",
    "local_index", "local_shape", "log", "logical_and", "logical_not", "logical_or", "lower", "make_vector",
    "max_", "min_", "ptr", "range_", "registers", "row_major_strides", "rsqrt", "select", "shared",
    "shfl_down_sync", "shfl_sync", "shfl_up_sync", "shfl_xor_sync", "sqrt", "sync_threads", "sync_warp",
    "task_registers", "threadIdx", "u32", "var", "vec", "while_",
]
