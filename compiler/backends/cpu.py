"""The cpu target: host C++ (``compiler.codegen.cpp``) compiled by g++ with OpenMP, run in-process.

``compile`` turns a ``KernelSource`` of the host dialect into a shared object stored in a
content-addressed ``DiskCache`` (the key names the source, the compiler's version, the flags and the
ISA the machine reports), so the binary that was built once is the one every later run loads.
``load`` opens it with ctypes; ``run`` calls its entry on numpy arrays (the GIL is released during the
call); ``time`` runs it under a ``compiler.backends.timing.Protocol``.

A compiler failure is returned as a ``CompileFailure`` value carrying the compiler's log. Kernels run
in this process: a kernel that faults takes the process down, and isolating candidates is the search
engine's harness's job.

Example::

    >>> from compiler.codegen.cpp import render_host
    >>> from compiler.ir import f32, kernel, lower, threadIdx
    >>> with kernel("inc", block=8) as k:
    ...     x = k.tensor("x", f32, (8,))
    ...     x[threadIdx.x] = x[threadIdx.x] + 1.0
    >>> import numpy as np, tempfile
    >>> config = CpuConfig(cache_dir=Path(tempfile.mkdtemp()))
    >>> x = np.arange(8, dtype=np.float32)
    >>> run(load(compile(render_host(lower(k.kernel)), config)), [x])
    >>> x.tolist()
    [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]
    >>> shutil.rmtree(config.cache_dir)
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from compiler.backends.errors import BackendUnavailableError
from compiler.backends.timing import DEFAULT_PROTOCOL, Protocol, Samples, measure
from compiler.cpu_device import PROCESS_CPUS, CpuDevice, detect_cpu
from compiler.diskcache import DiskCache, cache_key, default_cache_root
from compiler.source import KernelSource, Param
from compiler.toolchain import detect_host_compiler

#: Bump when what a build means changes in a way the key's other parts would not show.
CPU_BUILD_VERSION = "1"
#: Flags every build gets; the ISA flags (``-march=native`` unless the device says otherwise) follow.
#: ``-fno-trapping-math``: kernels never read the floating-point exception flags, and without it g++
#: will not if-convert a select whose arms hold floating-point arithmetic unless the ISA has masked
#: vector operations: on AVX2 the full-range ``exp`` (``compiler.ops.cpu.vmath``) stayed scalar. It
#: changes no value (unlike ``-ffast-math``): IEEE results, NaNs and infinities are kept.
BASE_FLAGS = ("-O3", "-fopenmp", "-shared", "-fPIC", "-std=c++17", "-fno-exceptions", "-fno-rtti",
              "-fno-trapping-math", "-w")
#: A buffer this many times the last-level cache is written to flush it.
FLUSH_FACTOR = 2
_CTYPES: Mapping[str, type] = {"float32": ctypes.c_float, "int32": ctypes.c_int32, "uint32": ctypes.c_uint32}
_NUMPY: Mapping[str, np.dtype] = {name: np.dtype(name) for name in ("float32", "int32", "uint32", "bool")}


def _default_workers() -> int:
    return max(1, len(PROCESS_CPUS))


@dataclass(frozen=True)
class CpuConfig:
    """Where and how kernels are built and run: the cache folder and cap, the compiler, the host
    threads a launch uses (all cores this process may run on, by default)."""

    cache_dir: Path
    cache_bytes: int = 256 << 20
    cxx: str = "g++"
    workers: int = field(default_factory=_default_workers)
    compile_timeout_s: float = 120.0

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ValueError(f"CpuConfig: workers must be >= 1, got {self.workers}")

    @classmethod
    def default(cls, environ: Mapping[str, str] | None = None) -> CpuConfig:
        """``<warpmap cache dir>/cpu`` (see ``compiler.diskcache.default_cache_root``)."""
        return cls(cache_dir=default_cache_root(environ) / "cpu")

    @property
    def cache(self) -> DiskCache:
        return DiskCache(self.cache_dir, self.cache_bytes)


@dataclass(frozen=True)
class CpuArtifact:
    """A compiled kernel: its shared object in the cache and the source it was built from."""

    kernel: KernelSource
    path: Path
    key: str
    from_cache: bool


@dataclass(frozen=True)
class CompileFailure:
    """The host compiler rejected (or timed out on) a kernel; ``log`` is what it said."""

    entry: str
    message: str
    log: str


class CpuCompileError(RuntimeError):
    """A ``CompileFailure`` was used where a compiled kernel was needed."""


@dataclass(frozen=True)
class LoadedKernel:
    """An artifact opened in this process, ready to call."""

    artifact: CpuArtifact
    function: Callable[..., None]
    workers: int


def compile_flags(cpu: CpuDevice) -> tuple[str, ...]:
    return (*BASE_FLAGS, *cpu.compile_flags)


def compiler_version(cxx: str) -> str:
    """The first line of ``cxx --version`` (part of every cache key), or an empty string."""
    try:
        proc = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return proc.stdout.splitlines()[0] if proc.stdout else ""


def fingerprint(config: CpuConfig | None = None, cpu: CpuDevice | None = None) -> dict[str, str]:
    """What identifies builds and timings of this target here: compiler, flags, CPU and its ISA, and the
    threads a launch uses (a schedule's speed, and the latency the cache keeps, hold for that many)."""
    cfg = config or CpuConfig.default()
    device = cpu or detect_cpu()
    return {
        "target": "cpu",
        "build_version": CPU_BUILD_VERSION,
        "compiler": compiler_version(cfg.cxx),
        "flags": " ".join(compile_flags(device)),
        "cpu": device.model,
        "isa": " ".join(device.features),
        "f32_lanes": str(device.f32_lanes),
        "threads": str(cfg.workers),
    }


def unavailable_reason(config: CpuConfig | None = None) -> str | None:
    """None when kernels can be built and run here, else why not (no compiler, no OpenMP)."""
    cfg = config or CpuConfig.default()
    if shutil.which(cfg.cxx) is None:
        return f"the cpu target's compiler {cfg.cxx!r} is not on PATH (install g++)"
    info = detect_host_compiler((cfg.cxx,))
    if not info.openmp:
        return f"the cpu target needs OpenMP from {cfg.cxx!r}: {info.openmp_detail}"
    return None


def compile(kernel: KernelSource, config: CpuConfig | None = None,
            cpu: CpuDevice | None = None) -> CpuArtifact | CompileFailure:
    """The shared object of ``kernel``, from the cache when it was built before, else built now."""
    cfg = config or CpuConfig.default()
    device = cpu or detect_cpu()
    flags = compile_flags(device)
    # -march=native means "this machine": the features it has are part of what the binary assumes.
    key = cache_key("cpu-kernel", CPU_BUILD_VERSION, compiler_version(cfg.cxx), *flags, device.features,
                    kernel.source)
    cache = cfg.cache
    found = cache.path(key)
    if found is not None:
        return CpuArtifact(kernel, found, key, from_cache=True)
    built = _build(cfg, flags, kernel)
    if isinstance(built, CompileFailure):
        return built
    return CpuArtifact(kernel, cache.put(key, built), key, from_cache=False)


def _build(cfg: CpuConfig, flags: tuple[str, ...], kernel: KernelSource) -> bytes | CompileFailure:
    with tempfile.TemporaryDirectory(prefix="wm-cpu-") as tmp:
        source, out = Path(tmp) / f"{kernel.entry}.cpp", Path(tmp) / "kernel.so"
        source.write_text(kernel.source)
        try:
            proc = subprocess.run([cfg.cxx, *flags, "-o", str(out), str(source)], capture_output=True,
                                  text=True, timeout=cfg.compile_timeout_s, check=False)
        except subprocess.TimeoutExpired:
            return CompileFailure(kernel.entry, f"{kernel.entry}: host compile ran past {cfg.compile_timeout_s} s", "")
        except OSError as exc:
            return CompileFailure(kernel.entry, f"{kernel.entry}: cannot run {cfg.cxx!r}: {exc}", "")
        if proc.returncode != 0:
            log = proc.stderr.replace(str(source), f"{kernel.entry}.cpp")
            first = next((ln for ln in log.splitlines() if "error" in ln), log.strip()[:300])
            return CompileFailure(kernel.entry, f"{kernel.entry}: host compile failed: {first}", log)
        return out.read_bytes()


def load(artifact: CpuArtifact | CompileFailure, config: CpuConfig | None = None) -> LoadedKernel:
    """Open ``artifact`` in this process; a ``CompileFailure`` raises ``CpuCompileError`` with its log."""
    if isinstance(artifact, CompileFailure):
        raise CpuCompileError(f"{artifact.message}\n{artifact.log}")
    cfg = config or CpuConfig.default()
    library = ctypes.CDLL(str(artifact.path))
    function = getattr(library, artifact.kernel.entry)
    function.argtypes = [*(_ctype(p) for p in artifact.kernel.params), ctypes.c_int]
    function.restype = None
    return LoadedKernel(artifact, function, cfg.workers)


def _ctype(param: Param) -> type:
    if param.pointer:
        return ctypes.c_void_p
    if param.dtype not in _CTYPES:
        raise BackendUnavailableError(f"scalar parameter {param.name!r} of {param.dtype} cannot be passed")
    return _CTYPES[param.dtype]


def check_args(kernel: KernelSource, args: Sequence[np.ndarray | int | float]) -> list[object]:
    """The ctypes values for ``args``; ``ValueError`` naming the first that does not fit its parameter.

    Arrays must be C-contiguous with the parameter's dtype; their sizes are the caller's contract (the
    source does not carry the tensors' shapes).
    """
    if len(args) != len(kernel.params):
        raise ValueError(f"{kernel.entry}: takes {len(kernel.params)} arguments "
                         f"({', '.join(p.name for p in kernel.params)}), got {len(args)}")
    values: list[object] = []
    for param, arg in zip(kernel.params, args, strict=True):
        where = f"{kernel.entry}: argument {param.name!r}"
        if param.pointer:
            if not isinstance(arg, np.ndarray):
                raise ValueError(f"{where} must be a numpy array of {param.dtype}, got {type(arg).__name__}")
            if param.dtype not in _NUMPY or arg.dtype != _NUMPY[param.dtype]:
                raise ValueError(f"{where} must have dtype {param.dtype}, got {arg.dtype}")
            if not arg.flags.c_contiguous:
                raise ValueError(f"{where} must be C-contiguous (use numpy.ascontiguousarray)")
            values.append(arg.ctypes.data)
        else:
            values.append(_scalar(where, param.dtype, arg))
    return values


def _scalar(where: str, dtype: str, arg: object) -> int | float:
    if dtype == "float32" and isinstance(arg, int | float | np.integer | np.floating) and not isinstance(arg, bool):
        return float(arg)
    if isinstance(arg, int | np.integer) and not isinstance(arg, bool):
        info = np.iinfo(_NUMPY[dtype])
        if not info.min <= int(arg) <= info.max:
            raise ValueError(f"{where}: {arg} does not fit {dtype}")
        return int(arg)
    raise ValueError(f"{where} must be a number of {dtype}, got {type(arg).__name__}")


def run(loaded: LoadedKernel, args: Sequence[np.ndarray | int | float]) -> None:
    """One launch; arrays are updated in place."""
    loaded.function(*check_args(loaded.artifact.kernel, args), loaded.workers)


def flush_bytes(cpu: CpuDevice) -> int:
    """The size of the buffer that flushes the caches: FLUSH_FACTOR x the last-level cache."""
    last = cpu.l3 or cpu.l2 or cpu.l1d
    return FLUSH_FACTOR * (last.size_bytes if last is not None else 64 << 20)


def time(loaded: LoadedKernel, args: Sequence[np.ndarray | int | float],
         protocol: Protocol = DEFAULT_PROTOCOL, cpu: CpuDevice | None = None) -> Samples:
    """Samples of ``loaded`` on ``args`` under ``protocol`` (arguments are checked once, up front)."""
    values = check_args(loaded.artifact.kernel, args)
    flush = None
    if protocol.flush_caches:
        scratch = np.zeros(flush_bytes(cpu or detect_cpu()) // 4, dtype=np.float32)

        def flush() -> None:
            np.add(scratch, 1.0, out=scratch)  # a write to every line evicts what the kernel left cached

    return measure(lambda: loaded.function(*values, loaded.workers), protocol, flush=flush)
