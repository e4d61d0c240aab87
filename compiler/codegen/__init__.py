"""Code generation: lowered kernel IR to source text, one renderer with per-target dialects.

``render_cuda``/``render_program`` spell CUDA (the ``emu`` and ``cuda`` targets), ``render_host`` the host
C++ dialect (the ``cpu`` target). Each target renders a program's launches itself, in its ``compile``.
"""

from compiler.codegen.cpp import render_host
from compiler.codegen.cuda import render_cuda, render_program
from compiler.codegen.dialect import CUDA, Dialect
from compiler.codegen.kernel import render_kernel
from compiler.codegen.names import CodegenError

__all__ = ["CUDA", "CodegenError", "Dialect", "render_cuda", "render_host", "render_kernel", "render_program"]
