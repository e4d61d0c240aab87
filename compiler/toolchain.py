"""What this machine offers warpmap: NVRTC, CUDA headers, a host C++ compiler with OpenMP, the CPU, GPUs.

Every probe returns a frozen value and never raises: a missing piece is reported with the reason it
is missing, because "no GPU" is a normal state (the ``cpu`` and ``emu`` targets need none). The
command ``warpmap doctor`` prints :func:`detect_toolchain`'s report.

The GPU probe takes the driver API as a parameter, so the formatting of a found device can be
exercised on a machine without one by passing a stand-in.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import platform
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cuda.bindings import driver
from cuda.pathfinder import DynamicLibNotFoundError, find_nvidia_header_directory

from compiler.backends.emu.build import EmuConfig, toolchain_problem
from compiler.backends.nvrtc import compile_source, nvrtc_version, supported_archs
from compiler.cpu_device import CpuDevice, detect_cpu
from compiler.source import KernelSource

#: The compiler the emulator runs; reporting another one found on PATH would say the emulator works
#: where it cannot.
HOST_COMPILERS = (EmuConfig.cxx,)
#: The files of the ``compiler`` package that decide what a schedule compiles to: templates, IR,
#: codegen, the emulator and device headers. Bytecode and data files do not.
SOURCE_SUFFIXES = (".py", ".cuh", ".h", ".c")
_PACKAGE_ROOT = Path(__file__).resolve().parent
_PROBE_TIMEOUT_S = 30.0

_SMOKE_KERNEL = KernelSource(
    entry="doctor_probe",
    source='extern "C" __global__ void doctor_probe(float* out) { out[threadIdx.x] = threadIdx.x; }\n',
    grid=(1, 1, 1),
    block=(32, 1, 1),
    params=(),
)

_OPENMP_PROGRAM = """#include <omp.h>
#include <cstdio>
int main() {
  int sum = 0;
#pragma omp parallel for reduction(+ : sum)
  for (int i = 0; i < 100; ++i) sum += i;
  std::printf("%d %d\\n", sum, omp_get_max_threads());
  return sum == 4950 ? 0 : 1;
}
"""


@dataclass(frozen=True)
class NvrtcInfo:
    """NVRTC's version and archs, and whether a smoke compile to ``sm_80`` worked."""

    usable: bool
    version: str | None
    archs: tuple[str, ...]
    smoke_compile_ms: float | None
    error: str | None = None


@dataclass(frozen=True)
class HeadersInfo:
    path: Path | None
    reason: str | None = None


@dataclass(frozen=True)
class HostCompilerInfo:
    """The first host C++ compiler on PATH and whether ``-fopenmp`` builds and runs a program."""

    path: Path | None
    version: str | None
    openmp: bool
    openmp_detail: str


@dataclass(frozen=True)
class GpuDevice:
    index: int
    name: str
    compute_capability: tuple[int, int]
    memory_bytes: int

    @property
    def arch(self) -> str:
        major, minor = self.compute_capability
        return f"sm_{major}{minor}"


@dataclass(frozen=True)
class GpuInfo:
    """The visible GPUs, or the exact reason there are none."""

    devices: tuple[GpuDevice, ...]
    driver_version: str | None
    reason: str | None = None

    @property
    def found(self) -> bool:
        return bool(self.devices)


@dataclass(frozen=True)
class ToolchainReport:
    warpmap_version: str
    python: str
    nvrtc: NvrtcInfo
    headers: HeadersInfo
    host_compiler: HostCompilerInfo
    gpu: GpuInfo
    #: Why the emulator cannot build kernels here (its C and C++ compilers), or None when it can.
    emulator_problem: str | None = None
    #: The host CPU (what the ``cpu`` target compiles for), or None where it was not probed.
    cpu: CpuDevice | None = None


def warpmap_version() -> str:
    try:
        return importlib.metadata.version("warpmap")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (the warpmap distribution is not installed)"


def digest_sources(root: Path) -> str:
    """SHA-256 (hex) of every ``SOURCE_SUFFIXES`` file under ``root``: names and bytes, in sorted order.

    A kernel tuned by other template code is a different answer, so this digest goes into the
    toolchain part of the cache key. Files are taken by their path relative to ``root`` (POSIX form)
    in sorted order, each hashed as its path, its length and its bytes, so the digest is the same on
    any file system and in any checkout, and no edit (or rename) of one file can cancel another's.
    """
    digest = hashlib.sha256()
    files = sorted(
        (path.relative_to(root).as_posix(), path)
        for path in root.rglob("*")
        if path.suffix in SOURCE_SUFFIXES and path.is_file() and "__pycache__" not in path.parts
    )
    for name, path in files:
        content = path.read_bytes()
        for part in (name.encode(), b"\0", str(len(content)).encode(), b"\0", content):
            digest.update(part)
    return digest.hexdigest()


@functools.cache
def source_digest() -> str:
    """:func:`digest_sources` of the installed ``compiler`` package, computed once per process."""
    return digest_sources(_PACKAGE_ROOT)


def detect_nvrtc() -> NvrtcInfo:
    try:
        major, minor = nvrtc_version()
        archs = supported_archs()
        result = compile_source(_SMOKE_KERNEL, "sm_80")
    except (RuntimeError, OSError) as exc:  # the NVRTC library is missing or broken
        return NvrtcInfo(False, None, (), None, f"{type(exc).__name__}: {exc}")
    error = None if result.ok else f"smoke compile failed: {result.error.message if result.error else '?'}"
    return NvrtcInfo(result.ok, f"{major}.{minor}", archs, result.compile_ms, error)


def detect_cuda_headers() -> HeadersInfo:
    try:
        found = find_nvidia_header_directory("cudart")
    except (RuntimeError, OSError) as exc:
        return HeadersInfo(None, f"lookup failed: {exc}")
    if found is None:
        return HeadersInfo(None, "not found: install the CUDA header wheels (cuda-toolkit[cudart,crt])")
    path = Path(found)
    missing = [h for h in ("cuda_fp16.h", "cuda_bf16.h", "mma.h") if not (path / h).is_file()]
    if missing:
        return HeadersInfo(path, f"incomplete: {', '.join(missing)} missing from {path}")
    return HeadersInfo(path)


def detect_host_compiler(candidates: Sequence[str] = HOST_COMPILERS) -> HostCompilerInfo:
    for name in candidates:
        found = shutil.which(name)
        if found is None:
            continue
        path = Path(found)
        try:
            completed = _run([str(path), "--version"])
        except (OSError, subprocess.SubprocessError) as exc:
            return HostCompilerInfo(path, None, False, f"{name} --version failed: {exc}")
        version = completed.stdout.strip().splitlines()[0] if completed.stdout.strip() else None
        openmp, detail = _probe_openmp(path)
        return HostCompilerInfo(path, version, openmp, detail)
    return HostCompilerInfo(None, None, False, f"no host C++ compiler on PATH (tried {', '.join(candidates)})")


def _probe_openmp(compiler: Path) -> tuple[bool, str]:
    """Build and run a tiny ``-fopenmp`` program: (works, what happened)."""
    with tempfile.TemporaryDirectory(prefix="warpmap-omp-") as scratch:
        source, binary = Path(scratch) / "probe.cc", Path(scratch) / "probe"
        source.write_text(_OPENMP_PROGRAM)
        try:
            built = _run([str(compiler), "-fopenmp", "-O1", str(source), "-o", str(binary)])
            if built.returncode != 0:
                return False, f"-fopenmp build failed: {_first_line(built.stderr)}"
            ran = _run([str(binary)])
        except (OSError, subprocess.SubprocessError) as exc:
            return False, f"-fopenmp probe failed: {exc}"
        if ran.returncode != 0:
            return False, f"-fopenmp program exited with {ran.returncode}"
        threads = ran.stdout.split()[-1] if ran.stdout.split() else "?"
        return True, f"-fopenmp works ({threads} threads)"


def detect_gpus(api: Any = driver) -> GpuInfo:
    """Every device the CUDA driver sees. ``api`` is the driver API module (a stand-in in tests)."""
    try:
        (status,) = api.cuInit(0)
    except DynamicLibNotFoundError as exc:
        return GpuInfo((), None, f"no NVIDIA driver library (libcuda) on this machine: {exc}")
    except (RuntimeError, OSError) as exc:
        return GpuInfo((), None, f"the NVIDIA driver library failed to load: {exc}")
    if status != api.CUresult.CUDA_SUCCESS:
        return GpuInfo((), None, f"cuInit failed: {_describe(api, status)}")
    try:
        version = _call(api, api.cuDriverGetVersion())
        driver_version = f"{version // 1000}.{version % 1000 // 10}"
    except RuntimeError as exc:
        return GpuInfo((), None, f"cuDriverGetVersion failed: {exc}")
    try:
        devices = _enumerate_devices(api)
    except RuntimeError as exc:
        return GpuInfo((), driver_version, f"device query failed: {exc}")
    if not devices:
        return GpuInfo((), driver_version, "the driver reports 0 devices")
    return GpuInfo(devices, driver_version)


def _enumerate_devices(api: Any) -> tuple[GpuDevice, ...]:
    attribute = api.CUdevice_attribute
    devices = []
    for index in range(_call(api, api.cuDeviceGetCount())):
        device = _call(api, api.cuDeviceGet(index))
        name = _call(api, api.cuDeviceGetName(256, device))
        major, minor = (
            _call(api, api.cuDeviceGetAttribute(which, device))
            for which in (
                attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
            )
        )
        memory = _call(api, api.cuDeviceTotalMem(device))
        text = name.split(b"\0", 1)[0].decode() if isinstance(name, bytes) else str(name)
        devices.append(GpuDevice(index, text, (int(major), int(minor)), int(memory)))
    return tuple(devices)


def detect_toolchain() -> ToolchainReport:
    return ToolchainReport(
        warpmap_version=warpmap_version(),
        python=platform.python_version(),
        nvrtc=detect_nvrtc(),
        headers=detect_cuda_headers(),
        host_compiler=detect_host_compiler(),
        gpu=detect_gpus(),
        emulator_problem=toolchain_problem(EmuConfig.default()),
        cpu=detect_cpu(),
    )


def _call(api: Any, result: tuple) -> Any:
    status, value = result
    if status != api.CUresult.CUDA_SUCCESS:
        raise RuntimeError(_describe(api, status))
    return value


def _describe(api: Any, status: Any) -> str:
    name = getattr(status, "name", str(status))
    try:
        code, text = api.cuGetErrorString(status)
        if code == api.CUresult.CUDA_SUCCESS and text:
            return f"{name} ({text.decode() if isinstance(text, bytes) else text})"
    except (RuntimeError, OSError, TypeError):
        pass
    return str(name)


def _run(command: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, timeout=_PROBE_TIMEOUT_S, check=False)


def _first_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[0].strip() if lines else "(no output)"
