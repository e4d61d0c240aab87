"""``warpmap doctor``: what this machine offers warpmap, as a table or as JSON.

The pieces first (NVRTC, headers, compilers, CPU, GPUs), then one row per target of
``compiler.backends.TARGETS``: whether it can run programs here, and why not. ``--peak`` adds the host's
roofs, measured on the cores a launch uses (a few seconds): the FP32 peak by a kernel of register FMAs,
beside the estimate from the clock the OS reports, which boost passes (``compiler.backends.cpu_peak``),
and the bandwidth from memory by vector loads of a buffer larger than the caches
(``compiler.backends.cpu_bandwidth``).

Exits 0 when every piece a run needs is there, GPU or not (no GPU is a normal state: the ``cpu`` and
``emu`` targets need none); exits 1 when NVRTC is unusable, the CUDA headers are missing or the
emulator's C++ compiler is not on PATH, since kernels cannot be built or checked then.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from compiler.backends import TARGETS, get_target
from compiler.backends.cpu_target import CpuTarget
from compiler.cpu_device import CpuDevice
from compiler.toolchain import ToolchainReport, detect_toolchain
from service.cli import table

Row = tuple[str, str, str]
#: What each target runs, for its row when it is available.
TARGET_ROLES = {
    "cpu": "cpu templates, built by the host C++ compiler with OpenMP, timed on the host",
    "cuda": "CUDA templates on the GPU, timed with CUDA events",
    "emu": "CUDA templates checked on the CUDA emulator (correctness only, no timings)",
}


def run(args: argparse.Namespace) -> int:
    report = detect_toolchain()
    targets = target_states()
    peak = measure_peak(targets.get("cpu", "no cpu target")) if args.peak else None
    bandwidth = measure_bandwidth(targets.get("cpu", "no cpu target")) if args.peak else None
    if args.json:
        print(json.dumps(report_json(report, targets, peak, bandwidth), indent=2))
    else:
        table.print_table(HEADER, report_rows(report, targets, peak, bandwidth))
    return exit_status(report)


def _cpu_target() -> CpuTarget:
    """The registered ``cpu`` target, as the class whose measuring methods the ``Target`` protocol lacks."""
    target = get_target("cpu")
    assert isinstance(target, CpuTarget)
    return target


def measure_peak(cpu_reason: str | None) -> float | str:
    """The cpu target's FP32 peak in GFLOP/s, measured, or why it could not be."""
    if cpu_reason is not None:
        return f"the cpu target cannot run here: {cpu_reason}"
    try:
        return _cpu_target().measured_peak_gflops()
    except RuntimeError as error:  # the FMA kernel did not build, or was optimised away
        return str(error)


def measure_bandwidth(cpu_reason: str | None) -> float | str:
    """The cpu target's bandwidth from memory in GB/s, measured, or why it could not be."""
    if cpu_reason is not None:
        return f"the cpu target cannot run here: {cpu_reason}"
    try:
        # Cold caches: the probe reads at least twice the last-level cache, so the bytes come from memory.
        return _cpu_target().measured_bandwidth_gbs(1, cold_caches=True)
    except RuntimeError as error:  # the streaming kernel did not build, or skipped its loads
        return str(error)


def bandwidth_row(bandwidth: float | str, runnable: bool = True) -> Row:
    """The ``CPU memory`` row: the measured bandwidth from memory, or why nothing was measured (``missing``
    and ``FAIL`` as for :func:`peak_row`).

    >>> bandwidth_row(35.4)
    ('CPU memory', 'ok', '35.4 GB/s read from memory, measured by vector loads on every core')
    """
    if isinstance(bandwidth, str):
        return ("CPU memory", "FAIL" if runnable else "missing", bandwidth)
    return ("CPU memory", "ok", f"{bandwidth:.1f} GB/s read from memory, measured by vector loads on every core")


def peak_row(peak: float | str, cpu: CpuDevice | None, runnable: bool = True) -> Row:
    """The ``CPU peak`` row: the measured figure and the OS clock's estimate, or why nothing was measured:
    ``missing`` when the cpu target cannot run here (its own row says why), ``FAIL`` when it can and the
    peak kernel still did not build or run.

    >>> peak_row(484.4, None)
    ('CPU peak', 'ok', '484 GFLOP/s FP32, measured by a kernel of FMAs on every core')
    >>> peak_row("the peak kernel did not build: ...", None)[1]
    'FAIL'
    >>> peak_row("the cpu target cannot run here: no host C++ compiler", None, runnable=False)[1]
    'missing'
    """
    if isinstance(peak, str):
        return ("CPU peak", "FAIL" if runnable else "missing", peak)
    estimate = cpu.peak_gflops_f32 if cpu is not None else None
    beside = f" (the estimate from the OS clock: {estimate:.0f})" if estimate is not None else ""
    return ("CPU peak", "ok", f"{peak:.0f} GFLOP/s FP32, measured by a kernel of FMAs on every core{beside}")


def target_states() -> dict[str, str | None]:
    """Each target's name and why it cannot run here (None when it can), in name order."""
    return {name: get_target(name).unavailable_reason() for name in sorted(TARGETS)}


def target_rows(states: Mapping[str, str | None]) -> list[Row]:
    """``target NAME`` rows: ``ok`` with what the target runs, or ``none`` with why it cannot run here.

    >>> target_rows({"cuda": "no GPU: no driver", "emu": None})[0]
    ('target cuda', 'none', 'no GPU: no driver')
    """
    return [(f"target {name}", "none", reason) if reason is not None
            else (f"target {name}", "ok", TARGET_ROLES.get(name, "available")) for name, reason in states.items()]


def exit_status(report: ToolchainReport) -> int:
    """1 when a required piece is missing: NVRTC, complete CUDA headers, the emulator's compilers."""
    required = (report.nvrtc.usable, report.headers.path is not None and report.headers.reason is None,
                report.host_compiler.path is not None, report.emulator_problem is None)
    return 0 if all(required) else 1


def report_rows(report: ToolchainReport, targets: Mapping[str, str | None] | None = None,
                peak: float | str | None = None, bandwidth: float | str | None = None) -> list[Row]:
    """(component, state, detail) rows; state is ``ok``, ``missing``, ``none`` or ``FAIL``; the measured
    ``peak`` and ``bandwidth`` (see :func:`measure_peak`, :func:`measure_bandwidth`) after the CPU's row
    when given; the rows of ``targets`` (see :func:`target_states`) last."""
    nvrtc, headers, host, gpu = report.nvrtc, report.headers, report.host_compiler, report.gpu
    rows: list[Row] = [("warpmap", "ok", f"{report.warpmap_version} (Python {report.python})")]
    if nvrtc.usable:
        rows.append(("NVRTC", "ok", f"{nvrtc.version}, smoke compile to sm_80 in {nvrtc.smoke_compile_ms:.0f} ms"))
    else:
        rows.append(("NVRTC", "FAIL", nvrtc.error or "unusable"))
    rows.append(("NVRTC archs", "ok" if nvrtc.archs else "FAIL", " ".join(nvrtc.archs) or "none reported"))
    if headers.path is None:
        rows.append(("CUDA headers", "missing", headers.reason or "not found"))
    else:
        state = "ok" if headers.reason is None else "missing"
        rows.append(("CUDA headers", state, str(headers.path) + (f" ({headers.reason})" if headers.reason else "")))
    if host.path is None:
        rows.append(("host C++", "missing", host.openmp_detail))
    else:
        rows.append(("host C++", "ok", f"{host.path}: {host.version or 'version unknown'}"))
    rows.append(("OpenMP", "ok" if host.openmp else "missing", host.openmp_detail))
    rows.append(("emulator", "FAIL" if report.emulator_problem else "ok",
                 report.emulator_problem or "its C and C++ compilers are GCC 12 or later"))
    rows.append(("CPU", "ok", cpu_detail(report.cpu)) if report.cpu else ("CPU", "none", "not probed"))
    runnable = (targets or {}).get("cpu", "absent") is None
    if peak is not None:
        rows.append(peak_row(peak, report.cpu, runnable=runnable))
    if bandwidth is not None:
        rows.append(bandwidth_row(bandwidth, runnable=runnable))
    if not gpu.found:
        rows.append(("GPU", "none", gpu.reason or "no device"))
    for device in gpu.devices:
        memory = device.memory_bytes / 2**30
        detail = f"{device.name}, {device.arch}, {memory:.1f} GiB, driver {gpu.driver_version}"
        rows.append((f"GPU {device.index}", "ok", detail))
    return rows + target_rows(targets or {})


def cpu_detail(cpu: CpuDevice) -> str:
    """Model, ISA, cores and caches on one line: ``AMD EPYC, avx2 fma, 8 f32 lanes, 2 cores, L1d 32 KiB, ...``."""
    cores = f"{cpu.logical_cores} cores" + (f" ({cpu.physical_cores} physical)"
                                            if cpu.physical_cores not in (None, cpu.logical_cores) else "")
    if cpu.cpu_quota is not None:  # a container's --cpus: the cores are those the quota pays for
        cores += f" (a CPU quota of {cpu.cpu_quota:g})"
    caches = [f"{name} {_bytes(c.size_bytes)}" for name, c in (("L1d", cpu.l1d), ("L2", cpu.l2), ("L3", cpu.l3)) if c]
    return ", ".join([cpu.model, cpu.isa_summary, cores, *caches])


def _bytes(size: int) -> str:
    """``48 KiB``, ``1 MiB``, ``105 MiB``, ``1.5 MiB``.

    >>> _bytes(48 * 1024), _bytes(1 << 20), _bytes(107520 * 1024), _bytes(3 << 19)
    ('48 KiB', '1 MiB', '105 MiB', '1.5 MiB')
    """
    if size < 1 << 20:
        return f"{size / 1024:g} KiB"
    return f"{size / (1 << 20):.1f}".removesuffix(".0") + " MiB"


#: The columns of the report.
HEADER = ("component", "state", "detail")


def report_json(report: ToolchainReport, targets: Mapping[str, str | None] | None = None,
                peak: float | str | None = None, bandwidth: float | str | None = None) -> dict[str, Any]:
    """The report as JSON-ready data: every field, paths as strings, plus ``gpu.found``, the CPU's figures
    and, when given, ``targets`` (each target's ``available`` and ``reason``), the measured ``peak``
    (``measured_peak``: ``gflops_f32``, or null and the ``reason``) and ``bandwidth``
    (``measured_bandwidth``: ``gbs`` from memory, or null and the ``reason``)."""
    data = _plain(dataclasses.asdict(report))
    if targets is not None:
        data["targets"] = {name: {"available": reason is None, "reason": reason} for name, reason in targets.items()}
    data["gpu"]["found"] = report.gpu.found
    for device, value in zip(data["gpu"]["devices"], report.gpu.devices, strict=True):
        device["arch"] = value.arch
    if report.cpu is not None:
        # The derived figures too, the peak beside the inputs it is computed from (it is not measured).
        data["cpu"].update(isa_summary=report.cpu.isa_summary, compile_flags=list(report.cpu.compile_flags),
                           peak_cores=report.cpu.peak_cores, peak_gflops_f32=report.cpu.peak_gflops_f32)
    if peak is not None:
        measured = not isinstance(peak, str)
        data["measured_peak"] = {"gflops_f32": peak if measured else None, "reason": None if measured else peak}
    if bandwidth is not None:
        measured = not isinstance(bandwidth, str)
        data["measured_bandwidth"] = {"gbs": bandwidth if measured else None,
                                      "reason": None if measured else bandwidth}
    return data


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if isinstance(value, Path):
        return str(value)
    return value
