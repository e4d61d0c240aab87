"""The tuning section of ``bench/gpu_check.py``: matmul tuned on the GPU and timed against cuBLAS.

f32 (the SIMT template) and f16 (tensor cores) at 1024^3, 4096^3 and the BERT-base shapes, each tuned
with ``search.tune.tune`` on ``cuda`` under a short budget (``TRIALS`` trials or ``SECONDS`` seconds),
then ``torch.matmul`` (cuBLAS) timed on the same inputs (drawn from the tuning's seed) with CUDA events:
ours, cuBLAS, cuBLAS / ours (above 1: ours is faster), TFLOP/s and the fraction of the GPU's peak.

Budget (an H200, about 8 minutes for the whole script): the level-1 verification before this takes about
2-3 minutes; ten workloads here at ``SECONDS`` each plus a few seconds of pool start, re-timing and
cuBLAS make about 4-5 minutes; a workload that would start past ``DEADLINE_S`` of the script is skipped
and said so.

``--dry-run`` needs no GPU: for each workload it prints the plan (template, space, budget) and builds
the candidates the default strategy proposes before it has measured anything (the same first ones a real
run measures; later proposals depend on timings) through the tuning's own build path, NVRTC for sm_90
against the H200's limits, and prints each one's verdict and ptxas report.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from typing import Any

import numpy as np
import optuna

from compiler.backends import Target
from compiler.device import DeviceSpec
from compiler.ops import get_operator, parse_spec
from search.measure import BuildRequest, Built, build_candidate, compile_workers
from search.strategies import Budget, Outcome, search
from search.trial import TrialStatus
from search.tune import tune
from service.cli.table import format_table

#: (name, m, n, k) of each shape, tuned in both dtypes.
SHAPES = (("1024^3", 1024, 1024, 1024), ("4096^3", 4096, 4096, 4096), ("bert qkv", 128, 768, 768),
          ("bert ffn1", 128, 3072, 768), ("bert ffn2", 128, 768, 3072))
DTYPES = ("float32", "float16")
#: Per workload: at most this many trials, or this many seconds of search.
TRIALS = 32
SECONDS = 20.0
#: Seconds of the whole script after which no further workload is started.
DEADLINE_S = 450.0
#: Dense peak TFLOP/s by device name fragment and dtype (NVIDIA's data sheets; f16: tensor cores with
#: f32 accumulation, f32: CUDA cores).
PEAK_TFLOPS = {"H200": {"float32": 67.0, "float16": 989.0}, "H100": {"float32": 67.0, "float16": 989.0},
               "A100": {"float32": 19.5, "float16": 312.0}}


def workloads(selected: str | None = None) -> list[tuple[str, dict[str, Any]]]:
    """(label, spec) of every workload, or of those whose label contains one of ``selected``'s words."""
    found = [(f"{dtype[5:]}bit {name}", {"op": "matmul", "m": m, "n": n, "k": k, "dtype": dtype})
             for dtype in DTYPES for name, m, n, k in SHAPES]
    if selected:
        words = [w.strip() for w in selected.split(",")]
        found = [(label, spec) for label, spec in found if any(w in label for w in words)]
    return found


def _peak(device_name: str, dtype: str) -> float | None:
    return next((peaks[dtype] for key, peaks in PEAK_TFLOPS.items() if key in device_name), None)


def cublas_ms(spec_data: dict[str, Any], seed: int = 0, repetitions: int = 50) -> float:
    """Median milliseconds of ``torch.matmul`` on the GPU, on the inputs the tuning checked against."""
    import torch

    spec = parse_spec(spec_data)
    inputs = get_operator("matmul").inputs(spec, np.random.default_rng(seed))
    a, b = (torch.from_numpy(np.ascontiguousarray(inputs[name])).cuda() for name in ("a", "b"))
    for _ in range(10):
        torch.matmul(a, b)
    torch.cuda.synchronize()
    times = []
    for _ in range(repetitions):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.matmul(a, b)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def run(target: Target, device: DeviceSpec, script_start: float, selected: str | None = None) -> list[list[object]]:
    """Tune and time every workload on the GPU; one table row each."""
    rows: list[list[object]] = []
    header = ["workload", "ours ms", "cuBLAS ms", "cuBLAS/ours", "TFLOP/s", "% peak", "trials", "seconds"]
    for label, spec_data in workloads(selected):
        if time.monotonic() - script_start > DEADLINE_S:
            rows.append([label, "skipped: past the script's time budget", "", "", "", "", "", ""])
            continue
        start = time.monotonic()
        spec = parse_spec(spec_data)
        try:
            result = tune(spec, target, budget=Budget(trials=TRIALS, seconds=SECONDS), timeout_s=30.0,
                          compile_workers=min(8, compile_workers()))
            ours = result.latency_ms
            theirs = cublas_ms(spec_data)
            tflops = result.flops / (ours * 1e9)
            peak = _peak(device.name, spec.dtype)
            rows.append([label, f"{ours:.4f}", f"{theirs:.4f}", f"{theirs / ours:.2f}", f"{tflops:.1f}",
                         f"{100 * tflops / peak:.0f}" if peak else "n/a", len(result.trials),
                         round(time.monotonic() - start, 1)])
        except Exception as exc:  # one workload's failure is a row, not the end of the check
            rows.append([label, f"failed: {type(exc).__name__}: {exc}"[:200], "", "", "", "", "", ""])
        print(format_table(header, rows[-1:]), flush=True)
    print()
    print(format_table(header, rows))
    return rows


def _dry_batches(target: Target, spec_data: dict[str, Any], pool: ProcessPoolExecutor, built: list[Built]):  # type: ignore[no-untyped-def]
    def evaluate(points: list[dict[str, Any]]) -> Iterator[Outcome]:
        for done in pool.map(build_candidate, [BuildRequest(target, spec_data, 2, v) for v in points]):
            built.append(done)
            # No timing in a dry run: every candidate is told as not measured, so the strategy keeps to
            # the proposals it makes before any measurement.
            yield Outcome.failed(done.status if done.artifact is None else TrialStatus.INVALID, "dry run")

    return evaluate


def dry_run(target: Target, device: DeviceSpec, selected: str | None = None, trials: int = TRIALS) -> int:
    """Print the plan and build each workload's first candidates with NVRTC; 1 if any build failed."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    failures = 0
    workers = min(8, compile_workers())
    with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
        for label, spec_data in workloads(selected):
            start = time.monotonic()
            spec = parse_spec(spec_data)
            space = get_operator("matmul").space(spec, device, 2)
            print(f"{label}: {spec.canonical_json()} -> {space.template}, {space.size} combinations; budget "
                  f"{TRIALS} trials or {SECONDS:g} s; peak {_peak(device.name, spec.dtype)} TFLOP/s; "
                  f"cuBLAS timed after", flush=True)
            built: list[Built] = []
            search(space, None, "default", Budget(trials=trials), evaluate=_dry_batches(target, spec_data, pool, built),
                   batch=workers)
            rows = []
            for index, candidate in enumerate(built):
                usage = [u for launch in candidate.resources for u in launch.values()]
                regs = max((u.get("registers") or 0 for u in usage), default="-")
                smem = max((u.get("shared_bytes") or 0 for u in usage), default="-")
                verdict = "built" if candidate.artifact is not None else candidate.status.value
                failures += candidate.status.is_failure
                rows.append([index, ", ".join(f"{k}={v}" for k, v in candidate.values.items()), regs, smem,
                             f"{candidate.compile_s:.2f}", verdict, candidate.message.splitlines()[0]
                             if candidate.message else ""])
            print(format_table(["#", "schedule", "regs", "ptxas smem", "build s", "verdict", "note"], rows))
            print(f"{label}: {len(built)} candidates built in {time.monotonic() - start:.1f} s", flush=True)
    return 1 if failures else 0
