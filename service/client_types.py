"""What the HTTP API answers, as frozen values: devices, toolchains, kernels (with ``TunedKernel.load`` to
run one here), tunings and trials, parsed from the JSON of the API (CONTRACT section 4) by ``parse``.

``service.client`` re-exports every name; import them from there.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

#: Job statuses after which nothing changes.
FINISHED = frozenset({"succeeded", "failed", "cancelled"})


class ClientError(Exception):
    """A request the service refused or could not answer: ``status`` (HTTP, 0 when there was no answer)
    and the server's ``detail``."""

    def __init__(self, message: str, *, status: int = 0, detail: Any = None) -> None:
        super().__init__(message)
        self.status = status
        self.detail = detail


def _time(value: Any) -> datetime | None:
    return datetime.fromisoformat(value) if isinstance(value, str) and value else None


def _number(value: Any) -> float | None:
    return None if value is None else float(value)


@dataclass(frozen=True)
class Device:
    """A device as the cache files kernels under it (``arch``: a compute capability or the host's ISA)."""

    name: str
    arch: str
    driver: str = ""
    compute_units: int = 0
    memory_bytes: int = 0
    l2_bytes: int = 0
    key: str = ""

    @staticmethod
    def parse(data: Mapping[str, Any] | None) -> Device:
        data = data or {}
        return Device(str(data.get("name", "")), str(data.get("arch", "")), str(data.get("driver", "")),
                      int(data.get("compute_units") or 0), int(data.get("memory_bytes") or 0),
                      int(data.get("l2_bytes") or 0), str(data.get("key", "")))


@dataclass(frozen=True)
class Toolchain:
    """The versions that built a kernel."""

    warpmap: str
    nvrtc: str
    host_compiler: str
    key: str = ""

    @staticmethod
    def parse(data: Mapping[str, Any] | None) -> Toolchain:
        data = data or {}
        return Toolchain(str(data.get("warpmap", "")), str(data.get("nvrtc", "")),
                         str(data.get("host_compiler", "")), str(data.get("key", "")))


@dataclass(frozen=True)
class KernelSummary:
    """One kernel of the cache, as ``GET /v1/kernels`` lists it."""

    id: int
    operator: Mapping[str, Any]
    target: str
    device: Device
    toolchain: Toolchain
    schedule: Mapping[str, Any]
    latency_ms: float
    gflops: float | None
    trials_used: int
    hits: int
    created_at: datetime | None
    updated_at: datetime | None
    #: The measurement's 20th and 80th percentiles and GB/s; None for kernels stored without them.
    latency_p20_ms: float | None = None
    latency_p80_ms: float | None = None
    gbs: float | None = None
    #: The roofs of its tuning, the fraction of that roofline reached and the roof that binds.
    peak_gflops: float | None = None
    bandwidth_gbs: float | None = None
    roofline_fraction: float | None = None
    bound: str | None = None

    @classmethod
    def _summary(cls, data: Mapping[str, Any]) -> dict[str, Any]:
        return {"id": int(data["id"]), "operator": dict(data["operator"]), "target": str(data["target"]),
                "device": Device.parse(data.get("device")), "toolchain": Toolchain.parse(data.get("toolchain")),
                "schedule": dict(data.get("schedule") or {}), "latency_ms": float(data["latency_ms"]),
                "gflops": data.get("gflops"), "trials_used": int(data.get("trials_used") or 0),
                "hits": int(data.get("hits") or 0), "created_at": _time(data.get("created_at")),
                "updated_at": _time(data.get("updated_at")), "latency_p20_ms": _number(data.get("latency_p20_ms")),
                "latency_p80_ms": _number(data.get("latency_p80_ms")), "gbs": _number(data.get("gbs")),
                "peak_gflops": _number(data.get("peak_gflops")), "bandwidth_gbs": _number(data.get("bandwidth_gbs")),
                "roofline_fraction": _number(data.get("roofline_fraction")), "bound": data.get("bound")}

    @classmethod
    def parse(cls, data: Mapping[str, Any]) -> KernelSummary:
        return cls(**cls._summary(data))


@dataclass(frozen=True)
class TunedKernel(KernelSummary):
    """A kernel with everything needed to run it: its source, launch shape, parameters, the program
    document of a multi-launch program, the stored binary (decoded) and, for lookups, ``exact``."""

    entry: str = ""
    source: str = ""
    binary: bytes | None = None
    grid: tuple[int, int, int] = (1, 1, 1)
    block: tuple[int, int, int] = (1, 1, 1)
    shared_bytes: int = 0
    params: tuple[Mapping[str, Any], ...] = ()
    program: Mapping[str, Any] | None = None
    exact: bool | None = None

    @classmethod
    def parse(cls, data: Mapping[str, Any]) -> TunedKernel:
        try:
            binary = base64.b64decode(data["binary"], validate=True) if data.get("binary") else None
            return cls(**cls._summary(data), entry=str(data["entry"]), source=str(data.get("source", "")),
                       binary=binary, grid=tuple(data["grid"]), block=tuple(data["block"]),
                       shared_bytes=int(data.get("shared_bytes") or 0),
                       params=tuple(dict(p) for p in data.get("params") or ()), program=data.get("program"),
                       exact=data.get("exact"))
        except (KeyError, TypeError, ValueError) as exc:
            raise ClientError(f"the service sent a kernel this client cannot read: {exc!r}") from exc

    def document(self) -> dict[str, Any]:
        """The stored fields ``compiler.backends.stored.load_stored`` reads."""
        return {"target": self.target, "entry": self.entry, "source": self.source, "grid": list(self.grid),
                "block": list(self.block), "shared_bytes": self.shared_bytes, "params": [dict(p) for p in self.params],
                "program": self.program}

    def load(self, *, check_device: bool = True, **options: Any) -> Any:
        """The callable that runs this kernel here (``compiler.backends.stored.StoredKernel``), its
        arguments' shapes taken from the operator spec. A cpu kernel is refused (ValueError) when it was
        built for another CPU's instruction set, unless ``check_device`` is False; ``options`` go to
        ``load_stored`` (``device=`` the GPU ordinal, ``workers=``, ``cache_dir=``)."""
        from compiler.backends.stored import load_stored  # numpy and the backends load only when asked

        if self.binary is None:
            raise ValueError(f"kernel {self.id}: the service sent no binary")
        if check_device and self.target == "cpu":
            here = host_arch()
            if here != self.device.arch:
                raise ValueError(f"kernel {self.id} was built for {self.device.name} ({self.device.arch}); this host "
                                 f"is {here}, whose instructions may differ: load(check_device=False) to try anyway")
        return load_stored(self.document(), self.binary, shapes=argument_shapes(self.operator), **options)


def host_arch() -> str:
    """This host's cpu arch as the cache files it (``search.records.cache_identity``)."""
    from compiler.backends import get_target
    from search.records import cache_identity

    return cache_identity(get_target("cpu").fingerprint(), "")[0].arch


def argument_shapes(operator: Mapping[str, Any]) -> dict[str, tuple[int, ...]] | None:
    """Each argument's shape for the operator spec, or None when this installation cannot read the spec
    (an operator it does not know): the kernel then runs without shape checks."""
    import numpy as np

    from compiler.ops import get_operator, parse_spec

    try:
        spec = parse_spec(dict(operator))
        op = get_operator(spec.op)
        inputs = op.inputs(spec, np.random.default_rng(0))
    except ValueError:
        return None
    shapes = {name: tuple(array.shape) for name, array in inputs.items()}
    return shapes | {output.name: tuple(output.shape) for output in op.outputs(spec)}


@dataclass(frozen=True)
class Tuning:
    """A tuning job as ``GET /v1/tunings/{id}`` reports it."""

    id: int
    status: str
    operator: Mapping[str, Any]
    target: str
    queue: str
    device: Device
    strategy: str
    budget: Mapping[str, Any]
    level: int | None
    worker: str | None
    progress: Mapping[str, Any]
    error: str | None
    attempts: int
    created_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    kernel_id: int | None
    #: Whether the job starts from the cache's schedules of other keys (None: a service that does not say).
    warm_start: bool | None = None

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    @staticmethod
    def parse(data: Mapping[str, Any]) -> Tuning:
        try:
            return Tuning(int(data["id"]), str(data["status"]), dict(data.get("operator") or {}),
                          str(data.get("target", "")), str(data.get("queue", "")), Device.parse(data.get("device")),
                          str(data.get("strategy", "")), dict(data.get("budget") or {}), data.get("level"),
                          data.get("worker"), dict(data.get("progress") or {}), data.get("error"),
                          int(data.get("attempts") or 0), _time(data.get("created_at")),
                          _time(data.get("started_at")), _time(data.get("finished_at")), data.get("kernel_id"),
                          data.get("warm_start"))
        except (KeyError, TypeError, ValueError) as exc:
            raise ClientError(f"the service sent a tuning this client cannot read: {exc!r}") from exc


@dataclass(frozen=True)
class Trial:
    """One measured (or failed) candidate of a tuning."""

    number: int
    status: str
    params: Mapping[str, Any] = field(default_factory=dict)
    message: str = ""
    latency_ms: float | None = None
    latency_p20_ms: float | None = None
    latency_p80_ms: float | None = None
    samples: int = 0
    compile_ms: float | None = None
    registers: int | None = None
    shared_bytes: int | None = None

    @staticmethod
    def parse(data: Mapping[str, Any]) -> Trial:
        known = set(Trial.__dataclass_fields__)
        return Trial(**{k: v for k, v in data.items() if k in known})
