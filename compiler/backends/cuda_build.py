"""What the two CUDA targets (``emu`` and ``cuda``) share in ``compile``: every launch rendered as CUDA and
built by NVRTC for each arch checked, with ptxas's report held against the device's limits.

A launch that spills, or whose registers or shared memory pass the device's limits, makes the whole
program ``invalid`` (the schedule does not fit); an NVRTC error, or a program the CUDA dialect cannot
render, is a ``compile_error``. This is the one place CUDA rendering happens for the targets (tests that
hand-edit the CUDA text patch :func:`render_program` here).
"""

from __future__ import annotations

import traceback
from collections.abc import Sequence

from compiler.backends.nvrtc import DEFAULT_ARCHS, ResourceUsage, compile_source
from compiler.backends.target import CompileFailure, LaunchBuild
from compiler.codegen import render_program
from compiler.device import DeviceSpec
from compiler.diskcache import DiskCache
from compiler.program import Program
from compiler.source import KernelSource

__all__ = ["DEFAULT_ARCHS", "build_launches", "render", "resource_problem"]


def resource_problem(kernel: KernelSource, usage: ResourceUsage, device: DeviceSpec) -> str | None:
    """Why ptxas's report rules the kernel out on ``device`` (spills, registers, shared memory), or None."""
    if usage.spill_stores or usage.spill_loads:
        return f"spills {usage.spill_stores} bytes stored, {usage.spill_loads} loaded"
    if usage.registers * kernel.threads_per_block > device.max_registers_per_block:
        return f"{usage.registers} registers x {kernel.threads_per_block} threads > {device.max_registers_per_block}"
    if usage.shared_bytes > device.max_shared_static:
        return f"static shared memory {usage.shared_bytes} B > {device.max_shared_static} B"
    if usage.shared_bytes + kernel.shared_bytes > device.max_shared_dynamic:
        return f"shared memory {usage.shared_bytes + kernel.shared_bytes} B > {device.max_shared_dynamic} B"
    return None


def render(program: Program) -> tuple[KernelSource, ...] | CompileFailure:
    """The CUDA source of each launch, or a ``compile_error`` with the renderer's traceback."""
    try:
        return render_program(program)
    except Exception as exc:  # a program the dialect cannot spell is a bug in its template
        trace = "".join(traceback.format_exception(exc)).rstrip()
        return CompileFailure("compile_error", f"render raised {type(exc).__name__}: {exc}\n{trace}")


def build_launches(
    sources: Sequence[KernelSource],
    device: DeviceSpec,
    archs: Sequence[str] = DEFAULT_ARCHS,
    cache: DiskCache | None = None,
    keep: str | None = None,
) -> tuple[LaunchBuild, ...] | CompileFailure:
    """Each launch built for every arch in ``archs`` (and ``keep``, whose CUBIN the build holds as binary
    ``"cubin"``), in order, stopping at the first that fails; a message about a launch of a multi-launch
    program names its entry."""
    builds: list[LaunchBuild] = []
    for kernel in sources:
        usage: dict[str, ResourceUsage] = {}
        binaries: dict[str, bytes] = {}
        failure: CompileFailure | None = None
        for arch in dict.fromkeys([*archs, *([keep] if keep else [])]):
            build = compile_source(kernel, arch, cache=cache)
            if not build.ok or build.usage is None:
                error = build.error
                where = f" at line {error.line}: {error.source_line.strip()}" if error and error.source_line else ""
                failure = CompileFailure("compile_error", f"{arch}: {error.message if error else 'no report'}{where}",
                                         log=build.log)
                break
            usage[arch] = build.usage
            if arch == keep and build.binary is not None:
                binaries["cubin"] = build.binary
            problem = resource_problem(kernel, build.usage, device)
            if problem is not None:
                failure = CompileFailure("invalid", f"{arch}: {problem}")
                break
        builds.append(LaunchBuild(kernel, usage, binaries))
        if failure is not None:
            message = failure.message if len(sources) == 1 else f"{kernel.entry}: {failure.message}"
            return CompileFailure(failure.kind, message, failure.log, tuple(builds))
    return tuple(builds)
