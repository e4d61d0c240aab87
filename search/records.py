"""What the search hands to the tuning database: compiler objects turned into the plain records it stores.

The conversion lives on this side of the boundary because storage knows only plain values; the
compiler's :class:`~compiler.source.KernelSource` is not one of them.
"""

from __future__ import annotations

import hashlib
import io
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from compiler.backends import Artifact
from compiler.program import Workspace
from compiler.source import KernelSource
from db.records import DeviceInfo, KernelResult, ToolchainInfo
from search.tune import TuneResult


def kernel_result(
    kernel: KernelSource,
    *,
    schedule: Mapping[str, Any],
    latency_us: float,
    trials_used: int,
    binary: bytes | None = None,
    gflops: float | None = None,
) -> KernelResult:
    """The cache record of a measured kernel: its source, launch shape and parameters as plain fields."""
    return KernelResult(
        schedule=schedule,
        source=kernel.source,
        entry=kernel.entry,
        grid=kernel.grid,
        block=kernel.block,
        shared_bytes=kernel.shared_bytes,
        params=tuple({"name": p.name, "dtype": p.dtype, "pointer": p.pointer} for p in kernel.params),
        latency_us=latency_us,
        trials_used=trials_used,
        binary=binary,
        gflops=gflops,
    )


def _binary_bytes(value: Any) -> bytes | None:
    """A launch's binary as bytes: given as bytes, or as a built file (a path, or a record with one)."""
    if isinstance(value, bytes):
        return value
    path = value if isinstance(value, Path) else getattr(value, "path", None)
    return Path(path).read_bytes() if path is not None else None


def binary_archive(artifact: Artifact) -> bytes | None:
    """Every launch's binaries in one zip (members ``<launch>-<entry>.<role>``, in launch order, with fixed
    timestamps so the same binaries make the same bytes), or None when the target keeps none."""
    members: list[tuple[str, bytes]] = []
    for index, launch in enumerate(artifact.launches):
        for role, value in sorted(launch.binaries.items()):
            data = _binary_bytes(value)
            if data is not None:
                members.append((f"{index}-{launch.source.entry}.{role}", data))
    if not members:
        return None
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members:
            archive.writestr(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), data)
    return out.getvalue()


def _params(source: KernelSource) -> list[dict[str, Any]]:
    return [{"name": p.name, "dtype": p.dtype, "pointer": p.pointer} for p in source.params]


def _workspace(workspace: Workspace) -> dict[str, Any]:
    # ``per_worker`` only where set, so the documents of every other program are what they were.
    document: dict[str, Any] = {"name": workspace.name, "shape": list(workspace.shape), "dtype": workspace.dtype}
    if workspace.per_worker:
        document["per_worker"] = True
    return document


def program_document(artifact: Artifact) -> dict[str, Any]:
    """The program of ``artifact`` as plain data: what a client needs to run it from the stored binaries."""
    program = artifact.program
    return {
        "target": artifact.target,
        "arguments": list(program.arguments),
        "workspaces": [_workspace(w) for w in program.workspaces],
        "launches": [
            {"entry": build.source.entry, "source": build.source.source, "grid": list(build.source.grid),
             "block": list(build.source.block), "shared_bytes": build.source.shared_bytes,
             "params": _params(build.source), "bindings": list(launch.bindings)}
            for build, launch in zip(artifact.launches, program.launches, strict=True)
        ],
    }


def program_source(artifact: Artifact) -> str:
    """The source a person reads: a one-launch program's own, else each launch's under a comment naming it."""
    if len(artifact.launches) == 1:
        return artifact.launches[0].source.source
    return "\n".join(f"// launch {i}: {b.source.entry}\n{b.source.source}" for i, b in enumerate(artifact.launches))


def tuned_result(result: TuneResult) -> KernelResult:
    """The cache record of a tuning's best: its program, its re-timed median with the 20th and 80th
    percentiles, GFLOP/s and GB/s, the roofs it was held against, and the trials the tuning spent."""
    samples = result.samples
    return program_result(result.artifact, schedule=dict(result.values), latency_us=samples.median_ns / 1e3,
                          trials_used=len(result.trials), gflops=result.gflops,
                          latency_p20_us=samples.p20_ns / 1e3, latency_p80_us=samples.p80_ns / 1e3, gbs=result.gbs,
                          peak_gflops=result.peak_gflops, bandwidth_gbs=result.bandwidth_gbs)


def program_result(
    artifact: Artifact,
    *,
    schedule: Mapping[str, Any],
    latency_us: float,
    trials_used: int,
    gflops: float | None = None,
    latency_p20_us: float | None = None,
    latency_p80_us: float | None = None,
    gbs: float | None = None,
    peak_gflops: float | None = None,
    bandwidth_gbs: float | None = None,
) -> KernelResult:
    """The cache record of a tuned program: a one-launch program as that kernel (the plain fields), a longer
    one with its whole program document too, as is one launch with workspaces (whose shapes the plain fields
    cannot carry); the binaries archived either way."""
    first = artifact.launches[0].source
    several = len(artifact.launches) > 1
    whole = several or bool(artifact.program.workspaces)
    return KernelResult(
        schedule=schedule,
        source=program_source(artifact),
        entry=artifact.program.name if several else first.entry,
        grid=first.grid,
        block=first.block,
        shared_bytes=first.shared_bytes,
        params=tuple(_params(first)) if not several else tuple(
            {"name": name, "dtype": artifact.program.dtype_of(name), "pointer": True}
            for name in artifact.program.arguments),
        latency_us=latency_us,
        trials_used=trials_used,
        binary=binary_archive(artifact),
        gflops=gflops,
        latency_p20_us=latency_p20_us,
        latency_p80_us=latency_p80_us,
        gbs=gbs,
        peak_gflops=peak_gflops,
        bandwidth_gbs=bandwidth_gbs,
        program=program_document(artifact) if whole else None,
    )


def _short_hash(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:12]


def cache_identity(fingerprint: Mapping[str, str], warpmap: str) -> tuple[DeviceInfo, ToolchainInfo]:
    """The cache's device and toolchain keys from a target's fingerprint (``Target.fingerprint()``).

    A GPU is its name, compute capability and driver; the host is its model with the threads a launch
    uses (two VMs of one CPU model, or two containers of one host given different CPU quotas, are
    different devices: a schedule and its latency hold for one thread count) and its ISA (the features
    the binary assumes), which alone makes the arch, so that a warm start crosses thread counts. The
    toolchain is warpmap's build (``warpmap``, from ``db.keys.warpmap_build``), NVRTC's version where
    there is one, and the host compiler with a digest of the flags and build version, so a change of
    either files kernels apart.
    """
    name = fingerprint.get("device") or fingerprint.get("cpu") or fingerprint.get("target", "unknown")
    if "cpu" in fingerprint and "threads" in fingerprint:
        name = f"{name}, {fingerprint['threads']} threads"
    if "arch" in fingerprint:
        arch = fingerprint["arch"]
    else:
        lanes = fingerprint.get("f32_lanes", "?")
        arch = f"{fingerprint.get('target', 'host')}-f32x{lanes}-{_short_hash(fingerprint.get('isa', ''))}"
    device = DeviceInfo(name=name, arch=arch, driver=fingerprint.get("driver", "none"))
    compiler = fingerprint.get("compiler", "none")
    flags = _short_hash(fingerprint.get("flags", ""), fingerprint.get("build_version", ""))
    toolchain = ToolchainInfo(warpmap=warpmap, nvrtc=fingerprint.get("nvrtc", "none"),
                              host_compiler=f"{compiler[:100]} {flags}")
    return device, toolchain
