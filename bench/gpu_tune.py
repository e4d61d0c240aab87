"""The tuning section of ``bench/gpu_check.py``: matmul tuned on the GPU and timed against cuBLAS.

f32 (the SIMT template) and f16 (tensor cores) at 1024^3, 4096^3 and the BERT-base shapes, each tuned
with ``search.tune.tune`` on ``cuda`` under a short budget (``TRIALS`` trials or ``SECONDS`` seconds),
then ``torch.matmul`` (cuBLAS) timed on the same inputs (drawn from the tuning's seed) with CUDA events:
ours, the template's default schedule (its median from the tuning's first trial, not re-timed), cuBLAS,
cuBLAS / ours (above 1: ours is faster), TFLOP/s and the fraction of the GPU's peak.
Then the best kernel is run from its cache record alone, as a client runs it (``compiler.backends.stored``:
the CUBINs through the driver API), on fresh random inputs with the outputs poisoned, once on numpy arrays
and once on torch CUDA tensors: the last column is the worst relative error against numpy's result, or
what failed.

Budget (an H200, about 8 minutes for the whole script): the level-1 verification before this takes about
2-3 minutes; ten workloads here at ``SECONDS`` each plus a few seconds of pool start, re-timing and
cuBLAS make about 4-5 minutes; a workload that would start past ``DEADLINE_S`` of the script is skipped
and said so.

``--dry-run`` needs no GPU: for each workload it prints the plan (template, space, budget) and builds
the candidates the default strategy proposes before it has measured anything (the same first ones a real
run measures; later proposals depend on timings) through the tuning's own build path, NVRTC for sm_90
against the H200's limits, and prints each one's verdict and ptxas report; the first candidate built is
turned into its cache record and read back as a stored program (what a real run then launches).
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from typing import Any

import numpy as np
import optuna

from compiler.backends import Target
from compiler.backends.stored import load_stored, stored_program
from compiler.device import DeviceSpec
from compiler.ops import Operator, get_operator, parse_spec
from compiler.program import Program
from db.records import KernelResult
from search.measure import BuildRequest, Built, build_candidate, compile_workers
from search.records import program_result, tuned_result
from search.strategies import Budget, Outcome, search
from search.strategies.base import BatchObjective
from search.trial import TrialStatus
from search.tune import TuneResult, tune
from search.verify import Oracle
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


def stored_document(record: KernelResult) -> tuple[dict[str, Any], bytes]:
    """A cache record as the API sends it (its fields and target, through JSON), and its binaries."""
    return json.loads(json.dumps({**record.fields(), "target": "cuda"})), record.binary or b""


def stored_check(record: KernelResult, program: Program, operator: Operator, spec: Any, seed: int = 1,
                 runs: tuple[str, ...] = ("numpy", "torch")) -> str:
    """The kernel of ``record`` run from the record alone, on numpy arrays then on torch CUDA tensors (see
    the module's docstring): ``ok`` with the worst relative error, or which run failed and how."""
    document, binary = stored_document(record)
    kernel = load_stored(document, binary, target="cuda")
    oracle = Oracle(operator, spec, seed)
    worst = 0.0
    for how in runs:
        buffers, outputs = oracle.arguments(program)  # fresh inputs, outputs poisoned
        if how == "numpy":
            kernel(**buffers)
        else:
            import torch

            tensors = {name: torch.from_numpy(array).cuda() for name, array in buffers.items()}
            kernel(**tensors)
            for name, array in outputs.items():
                array[...] = tensors[name].cpu().numpy()
        error, name = oracle.worst_error(outputs)
        if not error <= oracle.tolerance(name):  # NaN (an output left poisoned) fails too
            return f"{how}: {name} off by {error:.2g} (allowed {oracle.tolerance(name):.2g})"
        worst = max(worst, error)
    return f"ok ({worst:.1e})"


def default_ms(result: TuneResult, default: Mapping[str, Any] | None) -> float | None:
    """The template's default schedule's median from its trial (the first a tuning measures; not re-timed
    with the best), or None where it failed or was not measured."""
    if default is None:
        return None
    return next((t.latency_ms for t in result.trials if dict(t.values) == dict(default) and t.latency_ms is not None),
                None)


def run(target: Target, device: DeviceSpec, script_start: float, selected: str | None = None) -> list[list[object]]:
    """Tune and time every workload on the GPU; one table row each."""
    rows: list[list[object]] = []
    header = ["workload", "ours ms", "default ms", "cuBLAS ms", "cuBLAS/ours", "TFLOP/s", "% peak", "trials",
              "seconds", "from record"]
    for label, spec_data in workloads(selected):
        if time.monotonic() - script_start > DEADLINE_S:
            rows.append([label, "skipped: past the script's time budget", *[""] * (len(header) - 2)])
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
            try:
                stored = stored_check(tuned_result(result), result.artifact.program, get_operator("matmul"), spec)
            except Exception as exc:  # the stored path's failure is this cell, not the row
                stored = f"failed: {type(exc).__name__}: {exc}"[:200]
            default = default_ms(result, get_operator("matmul").space(spec, device, 2).default_values())
            rows.append([label, f"{ours:.4f}", "-" if default is None else f"{default:.4f}", f"{theirs:.4f}",
                         f"{theirs / ours:.2f}", f"{tflops:.1f}", f"{100 * tflops / peak:.0f}" if peak else "n/a",
                         len(result.trials), round(time.monotonic() - start, 1), stored])
        except Exception as exc:  # one workload's failure is a row, not the end of the check
            rows.append([label, f"failed: {type(exc).__name__}: {exc}"[:200], *[""] * (len(header) - 2)])
        print(format_table(header, rows[-1:]), flush=True)
    print()
    print(format_table(header, rows))
    return rows


def _dry_batches(target: Target, spec_data: dict[str, Any], pool: ProcessPoolExecutor,
                 built: list[Built]) -> BatchObjective:
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
            first = next((c for c in built if c.artifact is not None), None)
            if first is not None and first.artifact is not None:
                record = program_result(first.artifact, schedule=dict(first.values), latency_us=1.0, trials_used=1)
                program = stored_program(*stored_document(record))
                cubins = sum(launch.binary[:4] == b"\x7fELF" for launch in program.launches)
                print(f"{label}: the record of #{built.index(first)} read back: {program.target}, "
                      f"{len(program.launches)} launch(es), {cubins} CUBIN(s), "
                      f"arguments {', '.join(program.arguments)}")
            print(f"{label}: {len(built)} candidates built in {time.monotonic() - start:.1f} s", flush=True)
    return 1 if failures else 0
