"""Code generation: lowered kernel IR to source text, one renderer with per-target dialects."""

from compiler.codegen.cuda import render_cuda, render_program
from compiler.codegen.dialect import CUDA, Dialect
from compiler.codegen.kernel import render_kernel
from compiler.codegen.names import CodegenError

__all__ = ["CUDA", "CodegenError", "Dialect", "render_cuda", "render_kernel", "render_program"]
