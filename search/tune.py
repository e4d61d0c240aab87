"""Tuning one workload on one target: a strategy over the template's space, every candidate built in a
compile pool, checked and timed in the measuring process, the best re-timed at the end.

Measurement protocol (what every figure a tuning reports stands on):

1. candidates are built and compiled in a pool of processes, several at once (one per core, as many as
   memory allows: ``search.measure.compile_workers``), each with a time-out
   (``search.measure.build_candidate``); the space is rebuilt there from (operator, spec, level, target),
   never pickled;
2. candidates whose binaries are identical (the same artifact key) are measured once;
3. the artifact is checked against the numpy reference on random inputs drawn for this tuning (outputs
   poisoned first) in a long-lived measuring process, and only a correct one is timed under the target's
   protocol (``compiler.backends.timing``); a crash or hang there fails that trial only
   (``search.isolation``);
4. compiling and timing never overlap: the pool builds a batch of candidates (as many as it has
   workers) and only when every build of the batch has ended (or been killed at its time-out) does the
   measuring process check and time them, one by one; the next batch is built after that. On the cpu
   the cores that time are the cores that compile, so none of them compiles while a kernel is timed;
5. the best three by median are re-timed interleaved (``search.measure.retime``); the reported best is
   the lowest re-timed median;
6. the roofline the best is held against is measured where it was timed, on the cpu: the FP32 peak
   (register FMAs on every core) and the bandwidth of vector loads over the workload's own footprint
   (from the caches when it fits them and the protocol leaves them warm, else from memory). On a GPU
   the bandwidth comes from the device's description where the operands come from its memory; its
   peak is not described (it depends on the dtype and the units: CUDA cores or tensor cores), so a
   GPU tuning reports no roofline yet.

``search`` knows no database and no web: the Optuna storage and the sink for trial records come from
the caller (the CLI and the service's workers wire them to ``db``). Several workers (processes,
machines) may share one study: see :func:`tune`.
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from multiprocessing import get_context
from typing import Any

import optuna

from compiler.backends import Artifact, Target
from compiler.backends.timing import DEFAULT_PROTOCOL, Protocol, Samples
from compiler.cpu_device import KERNEL_CPUS_VARIABLE, PROCESS_CPUS
from compiler.ops import get_operator
from compiler.space import Space
from search.isolation import Crashed, IsolatedProcess, Raised, Returned, TimedOut
from search.measure import (
    BuildRequest,
    Built,
    Measurement,
    MeasureRequest,
    build_candidate,
    measure_candidate,
    measured_bandwidth,
    measured_peak,
    retime,
)
from search.measure import compile_workers as pool_size
from search.results import Progress, Trial, TuneError, TuneResult
from search.strategies import Budget, Outcome, SearchResult, TrialRecord, search
from search.strategies.workers import LOST_AFTER_S
from search.trial import TrialStatus

# What a tuning reports lives in search.results; callers import it from here too.
__all__ = ["MEASURING_ENVIRONMENT", "Progress", "Trial", "TuneError", "TuneResult", "measuring_environment", "tune"]

#: The measuring process's environment. numpy's BLAS on one thread: its idle threads spin after every
#: call (the reference, the comparison's norms) and took cores from the kernel being timed (a 128 x 768 x
#: 768 matmul measured 755 us there against 398 us with this setting, a one-off script, December 2026).
#: OpenMP threads bound to places, one CPU each, so that a cpu kernel's threads never share a core: on a
#: host where another process keeps a core busy, unbound threads could land two to a core, each spinning
#: for the other to arrive, and every call then waited out scheduler ticks (README, "Measured").
MEASURING_ENVIRONMENT = {"OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OMP_PROC_BIND": "true"}


def measuring_environment() -> dict[str, str]:
    """``MEASURING_ENVIRONMENT`` and the CPUs this process's kernels would launch on, handed down
    (``compiler.cpu_device.KERNEL_CPUS_VARIABLE``): the measuring process binds its OpenMP threads, and
    its own mask may be narrowed before it reads it."""
    return {**MEASURING_ENVIRONMENT, KERNEL_CPUS_VARIABLE: ",".join(str(cpu) for cpu in sorted(PROCESS_CPUS))}


#: How many of the fastest candidates are re-timed at the end, and in how many interleaved rounds.
RETIME_BEST = 3
RETIME_ROUNDS = 5


def _new_pool(workers: int) -> ProcessPoolExecutor:
    # spawn: the caller may hold threads (OpenMP, BLAS) that fork would copy in an unknown state. A script
    # that calls tune must guard its entry point (``if __name__ == "__main__":``), as for any spawn pool.
    return ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn"), initializer=_ignore_interrupts)


def _ignore_interrupts() -> None:
    """A build worker leaves Ctrl-C to the tuning: the terminal sends SIGINT to the whole process group, and
    the tuning (or a worker's graceful stop) ends the pool itself; without this every idle worker dies
    printing a traceback."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@contextlib.contextmanager
def _quiet_optuna() -> Iterator[None]:
    """Optuna at WARNING for the tuning's length (its INFO line per trial drowns a progress display),
    the caller's level restored after, whatever it was."""
    level = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(max(level, optuna.logging.WARNING))
    try:
        yield
    finally:
        optuna.logging.set_verbosity(level)


def _peak(device: object) -> float | None:
    peak = getattr(device, "peak_gflops_f32", None)
    return float(peak) if isinstance(peak, int | float) else None


def _bandwidth(device: object, footprint: int, cold_caches: bool) -> float | None:
    """The device description's memory bandwidth where it bounds this footprint: with cold caches, or
    past the L2. A warm footprint that the L2 holds streams faster than that, at a rate no description
    gives, so there is no figure for it."""
    bandwidth = getattr(device, "memory_bandwidth_gbs", None)
    if not isinstance(bandwidth, int | float) or bandwidth <= 0:
        return None
    l2 = getattr(device, "l2_bytes", 0)
    return float(bandwidth) if cold_caches or (isinstance(l2, int) and 0 < l2 < footprint) else None


@dataclass
class _Run:
    """The state of one tuning (its pool, measuring process, and what it measured so far)."""

    target: Target
    spec: Mapping[str, Any]
    level: int
    protocol: Protocol
    seed: int
    timeout_s: float
    pool: ProcessPoolExecutor
    child: IsolatedProcess
    trials: list[Trial] = field(default_factory=list)
    artifacts: dict[str, Artifact] = field(default_factory=dict)
    by_key: dict[str, Measurement] = field(default_factory=dict)
    #: The parameter values of each artifact measured (the first that built it).
    values: dict[str, Mapping[str, Any]] = field(default_factory=dict)

    workers: int = 1

    def objective(self, values: dict[str, Any]) -> tuple[Outcome, Trial]:
        """Build, check and time one candidate (not recorded in ``trials``)."""
        return next(self.evaluate([values]))

    def evaluate(self, points: list[dict[str, Any]]) -> Iterator[tuple[Outcome, Trial]]:
        """Build every point in the pool at once, then check and time them one by one (in order), each
        answered as it is measured. Nothing is timed while the pool compiles."""
        for values, built in zip(points, self._build_all(points), strict=True):
            yield self._measured(values, built, len(self.trials))

    def _measured(self, values: dict[str, Any], built: Built, number: int) -> tuple[Outcome, Trial]:
        if built.artifact is None:
            trial = Trial(number, values, built.status, built.message, built.compile_s, resources=built.resources)
            return Outcome.failed(built.status, built.message), trial
        key = built.artifact.key
        measured = self.by_key.get(key)
        if measured is None:
            measured = self._measure(built.artifact)
            self.by_key[key] = measured
            self.artifacts[key] = built.artifact
            self.values[key] = dict(values)
        trial = Trial(number, values, measured.status, measured.message, built.compile_s, measured.samples,
                      measured.error, built.resources, key)
        if measured.samples is None:
            return Outcome.failed(measured.status, measured.message), trial
        return Outcome.ok(measured.samples.median_ns / 1e6), trial

    def _build_all(self, points: list[dict[str, Any]]) -> list[Built]:
        """Every point built in the pool, each within the time-out (counted from submission: a batch is
        never larger than the pool, so every build starts at once). A build that hangs is killed with its
        worker; when a worker dies, the builds the broken pool took with it are built again alone, so
        only the candidate that killed it fails."""
        futures = [self.pool.submit(build_candidate, BuildRequest(self.target, self.spec, self.level, values))
                   for values in points]
        _, late = wait(futures, timeout=self.timeout_s)
        results: list[Built | None] = []
        broken: list[int] = []
        for index, (values, future) in enumerate(zip(points, futures, strict=True)):
            if future in late:
                results.append(Built(values, TrialStatus.TIMEOUT, f"build ran past {self.timeout_s:g} s"))
                continue
            try:
                results.append(future.result())
            except BrokenProcessPool as exc:  # a worker died (killed, out of memory)
                results.append(Built(values, TrialStatus.COMPILE_ERROR, f"the build process died: {exc}"))
                broken.append(index)
        if late or broken:
            self._replace_pool()
        if len(broken) > 1:
            for index in broken:
                results[index] = self._build_all([points[index]])[0]
        return [r for r in results if r is not None]

    def _replace_pool(self) -> None:
        for process in list(getattr(self.pool, "_processes", {}).values()):
            process.kill()
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.pool = _new_pool(self.workers)

    def _measure(self, artifact: Artifact) -> Measurement:
        request = MeasureRequest(self.target, self.spec, artifact, self.protocol, self.seed, self.timeout_s)
        # The whole measurement (load, check, time) gets the time-out twice over: timing takes its own time.
        outcome = self.child.call(measure_candidate, request, timeout_s=2 * self.timeout_s + 10)
        if isinstance(outcome, Returned):
            measured: Measurement = outcome.value
            return measured
        if isinstance(outcome, TimedOut):
            return Measurement(TrialStatus.TIMEOUT, outcome.message)
        if isinstance(outcome, Crashed):
            return Measurement(TrialStatus.LAUNCH_ERROR, outcome.message)
        assert isinstance(outcome, Raised)
        return Measurement(TrialStatus.LAUNCH_ERROR, f"{outcome.type_name}: {outcome.message}")


def tune(
    spec: Any,
    target: Target,
    *,
    strategy: str = "default",
    budget: Budget | None = None,
    level: int = 2,
    seed: int = 0,
    storage: Any = None,
    study_key: str | None = None,
    protocol: Protocol = DEFAULT_PROTOCOL,
    timeout_s: float = 120.0,
    on_progress: Callable[[Progress], None] | None = None,
    sink: Callable[[Trial], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    compile_workers: int | None = None,
    worker: str | None = None,
    lost_after_s: float | None = None,
    warm_start: Sequence[Mapping[str, Any]] = (),
) -> TuneResult:
    """Find the fastest correct schedule of ``spec`` on ``target`` (see the module docstring).

    ``storage`` is an Optuna storage (None: in memory) and ``study_key`` the study's name in it (one
    per workload, target device, toolchain and space); ``sink`` receives every trial as it ends;
    ``should_stop`` is asked before each proposal (a cancelled job, a worker told to stop): the search
    then ends after the batch in progress, and the best of what was measured is re-timed and returned.
    ``compile_workers`` is how many candidates are built at once (default: one per core, as memory
    allows); it is also how many the strategy proposes at a time.

    Several workers may tune one study at once (the same ``storage`` and ``study_key``, PostgreSQL for
    several processes): each evaluates points no other holds, all stop at the shared trial budget, and a
    trial whose worker has sent no heartbeat for ``lost_after_s`` (default: a minute plus ``timeout_s``)
    is failed and its point re-run once (``search.strategies.workers``). ``worker`` names this one.
    ``warm_start`` are schedules (parameter values, as the cache keeps them) to measure first, after the
    template's default: what was best for this workload elsewhere (``db.warm_start_schedules``); each is
    taken as the nearest point of this space, or passed over when none fits, and the strategy's own
    initial design comes on top of them.
    Raises :class:`TuneError` when no candidate was correct. Builds and measurements run in spawned
    processes, so a script calling this guards its entry point with ``if __name__ == "__main__":``.
    """
    budget = budget or Budget(trials=50)
    operator = get_operator(spec.op)
    footprint = operator.min_bytes(spec)
    space: Space[Any] = operator.space(spec, target.device(), level)
    spec_data = spec.model_dump(mode="json")
    started = time.monotonic()
    counts: dict[str, int] = {}
    workers = pool_size(compile_workers)
    with _quiet_optuna(), IsolatedProcess(environment=measuring_environment()) as child:
        run = _Run(target, spec_data, level, protocol, seed, timeout_s, _new_pool(workers), child, workers=workers)
        try:

            # A trial reaches the sink once the study has it (after the driver's tell), so a worker killed
            # in between leaves no record of a trial that the study will run again.
            told: dict[tuple[int, ...], Trial] = {}

            def evaluate(points: list[dict[str, Any]]) -> Iterator[Outcome]:
                for outcome, trial in run.evaluate(points):
                    run.trials.append(trial)
                    counts[trial.status.value] = counts.get(trial.status.value, 0) + 1
                    told[space.key(dict(trial.values))] = trial
                    yield outcome

            def progressed(record: TrialRecord) -> None:
                trial = told.pop(space.key(dict(record.values)), None)
                if sink is not None and trial is not None:
                    sink(trial)
                if on_progress is not None:
                    best = min((t.latency_ms for t in run.trials if t.latency_ms is not None), default=None)
                    on_progress(Progress(len(run.trials), budget.trials, dict(counts), best,
                                         time.monotonic() - started))

            found: SearchResult = search(space, None, strategy, budget, storage=storage, study_key=study_key,
                                         seed=seed, on_trial=progressed, should_stop=should_stop,
                                         evaluate=evaluate, batch=workers, worker=worker,
                                         lost_after_s=lost_after_s or LOST_AFTER_S + timeout_s, first=warm_start)
            _measure_resumed_best(run, found)
            best_key, best_samples, retimed = _retime_best(run)
            peak = _measured_peak(run) if best_key is not None else None
            bandwidth = _measured_bandwidth(run, footprint) if best_key is not None else None
        finally:
            run.pool.shutdown(cancel_futures=True)
    if best_key is None or best_samples is None:
        raise TuneError(_no_result(run.trials))
    return TuneResult(
        spec=spec_data, target=target.name, values=run.values[best_key], artifact=run.artifacts[best_key],
        samples=best_samples, flops=operator.flops(spec), min_bytes=footprint,
        peak_gflops=peak if peak is not None else _peak(target.device()), trials=tuple(run.trials),
        stopped=found.stopped, study=found.study_name, retimed=retimed, peak_measured=peak is not None,
        bandwidth_gbs=bandwidth if bandwidth is not None else _bandwidth(target.device(), footprint,
                                                                        protocol.flush_caches),
        bandwidth_measured=bandwidth is not None,
    )


def _measure_resumed_best(run: _Run, found: SearchResult) -> None:
    """Measure again the best points of a resumed study that this run did not measure: their artifacts were
    not kept by the process that measured them, and the re-timing compares artifacts side by side."""
    ranked = sorted((r for r in found.trials if r.resumed and r.value is not None), key=lambda r: r.value or 0.0)
    for record in ranked[:RETIME_BEST]:
        run.objective(dict(record.values))


def _retime_best(run: _Run) -> tuple[str | None, Samples | None, dict[str, float]]:
    ranked = sorted(((m.samples.median_ns, key) for key, m in run.by_key.items() if m.samples is not None))
    best = [key for _, key in ranked[:RETIME_BEST]]
    if not best:
        return None, None, {}
    if len(best) == 1:
        return best[0], run.by_key[best[0]].samples, {}
    requests = [MeasureRequest(run.target, run.spec, run.artifacts[key], run.protocol, run.seed, run.timeout_s)
                for key in best]
    outcome = run.child.call(retime, requests, RETIME_ROUNDS, timeout_s=len(best) * (2 * run.timeout_s + 10))
    if not isinstance(outcome, Returned):  # keep the first figures rather than lose the tuning
        return best[0], run.by_key[best[0]].samples, {}
    pooled: list[Samples] = outcome.value
    medians = {key: samples.median_ns / 1e6 for key, samples in zip(best, pooled, strict=True)}
    winner = min(range(len(best)), key=lambda i: pooled[i].median_ns)
    return best[winner], pooled[winner], medians


def _measured_peak(run: _Run) -> float | None:
    """The target's peak, measured in the measuring process (None where the target measures none, or
    the measurement failed: the estimate stands in, and the tuning is not lost)."""
    outcome = run.child.call(measured_peak, run.target, timeout_s=run.timeout_s)
    if isinstance(outcome, Returned) and isinstance(outcome.value, float) and outcome.value > 0:
        return outcome.value
    return None


def _measured_bandwidth(run: _Run, footprint: int) -> float | None:
    """The bandwidth over ``footprint`` bytes, measured in the measuring process (None where the target
    measures none, or the measurement failed: as for the peak, the tuning is not lost)."""
    outcome = run.child.call(measured_bandwidth, run.target, footprint, run.protocol.flush_caches,
                             timeout_s=run.timeout_s)
    if isinstance(outcome, Returned) and isinstance(outcome.value, float) and outcome.value > 0:
        return outcome.value
    return None


def _no_result(trials: list[Trial]) -> str:
    counts: dict[str, int] = {}
    for trial in trials:
        counts[trial.status.value] = counts.get(trial.status.value, 0) + 1
    summary = ", ".join(f"{n} {status}" for status, n in sorted(counts.items())) or "no trials"
    first = next((t.message.splitlines()[0] for t in trials if t.message), "")
    return f"no correct candidate was found ({summary})" + (f"; first failure: {first}" if first else "")
