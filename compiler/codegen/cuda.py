"""CUDA C++ code generation: a lowered kernel (or each launch of a program) to a ``KernelSource`` ready for NVRTC."""

from __future__ import annotations

from compiler.codegen.dialect import CUDA
from compiler.codegen.kernel import render_kernel
from compiler.ir.kernel import Kernel
from compiler.ir.types import PointerType
from compiler.program import Program
from compiler.source import KernelSource, Param


def render_cuda(kernel: Kernel) -> KernelSource:
    """The CUDA source of the lowered ``kernel`` and its launch data.

    Run ``compiler.ir.lower`` first: task loops and explicitly unrolled loops are rejected with a
    ``CodegenError``.
    """
    params = tuple(
        Param(p.name, p.type.element.dtype if isinstance(p.type, PointerType) else p.type.dtype,  # type: ignore[union-attr]
              pointer=isinstance(p.type, PointerType))
        for p in kernel.params
    )
    return KernelSource(
        entry=kernel.name,
        source=render_kernel(kernel, CUDA),
        grid=kernel.grid,
        block=kernel.block,
        params=params,
        shared_bytes=kernel.dynamic_shared_bytes,
    )


def render_program(program: Program) -> tuple[KernelSource, ...]:
    """The CUDA source of each of ``program``'s launches, in launch order."""
    return tuple(render_cuda(launch.kernel) for launch in program.launches)
