"""Compile kernels for the emulator: CUDA source -> host shared object, cached on disk.

The kernel text is compiled as it is, with two mechanical additions that keep its line numbers:
``extern __shared__ T name[];`` becomes a pointer to the block's dynamic shared memory (its size is a
launch parameter, unknown at compile time), and an ``extern "C" wm_emu_entry(void** args)`` trampoline
is appended that calls the kernel with typed arguments. ``cuda_fp16.h``, ``cuda_bf16.h`` and
``warpmap/prims.cuh`` resolve to the emulation versions through the include path and ``WARPMAP_EMU``.

Example::

    >>> src = 'extern "C" __global__ void k(float* x) { extern __shared__ float s[]; x[0] = 1; }'
    >>> prepare_source(KernelSource("k", src, (1, 1, 1), (1, 1, 1), (Param("x", "float32"),))).splitlines()
    ['extern "C" __global__ void k(float* x) { float* const s = (float*)wm_dynamic_shared(); x[0] = 1; }',
     'extern "C" __attribute__((visibility("default"))) void wm_emu_entry(void** args) { k((float*)args[0]); }']
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from compiler.diskcache import DiskCache, cache_key, default_cache_root
from compiler.source import KernelSource, Param

from .errors import EmulationCompileError

#: Bump when the emulator's behaviour changes in a way its sources' digest would not show.
EMU_VERSION = "1"
ENTRY_SYMBOL = "wm_emu_entry"

_HERE = Path(__file__).resolve().parent
INCLUDE_DIR = _HERE / "include"
RUNTIME_DIR = _HERE / "runtime"
PRIMS_INCLUDE_DIR = _HERE.parents[1] / "include"

_C_TYPES: Mapping[str, str] = {
    "float32": "float",
    "float16": "__half",
    "bfloat16": "__nv_bfloat16",
    "int32": "int",
    "uint32": "unsigned int",
    "bool": "bool",
}
_EXTERN_SHARED = re.compile(r"extern\s+__shared__\s+([^;\[\]]*?)\s*\[\s*\]\s*;")
_ALIGN = re.compile(r"__align__\s*\(\s*\d+\s*\)")
_IDENT = re.compile(r"[A-Za-z_]\w*$")


_KERNEL_FLAGS = (
    "-std=c++17",
    "-pipe",
    "-fPIC",
    "-shared",
    "-fno-strict-aliasing",
    "-fno-exceptions",
    "-fno-rtti",
    "-fvisibility=hidden",
    "-fstack-clash-protection",  # a big local array probes page by page: it hits the guard, not a neighbour
    # Every local without an initialiser (accumulators, register arrays) starts as GCC's fixed pattern,
    # 0xFE in each byte, so a kernel that relies on a lucky 0 fails its comparison. GCC has no NaN
    # fill (clang has, but it is not the compiler here): f32 starts at -1.7e38, f64 at -5.3e303, an
    # int at -16843010, f16 (0xFEFE) is a NaN, bf16 -1.7e38. A sum started from those stays far from
    # any real result; what a NaN would add is only survival through a multiplication by zero.
    "-ftrivial-auto-var-init=pattern",
    "-w",
)
_RACE_FLAGS = (
    "-fsanitize=kernel-address",
    "--param",
    "asan-instrumentation-with-call-threshold=0",
    "--param",
    "asan-stack=0",
    "--param",
    "asan-globals=0",
)
#: The runtime is the launch server, an executable whose symbols kernel libraries bind to (-rdynamic).
_RUNTIME_FLAGS = ("-O2", "-D_GNU_SOURCE", "-rdynamic")


@functools.cache
def host_isa_flags() -> tuple[str, ...]:
    """``-mfma -mavx2 -mf16c`` where the host has them: without FMA, every ``fmaf`` in a kernel is a
    library call that also keeps accumulators out of registers (the kernel runs 5x slower)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return ()
    words = set(text.split())
    return ("-mfma", "-mavx2", "-mf16c") if {"fma", "avx2", "f16c"} <= words else ()


#: -ftrivial-auto-var-init, which poisons uninitialised locals, came with GCC 12.
MIN_GCC_MAJOR = 12


def toolchain_problem(config: EmuConfig) -> str | None:
    """Why the compilers ``config`` names cannot build kernels here (missing, or not GCC >= 12), or
    None. Asked afresh each time: installing one, or changing PATH, must show."""
    for role, name in (("C++", config.cxx), ("C", config.cc)):
        if shutil.which(name) is None:
            return (f"the emulator's {role} compiler {name!r} is not on PATH "
                    f"(install GCC {MIN_GCC_MAJOR} or later, or set EmuConfig.{'cxx' if role == 'C++' else 'cc'})")
    for name in (config.cxx, config.cc):
        try:
            proc = subprocess.run([name, "--version"], capture_output=True, text=True, timeout=30, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"the emulator's compiler {name!r} does not run: {exc}"
        first = proc.stdout.splitlines()[0] if proc.stdout else ""
        version = re.search(r"\) (\d+)\.\d+", first) if "Free Software Foundation" in proc.stdout else None
        if proc.returncode != 0 or version is None:
            return f"the emulator needs GCC {MIN_GCC_MAJOR} or later; {name!r} is {first or 'not GCC'!r}"
        if int(version.group(1)) < MIN_GCC_MAJOR:
            return f"the emulator needs GCC {MIN_GCC_MAJOR} or later; {name!r} is {first!r}"
    return None


def _default_workers() -> int:
    return max(1, len(os.sched_getaffinity(0)))


@dataclass(frozen=True)
class EmuConfig:
    """Where and how the emulator builds and runs kernels.

    ``cache_dir`` holds compiled kernels (LRU, at most ``cache_bytes``); ``workers`` is the number of
    OS threads a launch spreads blocks over; ``stack_bytes`` the stack of each emulated CUDA thread
    (local arrays live there).
    """

    cache_dir: Path
    cache_bytes: int = 256 << 20
    cxx: str = "g++"
    cc: str = "gcc"
    opt_level: str = "-O2"
    workers: int = field(default_factory=_default_workers)
    stack_bytes: int = 64 << 10
    compile_timeout_s: float = 120.0
    #: Use the ucontext fiber switch even on x86-64 (it is the only one elsewhere); about ten times
    #: slower per switch. Each kind has its own launch server, so both may be used in one process.
    portable_fibers: bool = False

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ValueError(f"EmuConfig: workers must be >= 1, got {self.workers}")
        if self.stack_bytes < 16 << 10 or self.stack_bytes % 4096:
            raise ValueError(
                f"EmuConfig: stack_bytes must be a multiple of 4096, >= 16 KiB, got {self.stack_bytes}"
            )

    @classmethod
    def default(cls, environ: Mapping[str, str] | None = None) -> EmuConfig:
        """``$WARPMAP_CACHE_DIR/emu``, else ``~/.cache/warpmap/emu`` (see ``default_cache_root``)."""
        return cls(cache_dir=default_cache_root(environ) / "emu")

    @property
    def cache(self) -> DiskCache:
        return DiskCache(self.cache_dir, self.cache_bytes)


@dataclass(frozen=True)
class EmuBinary:
    """A compiled kernel: the shared object on disk and the kernel it was built from."""

    kernel: KernelSource
    path: Path
    detect_races: bool


@functools.cache
def toolchain_digest() -> str:
    """Digest of every emulator source a kernel build depends on (headers, runtime, wrappers)."""
    h = hashlib.sha256(EMU_VERSION.encode())
    for root in (INCLUDE_DIR, RUNTIME_DIR, PRIMS_INCLUDE_DIR):
        for path in sorted(root.rglob("*")):
            if path.is_file() and path.suffix in {".h", ".cuh", ".c"}:
                h.update(path.relative_to(root).as_posix().encode())
                h.update(path.read_bytes())
    return h.hexdigest()[:24]


def _rewrite_dynamic_shared(match: re.Match[str]) -> str:
    decl = _ALIGN.sub(" ", match.group(1)).strip()
    name_match = _IDENT.search(decl)
    if name_match is None or not decl[: name_match.start()].strip():
        raise ValueError(f"cannot parse dynamic shared memory declaration {match.group(0)!r}")
    ctype = decl[: name_match.start()].strip()
    newlines = "\n" * match.group(0).count("\n")  # keep the compiler's line numbers those of the source
    return f"{ctype}* const {name_match.group(0)} = ({ctype}*)wm_dynamic_shared();{newlines}"


def _entry_trampoline(kernel: KernelSource) -> str:
    args = []
    for i, p in enumerate(kernel.params):
        ctype = _param_ctype(kernel.entry, p)
        args.append(f"({ctype}*)args[{i}]" if p.pointer else f"*({ctype}*)args[{i}]")
    return (
        f'\nextern "C" __attribute__((visibility("default"))) void {ENTRY_SYMBOL}(void** args) '
        f"{{ {kernel.entry}({', '.join(args)}); }}\n"
    )


def _param_ctype(entry: str, p: Param) -> str:
    if p.dtype not in _C_TYPES:
        raise ValueError(
            f"{entry}: parameter {p.name!r} has dtype {p.dtype!r}, which the emulator cannot pass"
        )
    return _C_TYPES[p.dtype]


def prepare_source(kernel: KernelSource) -> str:
    """The text actually compiled: the kernel source with dynamic shared memory rewired, plus a
    trampoline; line numbers are kept.

    CUDA's ``#pragma unroll`` is left for g++ to ignore: spelling it as ``#pragma GCC unroll`` was
    measured to double compile time and slow the tiled matmul by 20% (larger code, same vector loop).
    """
    return _EXTERN_SHARED.sub(_rewrite_dynamic_shared, kernel.source) + _entry_trampoline(kernel)


def _compile(
    cmd: list[str], source: str, suffix: str, kernel_name: str, timeout_s: float, libs: tuple[str, ...] = ()
) -> bytes:
    with tempfile.TemporaryDirectory(prefix="wm-emu-") as tmp:
        src = Path(tmp) / f"{kernel_name}{suffix}"
        out = Path(tmp) / "out"
        src.write_text(source)
        try:
            proc = subprocess.run(
                [*cmd, "-o", str(out), str(src), *libs],
                capture_output=True,
                text=True,
                timeout=timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise EmulationCompileError(
                kernel_name, f"{kernel_name}: host compile ran past {timeout_s} s", ""
            ) from exc
        if proc.returncode != 0:
            log = proc.stderr.replace(str(src), f"{kernel_name}.cu")
            first = next((ln for ln in log.splitlines() if "error" in ln), log.strip()[:300])
            raise EmulationCompileError(kernel_name, f"{kernel_name}: host compile failed: {first}", log)
        return out.read_bytes()


def _runtime_flags(config: EmuConfig) -> tuple[str, ...]:
    return (*_RUNTIME_FLAGS, f"-I{INCLUDE_DIR}", *(("-DWM_PORTABLE_FIBERS",) if config.portable_fibers else ()))


def runtime_key(config: EmuConfig) -> str:
    """What identifies a runtime build: toolchain digest, C compiler and flags (not the cache folder)."""
    return cache_key("emu-runtime", toolchain_digest(), config.cc, *_runtime_flags(config))


def build_runtime(config: EmuConfig) -> Path:
    """The emulator runtime: the launch server executable (built once per toolchain digest and cached)."""
    flags = _runtime_flags(config)
    key = runtime_key(config)
    cache = config.cache
    found = cache.path(key)
    if found is None:
        sources = sorted(RUNTIME_DIR.glob("*.c"))
        unity = "".join(f'#include "{s}"\n' for s in sources)
        data = _compile(
            [config.cc, *flags, "-x", "c"],
            unity,
            ".c",
            "wm_runtime",
            config.compile_timeout_s,
            ("-ldl", "-lpthread"),
        )
        found = cache.put(key, data)
    if not os.access(found, os.X_OK):
        found.chmod(0o755)
    return found


def compile_flags(config: EmuConfig, *, detect_races: bool) -> tuple[str, ...]:
    # The race build mostly runs a sample of blocks (target.py), so its compile time counts more than
    # its speed: -O1 compiles it about 40% faster than -O2 (measured: 283 vs 475 ms for a matmul).
    return (
        *_KERNEL_FLAGS,
        "-O1" if detect_races else config.opt_level,
        *host_isa_flags(),
        "-DWARPMAP_EMU=1",
        f"-I{INCLUDE_DIR}",
        f"-I{PRIMS_INCLUDE_DIR}",
        "-include",
        "wm_emu.h",
        *(_RACE_FLAGS if detect_races else ()),
    )


def compile_kernel(
    kernel: KernelSource, *, config: EmuConfig | None = None, detect_races: bool = False
) -> EmuBinary:
    """Compile ``kernel`` for the emulator, or fetch it from the cache (key: source, flags, toolchain)."""
    cfg = config or EmuConfig.default()
    text = prepare_source(kernel)
    flags = compile_flags(cfg, detect_races=detect_races)
    key = cache_key("emu-kernel", toolchain_digest(), cfg.cxx, *flags, text)
    cache = cfg.cache
    found = cache.path(key)
    if found is None:
        data = _compile(
            [cfg.cxx, *flags, "-x", "c++"], text, ".cpp", kernel.entry, cfg.compile_timeout_s, ("-lm",)
        )
        found = cache.put(key, data)
    return EmuBinary(kernel=kernel, path=found, detect_races=detect_races)
