"""Build a :class:`~compiler.source.KernelSource` with NVRTC: a CUBIN for one arch, or PTX.

No GPU is needed. A CUBIN build runs ptxas with ``-Xptxas=-v``, whose report becomes the result's
:class:`ResourceUsage`; a PTX build runs no ptxas and reports no usage (and, since nothing assembles
the PTX, an inline-asm instruction the arch lacks goes unnoticed until the PTX is loaded).

A compile error is a value: ``BuildResult.ok`` is False and ``error`` carries NVRTC's log, the first
error's line and that line of source. Only a broken NVRTC (a failed program creation, a getter
failing) raises ``RuntimeError``.

Cost, measured on a 2-core AMD EPYC without a GPU (NVRTC 13.5; ``bench/compile_throughput.py``,
medians over fresh interpreters): importing this module (``cuda.bindings`` and ``cuda.pathfinder``)
takes ~80 ms and the first build in a process ~15 ms more than later ones, so a fresh process pays
~100 ms before its first CUBIN on top of the build itself. That is why compile workers should be
long-lived. A one-line kernel then takes ~30 ms to CUBIN, one including ``cuda_fp16.h`` ~40 ms, a
SIMT tiled matmul with unrolled register tiles 90–200 ms (a quarter of it in ptxas, by its own
report). A cache hit: ~0.3 ms.

Builds are cached (when given a :class:`~compiler.diskcache.DiskCache`) under a key naming everything
that changes the output: source, entry, arch, output kind, options, NVRTC version, and the bytes of
warpmap's own headers. Only successful builds are cached; an entry stores the binary and the log, so
the resource report is parsed afresh on a hit.
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from cuda.bindings import nvrtc
from cuda.pathfinder import find_nvidia_header_directory

from compiler.backends.ptxas_report import ResourceUsage, entry_usage
from compiler.diskcache import DiskCache, cache_key
from compiler.source import KernelSource

__all__ = [
    "DEFAULT_ARCHS",
    "BuildResult",
    "CompileError",
    "ResourceUsage",
    "compile_source",
    "include_dirs",
    "nvrtc_version",
    "supported_archs",
    "validate_arch",
]

Output = Literal["cubin", "ptx"]

DEFAULT_ARCHS = ("sm_80", "sm_90")
#: warpmap's own device headers (``warpmap/prims.cuh``, ...), shipped inside the package.
WARPMAP_INCLUDE = Path(__file__).resolve().parent.parent / "include"

_ARCH = re.compile(r"sm_(?P<number>\d+)(?P<suffix>[af]?)")
# Arch-specific ("a") targets start with Hopper, family ("f") targets with Blackwell.
_SUFFIX_FROM = {"": 0, "a": 90, "f": 100}
_ARCH_OPTIONS = ("-arch", "--gpu-architecture", "-code", "--gpu-code")
_LOCATED = re.compile(r"^(?P<file>.*?)\((?P<line>\d+)\): (?:catastrophic )?error(?: #[\w-]+)?: (?P<message>.*)$")
_CACHE_MAGIC = b"WMN1"


@dataclass(frozen=True)
class CompileError:
    """Why a build failed: a short ``message``, NVRTC's full ``log``, and where the first error is.

    ``line`` is 1-based in ``file``; ``source_line`` is that line's text when ``file`` is the kernel
    itself (an error inside an included header names the header and leaves it None).
    """

    message: str
    log: str
    line: int | None = None
    source_line: str | None = None
    file: str | None = None


@dataclass(frozen=True)
class BuildResult:
    ok: bool
    arch: str
    output: Output
    binary: bytes | None
    log: str
    usage: ResourceUsage | None
    error: CompileError | None
    compile_ms: float
    cached: bool


def _check(result: tuple, what: str) -> tuple:
    code = result[0]
    if code != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        _, text = nvrtc.nvrtcGetErrorString(code)
        raise RuntimeError(f"NVRTC {what} failed: {text.decode()}")
    return result[1:]


def nvrtc_version() -> tuple[int, int]:
    """NVRTC's (major, minor) version, e.g. ``(13, 5)``."""
    major, minor = _check(nvrtc.nvrtcVersion(), "nvrtcVersion")
    return int(major), int(minor)


def supported_archs() -> tuple[str, ...]:
    """The real archs NVRTC can build CUBINs for, e.g. ``("sm_75", "sm_80", ..., "sm_121")``."""
    (numbers,) = _check(nvrtc.nvrtcGetSupportedArchs(), "nvrtcGetSupportedArchs")
    return tuple(f"sm_{n}" for n in numbers)


def validate_arch(arch: str) -> str:
    """Return ``arch`` if NVRTC can build for it, else raise a ValueError naming it and the choices.

    Accepts ``sm_<N>`` for every N NVRTC lists, ``sm_<N>a`` from sm_90 and ``sm_<N>f`` from sm_100.
    """
    supported = supported_archs()
    match = _ARCH.fullmatch(arch) if isinstance(arch, str) else None
    if match is None or f"sm_{match['number']}" not in supported:
        choices = ", ".join(supported)
        raise ValueError(f"unsupported arch {arch!r}; NVRTC {_version_text()} supports {choices}")
    if int(match["number"]) < _SUFFIX_FROM[match["suffix"]]:
        raise ValueError(
            f"unsupported arch {arch!r}: the {match['suffix']!r} suffix needs "
            f"sm_{_SUFFIX_FROM[match['suffix']]} or newer"
        )
    return arch


def include_dirs() -> tuple[Path, ...]:
    """The include path of every build: the CUDA headers (when installed) and warpmap's own."""
    found = find_nvidia_header_directory("cudart")
    cuda_headers = (Path(found),) if found else ()
    return (*cuda_headers, WARPMAP_INCLUDE)


def _version_text() -> str:
    major, minor = nvrtc_version()
    return f"{major}.{minor}"


def _validate_options(options: Sequence[str]) -> tuple[str, ...]:
    if isinstance(options, str):
        raise TypeError(f"options must be a sequence of strings, not the string {options!r}")
    for option in options:
        if not isinstance(option, str):
            raise TypeError(f"options must be strings, got {option!r}")
        if option.split("=", 1)[0] in _ARCH_OPTIONS:
            raise ValueError(f"option {option!r} sets the target: pass arch= instead")
    return tuple(options)


def compile_source(
    source: KernelSource,
    arch: str = "sm_80",
    *,
    output: Output = "cubin",
    options: Sequence[str] = (),
    cache: DiskCache | None = None,
) -> BuildResult:
    """Compile ``source`` for ``arch`` to a CUBIN (with ptxas's resource report) or to PTX.

    Example::

        >>> from compiler.source import KernelSource, Param
        >>> src = 'extern "C" __global__ void fill(float* x) { x[threadIdx.x] = 1.0f; }'
        >>> kernel = KernelSource("fill", src, grid=(1, 1, 1), block=(32, 1, 1), params=(Param("x", "float32"),))
        >>> result = compile_source(kernel, "sm_90")
        >>> result.ok, result.usage.registers > 0, result.usage.spills
        (True, True, False)
    """
    validate_arch(arch)
    if output not in ("cubin", "ptx"):
        raise ValueError(f"output must be 'cubin' or 'ptx', got {output!r}")
    user_options = _validate_options(options)
    start = time.perf_counter()
    key = _build_key(source, arch, output, user_options) if cache is not None else None
    if cache is not None and key is not None and (entry := cache.get(key)) is not None:
        unpacked = _unpack(entry)
        if unpacked is not None:
            binary, log = unpacked
            return _success(source, arch, output, binary, log, start, cached=True)
    target = arch if output == "cubin" else arch.replace("sm_", "compute_", 1)
    flags = [f"-arch={target}", *(f"-I{d}" for d in include_dirs())]
    if output == "cubin":
        flags.append("-Xptxas=-v")
    flags.extend(user_options)
    compiled, binary, log = _run_nvrtc(source, flags, output)
    if not compiled:
        error = _first_error(log, source)
        ms = (time.perf_counter() - start) * 1000
        return BuildResult(False, arch, output, None, log, None, error, ms, cached=False)
    if cache is not None and key is not None:
        cache.put(key, _pack(binary, log))
    return _success(source, arch, output, binary, log, start, cached=False)


def _success(
    source: KernelSource, arch: str, output: Output, binary: bytes, log: str, start: float, *, cached: bool
) -> BuildResult:
    usage = entry_usage(log, source.entry) if output == "cubin" else None
    ms = (time.perf_counter() - start) * 1000
    return BuildResult(True, arch, output, binary, log, usage, None, ms, cached=cached)


def _run_nvrtc(source: KernelSource, flags: Sequence[str], output: Output) -> tuple[bool, bytes, str]:
    """One NVRTC program, always destroyed: (compiled, binary, log)."""
    (program,) = _check(
        nvrtc.nvrtcCreateProgram(source.source.encode(), f"{source.entry}.cu".encode(), 0, [], []),
        "nvrtcCreateProgram",
    )
    try:
        encoded = [flag.encode() for flag in flags]
        (status,) = nvrtc.nvrtcCompileProgram(program, len(encoded), encoded)
        log = _program_log(program)
        if status != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            _, text = nvrtc.nvrtcGetErrorString(status)
            return False, b"", log or text.decode()
        if output == "cubin":
            (size,) = _check(nvrtc.nvrtcGetCUBINSize(program), "nvrtcGetCUBINSize")
            buffer = bytearray(size)
            _check(nvrtc.nvrtcGetCUBIN(program, buffer), "nvrtcGetCUBIN")
        else:
            (size,) = _check(nvrtc.nvrtcGetPTXSize(program), "nvrtcGetPTXSize")
            buffer = bytearray(size)
            _check(nvrtc.nvrtcGetPTX(program, buffer), "nvrtcGetPTX")
            buffer = buffer.rstrip(b"\0")
        return True, bytes(buffer), log
    finally:
        nvrtc.nvrtcDestroyProgram(program)


def _program_log(program: object) -> str:
    (size,) = _check(nvrtc.nvrtcGetProgramLogSize(program), "nvrtcGetProgramLogSize")
    # NVRTC writes into the buffer: it must be mutable. (``b" " * 1`` is CPython's shared one-byte
    # object, and filling it with NUL corrupts every b" " in the process.)
    buffer = bytearray(size)
    _check(nvrtc.nvrtcGetProgramLog(program, buffer), "nvrtcGetProgramLog")
    return buffer.rstrip(b"\0").decode(errors="replace").strip()


def _first_error(log: str, source: KernelSource) -> CompileError:
    program_name = f"{source.entry}.cu"
    lines = source.source.splitlines()
    for text in log.splitlines():
        if match := _LOCATED.match(text):
            line = int(match["line"])
            ours = match["file"] == program_name
            source_line = lines[line - 1] if ours and 0 < line <= len(lines) else None
            where = f"line {line}" if ours else f"{match['file']}:{line}"
            return CompileError(f"{where}: {match['message']}", log, line, source_line, match["file"])
    first = next((t for t in log.splitlines() if "error" in t.lower()), log.splitlines()[0] if log else "")
    return CompileError(first.strip() or "NVRTC failed without a log", log)


def _build_key(source: KernelSource, arch: str, output: Output, options: tuple[str, ...]) -> str:
    return cache_key(
        "nvrtc",
        source.source,
        source.entry,
        arch,
        output,
        options,
        nvrtc_version(),
        tuple(str(d) for d in include_dirs()),
        _warpmap_headers_digest(),
    )


def _warpmap_headers_digest() -> str:
    """A digest of warpmap's headers, so that editing ``prims.cuh`` invalidates cached builds."""
    digest = hashlib.sha256()
    if WARPMAP_INCLUDE.is_dir():
        for path in sorted(p for p in WARPMAP_INCLUDE.rglob("*") if p.is_file()):
            digest.update(str(path.relative_to(WARPMAP_INCLUDE)).encode() + b"\0")
            digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def _pack(binary: bytes, log: str) -> bytes:
    meta = json.dumps({"log": log}).encode()
    return _CACHE_MAGIC + struct.pack("<I", len(meta)) + meta + binary


def _unpack(entry: bytes) -> tuple[bytes, str] | None:
    """(binary, log) from a cache entry, or None for an entry this version cannot read."""
    if entry[:4] != _CACHE_MAGIC or len(entry) < 8:
        return None
    (meta_size,) = struct.unpack("<I", entry[4:8])
    try:
        meta = json.loads(entry[8 : 8 + meta_size])
    except ValueError:
        return None
    return entry[8 + meta_size :], str(meta.get("log", ""))
