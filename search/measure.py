"""One candidate from parameter values to a defended figure: built in a pool, checked and timed in the
measuring process.

Two halves, each a top-level function of a picklable request, so each runs in another process:

- :func:`build_candidate` (a compile pool's worker): rebuilds the operator's space from (operator, spec,
  level, target) and the schedule from its parameter values — spaces are never pickled — then builds
  and compiles the program on the target (``search.verify.compile_schedule``);
- :func:`measure_candidate` (the long-lived measuring process, ``search.isolation``): loads the
  artifact that was built, checks it against the numpy reference on random inputs with its outputs
  poisoned, and only then times it under the target's protocol.

The artifact that was checked is the one that is timed, and the one a tuning stores.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from compiler.backends import Artifact, Target
from compiler.backends.errors import KernelRunError, KernelTimeoutError
from compiler.backends.timing import Protocol, Samples
from compiler.cpu_device import PROCESS_CPUS
from compiler.ops import get_operator, parse_spec
from search.trial import TrialStatus
from search.verify import CheckResult, Oracle, compile_schedule

#: Memory one build may hold at its peak (g++ -O3 on a large generated kernel, NVRTC with its headers,
#: plus the worker's interpreter): what bounds the compile pool on a machine with little memory.
BUILD_MEMORY_BYTES = 3 * 2**29


def available_memory_bytes(meminfo: str | os.PathLike[str] = "/proc/meminfo") -> int | None:
    """Memory the kernel says can be allocated without swapping (``MemAvailable``), else the free pages
    (``sysconf``), else None."""
    try:
        with open(meminfo, encoding="ascii") as lines:
            for line in lines:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return None


def compile_workers(requested: int | None = None, *, cores: int | None = None,
                    available_bytes: int | None = None) -> int:
    """How many candidates a tuning builds at once: ``requested`` if given, else one per core, as many as
    memory allows (``BUILD_MEMORY_BYTES`` each); at least one. ``cores`` and ``available_bytes`` default
    to this machine's.

    >>> compile_workers(cores=16, available_bytes=6 * 2**30), compile_workers(3)
    (4, 3)
    >>> compile_workers(cores=2, available_bytes=2**40), compile_workers(cores=8, available_bytes=2**20)
    (2, 1)
    """
    if requested is not None:
        if requested < 1:
            raise ValueError(f"compile_workers must be at least 1, got {requested}")
        return requested
    if cores is None:  # the cores this process may run on, not the machine's (a container, taskset, a quota)
        cores = len(PROCESS_CPUS)
    memory = available_bytes if available_bytes is not None else available_memory_bytes()
    by_memory = memory // BUILD_MEMORY_BYTES if memory is not None else cores
    return max(1, min(cores, by_memory))


@dataclass(frozen=True)
class BuildRequest:
    """What a pool worker needs to build one candidate: nothing that cannot be sent as plain data."""

    target: Target
    spec: Mapping[str, Any]
    level: int
    values: Mapping[str, Any]


@dataclass(frozen=True)
class Built:
    """A candidate built (``artifact`` set) or not (``status`` and ``message`` say why)."""

    values: Mapping[str, Any]
    status: TrialStatus
    message: str = ""
    artifact: Artifact | None = None
    compile_s: float = 0.0
    #: The resource report of each launch, as plain data (registers, spills, shared bytes per arch).
    resources: tuple[Mapping[str, Mapping[str, int | None]], ...] = ()


def build_candidate(request: BuildRequest) -> Built:
    """Build and compile the schedule of ``request.values``; every outcome is a value."""
    start = time.perf_counter()
    spec = parse_spec(dict(request.spec))
    operator = get_operator(spec.op)
    try:
        space = operator.space(spec, request.target.device(), request.level)
        schedule = space.schedule(request.values)
    except ValueError as exc:  # values outside the space: the proposer's mistake, pruned, never compiled
        return Built(request.values, TrialStatus.INVALID, f"not a schedule of this space: {exc}")
    result: CheckResult = compile_schedule(operator, spec, schedule, request.target)
    resources = tuple({arch: dataclasses.asdict(usage) for arch, usage in launch.items()}
                      for launch in result.launch_usage)
    elapsed = time.perf_counter() - start
    if result.artifact is None:
        return Built(request.values, result.status, result.message, None, elapsed, resources)
    return Built(request.values, TrialStatus.OK, "", result.artifact, elapsed, resources)


@dataclass(frozen=True)
class MeasureRequest:
    """One artifact to check and time, on the workload of ``spec`` with inputs drawn from ``seed``."""

    target: Target
    spec: Mapping[str, Any]
    artifact: Artifact
    protocol: Protocol
    seed: int = 0
    timeout_s: float = 60.0


@dataclass(frozen=True)
class Measurement:
    """How the measured half ended: checked and timed (``ok`` with samples), or why not."""

    status: TrialStatus
    message: str = ""
    error: float | None = None
    samples: Samples | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)


@functools.lru_cache(maxsize=4)
def _oracle(spec_json: str, seed: int) -> Oracle:
    """The inputs and reference of one workload, kept while the measuring process lives: a tuning measures
    many candidates of one workload, and the float64 reference is the slow part."""
    spec = parse_spec(json.loads(spec_json))
    return Oracle(get_operator(spec.op), spec, seed)


def _spec_json(spec: Mapping[str, Any]) -> str:
    return json.dumps(dict(spec), sort_keys=True)


def measure_candidate(request: MeasureRequest) -> Measurement:
    """Check ``request.artifact`` against numpy (outputs poisoned first), then time it; in this process."""
    oracle = _oracle(_spec_json(request.spec), request.seed)
    target, artifact = request.target, request.artifact
    buffers, outputs = oracle.arguments(artifact.program)
    try:
        loaded = target.load(artifact)
        target.run(loaded, buffers, timeout_s=request.timeout_s)
    except KernelTimeoutError as exc:
        return Measurement(TrialStatus.TIMEOUT, str(exc))
    except KernelRunError as exc:
        return Measurement(TrialStatus.LAUNCH_ERROR, str(exc))
    error, name = oracle.worst_error(outputs)
    allowed = oracle.tolerance(name) if name else 0.0
    if not error <= allowed:
        return Measurement(TrialStatus.WRONG_RESULT, f"{name}: relative error {error:.3g} > {allowed:.3g}", error)
    buffers, _ = oracle.arguments(artifact.program)
    samples = target.time(loaded, buffers, request.protocol)
    return Measurement(TrialStatus.OK, "", error, samples)


def measured_peak(target: Target) -> float | None:
    """The target's FP32 peak in GFLOP/s where it measures one (the cpu, in the process that times), else
    None (a GPU's comes from its device description)."""
    peak = getattr(target, "measured_peak_gflops", None)
    return float(peak()) if callable(peak) else None


def measured_bandwidth(target: Target, footprint: int, cold_caches: bool) -> float | None:
    """GB/s at which the target reads ``footprint`` bytes where it measures it (the cpu, in the process
    that times), else None (a GPU's comes from its device description)."""
    bandwidth = getattr(target, "measured_bandwidth_gbs", None)
    return float(bandwidth(footprint, cold_caches)) if callable(bandwidth) else None


def retime(requests: Sequence[MeasureRequest], rounds: int) -> list[Samples]:
    """Time each artifact again, interleaved: ``rounds`` rounds, each timing every artifact once under its
    protocol, so drift in the machine's speed falls on all of them alike. Returns the pooled samples of
    each, in request order. The artifacts were checked before; this only times."""
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    prepared = []
    for request in requests:
        oracle = _oracle(_spec_json(request.spec), request.seed)
        buffers, _ = oracle.arguments(request.artifact.program)
        prepared.append((request, request.target.load(request.artifact), buffers))
    pooled: list[list[int]] = [[] for _ in requests]
    for _ in range(rounds):
        for index, (request, loaded, buffers) in enumerate(prepared):
            pooled[index] += request.target.time(loaded, buffers, request.protocol).samples_ns
    return [Samples(tuple(times), request.protocol) for times, request in zip(pooled, requests, strict=True)]
