"""Tuning on the cpu target end to end: strategy, builds in a pool, checks and timings in the measuring
process, the best re-timed; the result is a correct kernel, and failures are trial values."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import optuna
import pytest

from compiler.backends import get_target
from compiler.backends.timing import Protocol, Samples
from compiler.device import DEVICES
from compiler.ops import get_operator, parse_spec
from search.isolation import Crashed, Raised, TimedOut
from search.strategies import Budget
from search.trial import TrialStatus
from search.tune import RETIME_BEST, TuneResult, _bandwidth, _Run, tune

#: Short timings: the tests check the protocol's plumbing, not speed.
QUICK = Protocol(warmup_ms=1, min_repetitions=3, target_ms=2)


@pytest.fixture(autouse=True)
def _cpu(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("WARPMAP_CACHE_DIR", str(tmp_path / "cache"))
    reason = get_target("cpu").unavailable_reason()
    if reason is not None:
        pytest.skip(reason)


def _run_artifact(result, spec) -> np.ndarray:  # type: ignore[no-untyped-def]
    operator = get_operator(spec.op)
    inputs = operator.inputs(spec, np.random.default_rng(7))
    out = operator.outputs(spec)[0]
    y = np.full(out.shape, np.nan, np.float32)
    target = get_target("cpu")
    target.run(target.load(result.artifact), {**inputs, out.name: y}, timeout_s=60)
    expected = operator.reference(spec, inputs)[out.name]
    return np.linalg.norm(y - expected) / np.linalg.norm(expected)


def test_tune_returns_a_correct_kernel_and_every_trial() -> None:
    spec = parse_spec({"op": "matmul", "m": 37, "n": 29, "k": 53, "layout_a": "col"})
    seen = []
    result = tune(spec, get_target("cpu"), budget=Budget(trials=4), protocol=QUICK, on_progress=seen.append)
    assert len(result.trials) == 4 and [p.done for p in seen] == [1, 2, 3, 4]
    assert all(t.status is TrialStatus.OK and t.samples is not None for t in result.trials)
    assert result.trials[0].values == get_operator("matmul").space(spec, get_target("cpu").device(), 2).default_values()
    assert 1 <= len(result.retimed) <= RETIME_BEST or len({t.artifact_key for t in result.trials}) == 1
    assert result.latency_ms > 0 and result.gflops == pytest.approx(2 * 37 * 29 * 53 / (result.latency_ms * 1e6))
    assert _run_artifact(result, spec) < 1e-5
    assert result.values in [t.values for t in result.trials]
    # The cpu's roofs are measured where the kernels were timed, not estimated from the OS's clock.
    assert result.peak_measured and result.peak_gflops is not None and result.peak_gflops > 0
    assert result.bandwidth_measured and result.bandwidth_gbs is not None and result.bandwidth_gbs > 0
    assert result.bound in ("compute", "memory") and result.roofline_fraction is not None
    roof = result.peak_fraction if result.bound == "compute" else result.gbs / result.bandwidth_gbs
    assert result.roofline_fraction == pytest.approx(roof)


def _result(flops: int, min_bytes: int, median_ns: int, peak: float | None, bandwidth: float | None) -> TuneResult:
    # Only the figures matter to the roofline: the rest is whatever a result holds.
    return TuneResult(spec={}, target="cpu", values={}, artifact=None, samples=Samples((median_ns,), QUICK),  # type: ignore[arg-type]
                      flops=flops, min_bytes=min_bytes, peak_gflops=peak, trials=(), stopped="trials", study="s",
                      bandwidth_gbs=bandwidth)


@pytest.mark.parametrize(("flops", "min_bytes", "bound", "fraction"), [
    # 1 GFLOP at 100 GFLOP/s: 10 ms; 1 GB at 200 GB/s: 5 ms. Compute binds; the kernel took 20 ms.
    (10**9, 10**9, "compute", 0.5),
    # 0.1 GFLOP: 1 ms; 4 GB: 20 ms. Memory binds, and the kernel ran at the bandwidth.
    (10**8, 4 * 10**9, "memory", 1.0),
])
def test_the_roofline_is_the_longer_of_the_flops_at_the_peak_and_the_bytes_at_the_bandwidth(
        flops: int, min_bytes: int, bound: str, fraction: float) -> None:
    result = _result(flops, min_bytes, 20_000_000, 100.0, 200.0)
    assert result.bound == bound and result.roofline_fraction == pytest.approx(fraction)


def test_a_described_device_s_bandwidth_bounds_only_what_comes_from_its_memory() -> None:
    h200 = DEVICES["h200"]
    assert _bandwidth(h200, 2 * h200.l2_bytes, cold_caches=False) == h200.memory_bandwidth_gbs
    assert _bandwidth(h200, h200.l2_bytes // 2, cold_caches=True) == h200.memory_bandwidth_gbs
    assert _bandwidth(h200, h200.l2_bytes // 2, cold_caches=False) is None  # the L2 holds it, warm


def test_without_both_roofs_there_is_no_roofline() -> None:
    assert _result(10**9, 10**9, 10**7, 100.0, None).roofline_fraction is None
    assert _result(10**9, 10**9, 10**7, None, 200.0).bound is None
    assert _result(10**9, 10**9, 10**7, 100.0, None).peak_fraction == pytest.approx(1.0)


def test_a_study_resumes_without_measuring_its_points_again(tmp_path: Path) -> None:
    spec = parse_spec({"op": "softmax", "rows": 7, "cols": 33})
    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 'study.db'}")
    first = tune(spec, get_target("cpu"), budget=Budget(trials=3), protocol=QUICK, storage=storage, study_key="s")
    second = tune(spec, get_target("cpu"), budget=Budget(trials=5), protocol=QUICK, storage=storage, study_key="s")
    assert len(first.trials) == 3 and len(second.trials) == 2
    assert not {tuple(t.values.items()) for t in first.trials} & {tuple(t.values.items()) for t in second.trials}
    assert _run_artifact(second, spec) < 1e-5


class _Child:
    """A measuring process stand-in that answers every call with one outcome."""

    def __init__(self, outcome: object) -> None:
        self.outcome = outcome

    def call(self, *_: object, timeout_s: float) -> object:
        return self.outcome


@pytest.mark.parametrize(("outcome", "status", "phrase"), [
    (Crashed(-11, "the measuring process killed by SIGSEGV"), TrialStatus.LAUNCH_ERROR, "SIGSEGV"),
    (TimedOut(3.0, "no result within 3 s"), TrialStatus.TIMEOUT, "within 3 s"),
    (Raised("OSError", "cannot load", ""), TrialStatus.LAUNCH_ERROR, "OSError: cannot load"),
])
def test_a_candidate_that_takes_its_process_down_fails_its_trial(outcome: object, status: TrialStatus,
                                                                 phrase: str) -> None:
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    spec = parse_spec({"op": "reduce", "shape": [5, 9], "axis": 1, "kind": "sum"})
    target = get_target("cpu")
    values = get_operator("reduce").space(spec, target.device(), 2).default_values()
    assert values is not None
    with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
        run = _Run(target, spec.model_dump(mode="json"), 2, QUICK, 0, 60.0, pool, _Child(outcome))  # type: ignore[arg-type]
        result, trial = run.objective(values)
    assert result.status is status and trial.status is status and phrase in trial.message


class _Watching:
    """A measuring process stand-in that notes whether the pool had builds in flight when it was called."""

    def __init__(self) -> None:
        self.run: _Run | None = None
        self.busy: list[int] = []

    def call(self, *_: object, timeout_s: float) -> object:
        assert self.run is not None
        self.busy.append(len(self.run.pool._pending_work_items))  # type: ignore[attr-defined]
        return TimedOut(1.0, "not measured")


def test_a_batch_is_built_at_once_and_measured_only_once_every_build_ended() -> None:
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    spec = parse_spec({"op": "matmul", "m": 19, "n": 23, "k": 11})
    target = get_target("cpu")
    space = get_operator("matmul").space(spec, target.device(), 2)
    rng = random.Random(5)
    values: list[dict] = []
    while len(values) < 3:
        point = space.random_values(rng)
        if space.is_valid(point) and point not in values:
            values.append(point)
    watching = _Watching()
    with ProcessPoolExecutor(3, mp_context=get_context("spawn")) as pool:
        run = _Run(target, spec.model_dump(mode="json"), 2, QUICK, 0, 120.0, pool, watching, workers=3)  # type: ignore[arg-type]
        watching.run = run
        answered = list(run.evaluate(values))
    assert len(answered) == 3 and all(trial.compile_s > 0 for _, trial in answered)
    assert watching.busy and set(watching.busy) == {0}  # never while a build was in flight


def test_builds_past_the_time_out_fail_as_timeouts_and_the_pool_is_replaced() -> None:
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    spec = parse_spec({"op": "softmax", "rows": 3, "cols": 17})
    target = get_target("cpu")
    space = get_operator("softmax").space(spec, target.device(), 2)
    values = [space.default_values(), *(v for v in space.valid_values()[:3] if v != space.default_values())][:2]
    pool = ProcessPoolExecutor(2, mp_context=get_context("spawn"))
    run = _Run(target, spec.model_dump(mode="json"), 2, QUICK, 0, 0.01, pool, _Child(None), workers=2)  # type: ignore[arg-type]
    try:
        answered = list(run.evaluate(values))
        assert [trial.status for _, trial in answered] == [TrialStatus.TIMEOUT] * 2
        assert "past 0.01 s" in answered[0][1].message and run.pool is not pool
    finally:
        run.pool.shutdown(cancel_futures=True)


def test_tune_with_a_pool_of_two_returns_a_correct_kernel() -> None:
    spec = parse_spec({"op": "matmul", "m": 31, "n": 17, "k": 41})
    result = tune(spec, get_target("cpu"), budget=Budget(trials=5), protocol=QUICK, compile_workers=2)
    assert len(result.trials) == 5 and len({tuple(sorted(t.values.items())) for t in result.trials}) == 5
    assert _run_artifact(result, spec) < 1e-5


def test_values_outside_the_space_are_pruned_before_compiling() -> None:
    from search.measure import BuildRequest, build_candidate

    spec = {"op": "softmax", "rows": 4, "cols": 8}
    built = build_candidate(BuildRequest(get_target("cpu"), spec, 2, {"lanes": 3, "unroll": 1, "rows_per_block": 1}))
    assert built.status is TrialStatus.INVALID and built.artifact is None and "not a schedule" in built.message


def test_tune_silences_optunas_info_lines_and_restores_the_callers_level(
        capsys: pytest.CaptureFixture[str]) -> None:
    spec = parse_spec({"op": "reduce", "shape": [3, 7], "axis": 1, "kind": "max"})
    levels: list[int] = []
    optuna.logging.set_verbosity(optuna.logging.INFO)
    try:
        tune(spec, get_target("cpu"), budget=Budget(trials=2), protocol=QUICK, compile_workers=1,
             on_progress=lambda _: levels.append(optuna.logging.get_verbosity()))
        assert optuna.logging.get_verbosity() == optuna.logging.INFO
    finally:
        optuna.logging.set_verbosity(optuna.logging.WARNING)
    assert levels == [optuna.logging.WARNING] * 2
    assert "Trial 0" not in capsys.readouterr().err


def test_progress_eta_is_the_pace_so_far_times_what_is_left() -> None:
    from search.tune import Progress

    assert Progress(4, 10, {"ok": 4}, 1.0, 8.0).eta_s == 12.0
    assert Progress(0, 10, {}, None, 0.5).eta_s is None  # no pace yet
    assert Progress(3, None, {"ok": 3}, 1.0, 3.0).eta_s is None  # a budget of seconds or patience
    assert Progress(12, 10, {"ok": 12}, 1.0, 6.0).eta_s == 0.0  # a resumed study past its budget
