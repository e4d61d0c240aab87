"""What a CPU schedule space needs to know about the host: ISA, vector width, cores, caches, clock.

The CPU side of the device description (``compiler.device.DeviceSpec`` is the GPU side). Everything
is read at run time from ``/proc/cpuinfo`` and ``/sys/devices/system/cpu``; nothing is assumed about
the host, AVX-512 least of all (machines of one kind differ: detect, do not presume). The readers take
the file-system root as a parameter, so tests feed them fixture trees of other machines.

Detection never raises: a file that is missing leaves its figure unknown (``None`` or empty).
"""

from __future__ import annotations

import dataclasses
import math
import os
import platform
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

#: cpuinfo flag -> our name, for the x86 features that change what a code generator may emit.
#: The order is the order of the summary: vector width first, then the extensions on top of it.
X86_FEATURES = {
    "sse4_2": "sse4.2", "avx": "avx", "avx2": "avx2", "fma": "fma", "f16c": "f16c",
    "avx512f": "avx512f", "avx512bw": "avx512bw", "avx512vl": "avx512vl", "avx512dq": "avx512dq",
    "avx512_vnni": "avx512vnni", "avx512_bf16": "avx512bf16", "avx512_fp16": "avx512fp16",
    "amx_tile": "amx-tile", "amx_bf16": "amx-bf16", "amx_int8": "amx-int8",
}
#: aarch64 ``Features`` entry -> our name.
ARM_FEATURES = {
    "asimd": "neon", "fphp": "fp16", "asimdhp": "neon-fp16", "asimddp": "dotprod", "bf16": "bf16",
    "i8mm": "i8mm", "sve": "sve", "sve2": "sve2",
}
#: (implementer, part) from an aarch64 cpuinfo, which names no model, -> (model, FP/SIMD pipes per core).
ARM_PARTS = {
    (0x41, 0xD0C): ("ARM Neoverse-N1", 2),
    (0x41, 0xD49): ("ARM Neoverse-N2", 2),
    (0x41, 0xD40): ("ARM Neoverse-V1", 4),
    (0x41, 0xD4F): ("ARM Neoverse-V2", 4),
}
_CPU = Path("sys/devices/system/cpu")


@dataclass(frozen=True)
class CacheLevel:
    """One cache of the first usable CPU, as sysfs describes it."""

    level: int
    kind: str  # "Data", "Instruction" or "Unified"
    size_bytes: int
    line_bytes: int
    #: Logical CPUs sharing this cache (1 for a private L1/L2; the whole socket or CCD for an L3).
    shared_cpus: int


@dataclass(frozen=True)
class CpuDevice:
    """The host CPU as detected at run time.

    ``peak_gflops_f32`` is an estimate computed from its inputs, never a measurement: FMA pipes per
    core (assumed from the vendor, family or part, see :func:`fma_pipes`) x f32 lanes x 2 flops x
    physical cores x clock. The clock is what cpufreq (``cpuinfo_max_freq``) or ``/proc/cpuinfo``
    (``cpu MHz``) reports, and the real clock under load may differ: on one EPYC host cpuinfo said
    2.445 GHz while a measured peak implied about 3.0 GHz. Time kernels; do not trust this figure.
    """

    model: str
    vendor: str
    machine: str  # "x86_64", "aarch64", ...
    features: tuple[str, ...]
    f32_lanes: int
    logical_cores: int
    physical_cores: int | None
    caches: tuple[CacheLevel, ...]
    clock_ghz: float | None
    clock_source: str
    fma_pipes: int
    #: What to pass the host compiler as ``-march=``: this very machine by default.
    march: str = "native"
    #: The CPUs' worth of time the process's control group allows, where it limits them (``cpu_quota``):
    #: ``logical_cores`` then counts only the CPUs that the quota pays for.
    cpu_quota: float | None = None

    def has(self, feature: str) -> bool:
        return feature in self.features

    def cache(self, level: int, kind: str = "Unified") -> CacheLevel | None:
        return next((c for c in self.caches if c.level == level and c.kind == kind), None)

    @property
    def l1d(self) -> CacheLevel | None:
        return self.cache(1, "Data")

    @property
    def l2(self) -> CacheLevel | None:
        return self.cache(2)

    @property
    def l3(self) -> CacheLevel | None:
        return self.cache(3)

    @property
    def compile_flags(self) -> tuple[str, ...]:
        """``-march`` and, where AVX-512 gives 16 f32 lanes, 512-bit vectors: GCC tunes many AVX-512
        parts (Skylake-SP to Sapphire Rapids) to prefer 256-bit ones, which would vectorise a schedule
        built for 16 lanes as two halves of 8 and make its lanes a fiction."""
        wide = ("-mprefer-vector-width=512",) if self.machine == "x86_64" and self.f32_lanes == 16 else ()
        return (f"-march={self.march}", *wide)

    @property
    def isa_summary(self) -> str:
        """The widest vector ISA, FMA and AMX when present, and the f32 lanes: ``avx2 fma, 8 f32 lanes``.

        >>> cpu = CpuDevice("x", "AuthenticAMD", "x86_64", ("sse4.2", "avx", "avx2", "fma"), 8, 2, 2, (),
        ...                 None, "unknown", 2)
        >>> cpu.isa_summary
        'avx2 fma, 8 f32 lanes'
        """
        widest = next((f for f in ("avx512f", "avx2", "avx", "sse4.2", "sve2", "sve", "neon") if self.has(f)), None)
        extras = [name for name, flag in (("fma", "fma"), ("amx", "amx-tile")) if self.has(flag)]
        words = " ".join([widest or self.machine, *extras])
        return f"{words}, {self.f32_lanes} f32 lanes"

    @property
    def peak_cores(self) -> int:
        """Cores the peak counts: physical ones when known (SMT siblings share the FMA pipes)."""
        return self.physical_cores or self.logical_cores

    @property
    def peak_gflops_f32(self) -> float | None:
        """fma_pipes x f32_lanes x 2 x peak_cores x clock_ghz, or None when the clock is unknown."""
        if self.clock_ghz is None:
            return None
        return self.fma_pipes * self.f32_lanes * 2 * self.peak_cores * self.clock_ghz


def parse_cpuinfo(text: str) -> list[dict[str, str]]:
    """The ``key: value`` blocks of ``/proc/cpuinfo``, one per blank-line-separated block.

    >>> parse_cpuinfo("processor\\t: 0\\nflags\\t\\t: fpu avx\\n\\nprocessor\\t: 1\\n")
    [{'processor': '0', 'flags': 'fpu avx'}, {'processor': '1'}]
    """
    blocks: list[dict[str, str]] = []
    current: dict[str, str] = {}
    for line in [*text.splitlines(), ""]:
        if not line.strip():
            if current:
                blocks.append(current)
            current = {}
            continue
        key, sep, value = line.partition(":")
        if sep:
            current[key.strip()] = value.strip()
    return blocks


def parse_cpu_list(text: str) -> frozenset[int]:
    """A sysfs CPU list such as ``0-3,8,10-11``.

    >>> sorted(parse_cpu_list("0-2,5"))
    [0, 1, 2, 5]
    """
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        cpus.update(range(int(low), int(high or low) + 1))
    return frozenset(cpus)


def parse_size(text: str) -> int:
    """A sysfs cache size such as ``48K`` or ``32768K``, in bytes.

    >>> parse_size("48K"), parse_size("2M"), parse_size("512")
    (49152, 2097152, 512)
    """
    text = text.strip().upper()
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    return int(text.rstrip("KMG")) * scale


def isa_features(block: dict[str, str], machine: str) -> tuple[str, ...]:
    """The codegen-relevant features one cpuinfo block lists, in our names and our order."""
    if machine == "aarch64":
        listed, table = set(block.get("Features", "").split()), ARM_FEATURES
    else:
        listed, table = set(block.get("flags", "").split()), X86_FEATURES
    return tuple(ours for flag, ours in table.items() if flag in listed)


def f32_lanes(features: Collection[str], machine: str) -> int:
    """The widest f32 vector the features allow: 16 (AVX-512), 8 (AVX/AVX2), 4 (SSE, NEON), else 1.

    x86-64 always has SSE2 and aarch64 always has NEON, so those machines have at least 4.
    """
    if "avx512f" in features:
        return 16
    if "avx" in features or "avx2" in features:
        return 8
    return 4 if machine in ("x86_64", "aarch64") or "neon" in features else 1


def fma_pipes(vendor: str, family: int | None, features: Collection[str], arm_part: tuple[int, int] | None) -> int:
    """FMA pipes per core at the f32 lane width, as assumed for the peak estimate (not detectable).

    Intel and AMD cores since Haswell and Zen 2 issue two FMAs a cycle (some Xeon Silver/Bronze parts
    have one 512-bit unit; cpuinfo cannot tell). Zen 4 (AMD family 0x19 with AVX-512) splits each
    512-bit FMA into two 256-bit halves, so at 16 lanes it completes one a cycle. Without FMA a core
    still issues one multiply and one add a cycle, which the formula counts as one pipe.
    """
    if arm_part is not None:
        return ARM_PARTS.get(arm_part, ("", 2))[1]
    if "fma" not in features:
        return 1
    if vendor == "AuthenticAMD" and family == 0x19 and "avx512f" in features:
        return 1
    return 2


def read_caches(root: Path, cpu: int) -> tuple[CacheLevel, ...]:
    """The caches sysfs lists for ``cpu`` under ``root``, by level then kind; empty when none are listed."""
    caches = []
    for index in sorted((root / _CPU / f"cpu{cpu}" / "cache").glob("index*")):
        try:
            level = int(_read(index / "level"))
            kind = _read(index / "type")
            size = parse_size(_read(index / "size"))
            line = int(_read(index / "coherency_line_size"))
            shared = len(parse_cpu_list(_read(index / "shared_cpu_list")))
        except (OSError, ValueError):
            continue  # a cache sysfs half-describes is left out rather than guessed
        caches.append(CacheLevel(level, kind, size, line, shared))
    return tuple(sorted(caches, key=lambda c: (c.level, c.kind)))


def physical_cores(root: Path, cpus: Collection[int], blocks: list[dict[str, str]]) -> int | None:
    """Distinct cores among ``cpus``: sysfs sibling lists, else cpuinfo's (physical id, core id)."""
    cores: set[frozenset[int] | tuple[str, str]] = set()
    for cpu in cpus:
        topology = root / _CPU / f"cpu{cpu}" / "topology"
        for name in ("core_cpus_list", "thread_siblings_list"):
            try:
                cores.add(parse_cpu_list(_read(topology / name)))
                break
            except (OSError, ValueError):
                continue
        else:
            cores.clear()
            break
    if cores:
        return len(cores)
    ids = {(b["physical id"], b["core id"]) for b in blocks
           if "physical id" in b and "core id" in b and _int(b.get("processor")) in cpus}
    return len(ids) or None


def clock(root: Path, cpu: int, block: dict[str, str]) -> tuple[float | None, str]:
    """(GHz, where it came from): cpufreq's maximum, else cpuinfo's ``cpu MHz``, else unknown."""
    try:
        return int(_read(root / _CPU / f"cpu{cpu}" / "cpufreq" / "cpuinfo_max_freq")) / 1e6, "cpufreq max"
    except (OSError, ValueError):
        pass
    try:
        return float(block["cpu MHz"]) / 1e3, "/proc/cpuinfo cpu MHz"
    except (KeyError, ValueError):
        return None, "unknown"


def describe_cpu(root: Path, cpus: Collection[int], machine: str) -> CpuDevice:
    """The CPU of the machine whose ``/proc`` and ``/sys`` lie under ``root``, for the usable ``cpus``."""
    try:
        blocks = parse_cpuinfo((root / "proc" / "cpuinfo").read_text())
    except OSError:
        blocks = []
    first = min(cpus) if cpus else 0
    block = next((b for b in blocks if _int(b.get("processor")) == first), blocks[0] if blocks else {})
    features = isa_features(block, machine)
    vendor = block.get("vendor_id", "")
    arm_part = None
    if machine == "aarch64" and "CPU part" in block:
        arm_part = (_int(block.get("CPU implementer")) or 0, _int(block.get("CPU part")) or 0)
    model = block.get("model name") or _arm_model(arm_part) or machine
    ghz, source = clock(root, first, block)
    return CpuDevice(
        model=model,
        vendor=vendor or (f"0x{arm_part[0]:x}" if arm_part else ""),
        machine=machine,
        features=features,
        f32_lanes=f32_lanes(features, machine),
        logical_cores=max(1, len(cpus)),
        physical_cores=physical_cores(root, cpus, blocks),
        caches=read_caches(root, first),
        clock_ghz=ghz,
        clock_source=source,
        fma_pipes=fma_pipes(vendor, _int(block.get("cpu family")), features, arm_part),
    )


def _affinity() -> frozenset[int]:
    try:
        cpus: Collection[int] = os.sched_getaffinity(0)
    except (AttributeError, OSError):  # not Linux: every CPU the OS counts
        cpus = range(os.cpu_count() or 1)
    return frozenset(cpus)


def cpu_quota(root: Path = Path("/")) -> float | None:
    """How many CPUs' worth of time this process's control group allows: its CFS quota over its period,
    the tightest along the hierarchy (cgroup v2 ``cpu.max``, v1 ``cpu.cfs_quota_us`` over
    ``cpu.cfs_period_us``); None when there is none or it cannot be read. A container started with
    ``--cpus 2`` on a 64-core host has an affinity mask of 64 CPUs and a quota of 2."""
    try:
        lines = (root / "proc" / "self" / "cgroup").read_text().splitlines()
    except OSError:
        return None
    quotas: list[float] = []
    for line in lines:
        if line.count(":") < 2:
            continue
        _, controllers, path = line.split(":", 2)
        if controllers == "":  # v2: one hierarchy
            mounts = [root / "sys" / "fs" / "cgroup"]
        elif "cpu" in controllers.split(","):
            mounts = [root / "sys" / "fs" / "cgroup" / name for name in (controllers, "cpu,cpuacct", "cpu")]
        else:
            continue
        for mount in dict.fromkeys(mounts):
            quotas.extend(_quotas_along(mount, path, v2=controllers == ""))
    return min(quotas, default=None)


def _quotas_along(mount: Path, path: str, *, v2: bool) -> list[float]:
    """The quotas set on the group at ``path`` under ``mount`` and on each group above it. Inside a
    container the host's path may not exist under the container's mount, whose root is then the group."""
    parts = [p for p in path.split("/") if p]
    found: list[float] = []
    for depth in range(len(parts), -1, -1):
        group = mount.joinpath(*parts[:depth])
        try:
            if v2:
                quota_text, _, period_text = _read(group / "cpu.max").partition(" ")
                if quota_text != "max":
                    found.append(int(quota_text) / int(period_text))
            else:
                quota = int(_read(group / "cpu.cfs_quota_us"))
                if quota > 0:
                    found.append(quota / int(_read(group / "cpu.cfs_period_us")))
        except (OSError, ValueError, ZeroDivisionError):
            continue
    return found


def usable_cpus(cpus: Collection[int], quota: float | None) -> frozenset[int]:
    """The CPUs a launch should spread over: the affinity mask's, or only as many of them (the lowest
    numbered) as the quota pays for, rounded up, when it pays for fewer. Threads past the quota only
    wait their turn, and a thread that waits holds up the launch."""
    ordered = sorted(cpus)
    if quota is not None and math.ceil(quota) < len(ordered):
        ordered = ordered[: max(1, math.ceil(quota))]
    return frozenset(ordered)


def detect_cpu(root: Path = Path("/")) -> CpuDevice:
    """This process's CPU: the CPUs its kernels run on (``PROCESS_CPUS``), this machine's architecture."""
    return dataclasses.replace(describe_cpu(root, PROCESS_CPUS, platform.machine()), cpu_quota=cpu_quota(root))


def _arm_model(part: tuple[int, int] | None) -> str | None:
    if part is None:
        return None
    return ARM_PARTS.get(part, (f"ARM implementer 0x{part[0]:x} part 0x{part[1]:x}", 2))[0]


def _read(path: Path) -> str:
    return path.read_text().strip()


def _int(text: str | None) -> int | None:
    """cpuinfo's integers: decimal, or hex with 0x (aarch64's implementer and part)."""
    try:
        if text is None:
            return None
        return int(text, 16) if text.lower().startswith("0x") else int(text)
    except ValueError:
        return None


#: The variable through which a tuning hands its measuring process the CPUs to launch on (a list such as
#: ``0-3,8``), so that the child does not read them from a mask that something loaded before this
#: module may have narrowed: an OpenMP runtime that binds threads to places (``OMP_PROC_BIND``, which
#: the measuring process sets) pins the thread that loads it to one CPU, and a numpy built on an OpenMP
#: BLAS loads one at import.
KERNEL_CPUS_VARIABLE = "WARPMAP_KERNEL_CPUS"


def process_cpus(environ: Mapping[str, str]) -> frozenset[int]:
    """The CPUs this process's kernels launch on: those ``KERNEL_CPUS_VARIABLE`` lists (ignored when it
    does not parse), else the affinity mask cut to the control group's CPU quota (``usable_cpus``)."""
    try:
        listed = parse_cpu_list(environ.get(KERNEL_CPUS_VARIABLE, ""))
    except ValueError:
        listed = frozenset()
    return listed or usable_cpus(_affinity(), cpu_quota())


#: ``process_cpus`` when this module was first imported, before this process loaded any kernel: the
#: main thread's own mask may narrow later (see ``KERNEL_CPUS_VARIABLE``) while a launch still spreads
#: over all of these.
PROCESS_CPUS = process_cpus(os.environ)
