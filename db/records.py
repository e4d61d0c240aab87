"""Plain values that go in and out of the repository functions: no ORM object escapes a session."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from db.keys import canonical_json, device_key, spec_hash, toolchain_key, workload_key
from db.models import TRIAL_STATUSES


@dataclass(frozen=True)
class WorkloadSpec:
    """An operator and its spec (plain JSON data)."""

    op: str
    spec: Mapping[str, Any]

    @property
    def key(self) -> str:
        return workload_key(op=self.op, spec=self.spec)

    @property
    def spec_hash(self) -> str:
        return spec_hash(self.spec)

    def canonical(self) -> str:
        return canonical_json(self.spec)


@dataclass(frozen=True)
class DeviceInfo:
    """A device model under one driver; ``arch`` is a compute capability (``sm_90``) or host ISA."""

    name: str
    arch: str
    driver: str
    compute_units: int = 0
    memory_bytes: int = 0
    l2_bytes: int = 0

    @property
    def key(self) -> str:
        return device_key(name=self.name, arch=self.arch, driver=self.driver)


@dataclass(frozen=True)
class ToolchainInfo:
    """The versions of everything that turns a schedule into a binary."""

    warpmap: str
    nvrtc: str
    host_compiler: str

    @property
    def key(self) -> str:
        return toolchain_key(warpmap=self.warpmap, nvrtc=self.nvrtc, host_compiler=self.host_compiler)


@dataclass(frozen=True)
class KernelResult:
    """A measured kernel offered to the cache; stored only if it beats what is there."""

    schedule: Mapping[str, Any]
    source: str
    entry: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int
    params: tuple[Mapping[str, Any], ...]
    latency_us: float
    trials_used: int
    binary: bytes | None = None
    gflops: float | None = None
    #: The 20th and 80th percentiles of the measurement whose median is ``latency_us``, and the bandwidth
    #: that median implies; None where they were not recorded (kernels stored before they were).
    latency_p20_us: float | None = None
    latency_p80_us: float | None = None
    gbs: float | None = None
    #: The roofs of the tuning that measured it: the target's FP32 peak and its bandwidth over this
    #: workload's footprint, as measured (or described) then; None where not known or not recorded.
    peak_gflops: float | None = None
    bandwidth_gbs: float | None = None
    #: The whole program when it has more than the one launch the fields above describe: ``{"target",
    #: "arguments", "workspaces", "launches": [{"entry", "source", "grid", "block", "shared_bytes",
    #: "params", "bindings"}, ...]}``, launches in the order they run; ``binary`` then archives each
    #: launch's binary.
    program: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        if not self.latency_us > 0:
            raise ValueError(f"kernel {self.entry!r}: latency_us must be positive, got {self.latency_us!r}")
        if self.trials_used < 0:
            raise ValueError(f"kernel {self.entry!r}: trials_used must be >= 0, got {self.trials_used}")
        low, high = self.latency_p20_us, self.latency_p80_us
        if (low is None) != (high is None) or (low is not None and high is not None and not 0 < low <= high):
            raise ValueError(f"kernel {self.entry!r}: latency_p20_us and latency_p80_us must be given together, "
                             f"positive and in order, got {low!r} and {high!r}")
        for name, roof in (("peak_gflops", self.peak_gflops), ("bandwidth_gbs", self.bandwidth_gbs)):
            if roof is not None and not roof > 0:
                raise ValueError(f"kernel {self.entry!r}: {name} must be positive when given, got {roof!r}")

    def fields(self) -> dict[str, Any]:
        """The plain, JSON-ready fields every stored form shares (the binary excepted)."""
        return {
            "schedule": dict(self.schedule),
            "source": self.source,
            "entry": self.entry,
            "grid": list(self.grid),
            "block": list(self.block),
            "shared_bytes": self.shared_bytes,
            "params": [dict(p) for p in self.params],
            "latency_us": self.latency_us,
            "latency_p20_us": self.latency_p20_us,
            "latency_p80_us": self.latency_p80_us,
            "gflops": self.gflops,
            "gbs": self.gbs,
            "peak_gflops": self.peak_gflops,
            "bandwidth_gbs": self.bandwidth_gbs,
            "trials_used": self.trials_used,
            "program": None if self.program is None else dict(self.program),
        }

    @property
    def size_bytes(self) -> int:
        documents = canonical_json({"schedule": self.schedule, "params": list(self.params), "program": self.program})
        return len(self.source.encode()) + len(self.binary or b"") + len(documents.encode())


@dataclass(frozen=True)
class CachedKernel:
    """A stored best kernel with the keys it is filed under."""

    id: int
    workload: WorkloadSpec
    device: DeviceInfo
    toolchain: ToolchainInfo
    result: KernelResult
    size_bytes: int
    created_at: datetime
    updated_at: datetime
    last_hit_at: datetime | None
    hits: int


@dataclass(frozen=True)
class CacheHit:
    """A lookup answer; ``exact`` is False for a nearest match (same arch, other driver or toolchain)."""

    kernel: CachedKernel
    exact: bool


@dataclass(frozen=True)
class TrialResult:
    """One measured (or failed) candidate of a tuning job."""

    number: int
    params: Mapping[str, Any]
    status: str
    message: str = ""
    latency_median_us: float | None = None
    latency_p20_us: float | None = None
    latency_p80_us: float | None = None
    samples: int = 0
    registers: int | None = None
    shared_bytes: int | None = None
    compile_ms: float | None = None

    def __post_init__(self) -> None:
        if self.status not in TRIAL_STATUSES:
            raise ValueError(
                f"trial {self.number}: unknown status {self.status!r}; expected one of {TRIAL_STATUSES}"
            )


@dataclass(frozen=True)
class TrialRecord:
    id: int
    job_id: int
    result: TrialResult
    created_at: datetime


@dataclass(frozen=True)
class JobRecord:
    id: int
    workload: WorkloadSpec
    device: DeviceInfo
    toolchain: ToolchainInfo
    status: str
    strategy: str
    budget: Mapping[str, Any]
    progress: Mapping[str, Any]
    #: The target as requested (``cpu``, ``cuda``, ``cuda:1``), the queue of its device kind, and how it
    #: is tuned (``{"level", "seed", "timeout_s"}``).
    target: str
    queue: str
    options: Mapping[str, Any]
    #: The worker running it now, None while it waits or once it ended.
    worker: str | None
    attempts: int
    error: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    updated_at: datetime


@dataclass(frozen=True)
class WorkerRecord:
    """A registered worker: the queue (device kind) it serves, and whether it was seen lately."""

    name: str
    target: str
    queue: str
    device: DeviceInfo
    toolchain: ToolchainInfo
    host: str
    pid: int
    started_at: datetime
    last_seen_at: datetime
    stopped_at: datetime | None
    job_id: int | None
    alive: bool


@dataclass(frozen=True)
class ApiKeyRecord:
    id: int
    name: str
    prefix: str
    scopes: tuple[str, ...] = field(default=())
    created_at: datetime | None = None
    last_used_at: datetime | None = None
    revoked_at: datetime | None = None
    max_trials: int | None = None
    max_seconds: float | None = None
