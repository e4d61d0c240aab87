"""The API's request and response bodies: pydantic models, so OpenAPI documents every field and example.

An operator spec is the operator's own model (``compiler.ops``), chosen by its ``op`` field: the
schema lists every operator with its examples, and a request is validated exactly as
``compiler.ops.parse_spec`` validates it (strict types, bounds, no extra fields). Nothing a client
sends is ever evaluated or written into generated source: a spec only selects a template and sizes it.
"""

from __future__ import annotations

from datetime import datetime
from functools import reduce
from operator import or_
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeAlias, cast

from pydantic import BaseModel, ConfigDict, Field

from compiler.ops import operators
from compiler.ops.spec import OpSpec
from search.strategies import STRATEGIES

#: ``cpu``, ``cuda`` (any GPU worker) or ``cuda:N`` (the workers of GPU N).
TARGET_PATTERN = r"^(cpu|cuda(:[0-9]{1,3})?)$"
#: The largest id a row can have on either database (PostgreSQL's ``integer``).
MAX_ID = 2**31 - 1

if TYPE_CHECKING:
    # Both types are built at import time from registries (the operator modules, STRATEGIES), which a
    # checker cannot enumerate: it sees what every member has in common. Pydantic reads the real ones below.
    class OperatorSpec(OpSpec):
        """Any operator's spec model: an OpSpec whose subclass declares ``op: Literal[<its name>]``."""

        op: str

    StrategyName: TypeAlias = str
else:
    OperatorSpec = Annotated[
        reduce(or_, [operator.spec_model for _, operator in sorted(operators().items())]),
        Field(discriminator="op", description="the operator and its sizes; `op` picks the operator"),
    ]
    StrategyName = Literal.__getitem__(("default", *STRATEGIES))


def operator_examples() -> list[dict[str, Any]]:
    """Every operator's own examples, in name order: the request examples of the schema."""
    found: list[dict[str, Any]] = []
    for _, operator in sorted(operators().items()):
        # Operators give their examples as {"examples": [spec, ...]}, none as the callable pydantic also allows.
        extra = cast(dict[str, list[dict[str, Any]]], operator.spec_model.model_config.get("json_schema_extra", {}))
        found.extend(extra.get("examples", []))
    return found


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class BudgetRequest(Strict):
    """When a tuning stops: after ``trials`` measurements, ``seconds``, or ``patience`` trials without gain."""

    trials: int = Field(default=40, ge=1, le=1_000_000, description="measured schedules, at most")
    seconds: float | None = Field(default=None, gt=0, le=30 * 24 * 3600.0,
                                  description="wall time, at most (default: the service's limit)")
    patience: int | None = Field(default=None, ge=1, le=1_000_000,
                                 description="stop after this many trials without a 1% gain")


class TuningRequest(Strict):
    """``POST /v1/tunings``: the best kernel for an operator on a target, from the cache or by tuning."""

    operator: OperatorSpec
    target: str | None = Field(default=None, pattern=TARGET_PATTERN,
                               description="cpu, cuda or cuda:N; default cuda when a GPU worker is registered")
    strategy: StrategyName = "default"
    budget: BudgetRequest = Field(default_factory=BudgetRequest)
    level: Literal[1, 2] = Field(default=2, description="schedule space level: 1 small, 2 production")
    seed: int = Field(default=0, ge=0, le=2**31 - 1)
    warm_start: bool = Field(default=True, description="measure first the best schedules the cache holds for "
                             "this operator on other devices or under other toolchains")


class LookupRequest(Strict):
    """``POST /v1/kernels/lookup``: the cached kernel for an operator on a target; tunes nothing."""

    operator: OperatorSpec
    target: str | None = Field(default=None, pattern=TARGET_PATTERN)
    nearest: bool = Field(default=False, description="when no exact entry: the same arch's, marked exact=false")


class Device(BaseModel):
    name: str
    arch: str
    driver: str
    compute_units: int
    memory_bytes: int
    l2_bytes: int
    key: str


class Toolchain(BaseModel):
    warpmap: str
    nvrtc: str
    host_compiler: str
    key: str


class Param(BaseModel):
    name: str
    dtype: str
    pointer: bool


class KernelSummary(BaseModel):
    id: int
    operator: dict[str, Any]
    target: Literal["cpu", "cuda"]
    device: Device
    toolchain: Toolchain
    schedule: dict[str, Any]
    latency_ms: float = Field(description="the median of the best kernel's measurement")
    latency_p20_ms: float | None = Field(default=None, description="its 20th percentile; null if not recorded")
    latency_p80_ms: float | None = Field(default=None, description="its 80th percentile; null if not recorded")
    gflops: float | None
    gbs: float | None = Field(default=None, description="the operands' least traffic over the median latency")
    peak_gflops: float | None = Field(default=None, description="the FP32 peak of the roofline it was tuned against")
    bandwidth_gbs: float | None = Field(
        default=None, description="the roofline's bandwidth over the workload's footprint, in GB/s")
    roofline_fraction: float | None = Field(
        default=None, description="the roofline's least time for the workload over the median latency")
    bound: Literal["compute", "memory"] | None = Field(default=None, description="the roof that binds")
    trials_used: int
    hits: int
    created_at: datetime
    updated_at: datetime


class Kernel(KernelSummary):
    entry: str
    source: str
    binary: str | None = Field(description="the binaries (a zip, one member per launch), base64; null for none")
    grid: list[int]
    block: list[int]
    shared_bytes: int
    params: list[Param]
    program: dict[str, Any] | None = Field(description="the whole program when it has several launches")
    exact: bool | None = Field(default=None, description="lookups only: false for a nearest match")


class Progress(BaseModel):
    """What the worker running a job last reported."""

    trials_done: int = 0
    trials_budget: int | None = None
    counts: dict[str, int] = Field(default_factory=dict, description="trials by status")
    best_ms: float | None = None
    elapsed_s: float = 0.0
    eta_s: float | None = None


JobStatus = Literal["queued", "running", "succeeded", "failed", "cancelled"]


class Tuning(BaseModel):
    id: int
    status: JobStatus
    operator: dict[str, Any]
    target: str
    queue: str
    device: Device
    strategy: str
    budget: dict[str, Any]
    level: int
    warm_start: bool = Field(description="whether it starts from the cache's best schedules of other keys")
    worker: str | None
    progress: Progress
    error: str | None
    attempts: int
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    kernel_id: int | None = Field(description="the cached kernel for this job's key, once there is one")


class TuningAnswer(BaseModel):
    """A hit (``kernel``), a job (``tuning``), or both when ``?wait`` saw the job succeed."""

    cache: Literal["hit", "miss"]
    kernel: Kernel | None
    tuning: Tuning | None


class Trial(BaseModel):
    number: int
    status: str
    params: dict[str, Any]
    message: str
    latency_ms: float | None
    latency_p20_ms: float | None
    latency_p80_ms: float | None
    samples: int
    compile_ms: float | None
    registers: int | None
    shared_bytes: int | None


class Page(BaseModel):
    total: int
    limit: int
    offset: int


class TrialPage(Page):
    items: list[Trial]


class KernelPage(Page):
    items: list[KernelSummary]


class TuningPage(Page):
    items: list[Tuning]


class Worker(BaseModel):
    name: str
    target: str
    queue: str
    device: Device
    alive: bool
    last_seen_at: datetime | None
    job_id: int | None


class WorkerList(BaseModel):
    items: list[Worker]


class Health(BaseModel):
    status: Literal["ok"]


class Readiness(BaseModel):
    status: Literal["ready", "unready"]
    checks: dict[str, str] = Field(description="each check: ok, or what is wrong")


class ErrorBody(BaseModel):
    detail: str
