"""The cpu softmax and reduction templates against numpy and torch, interleaved in one run.

Rows: softmax 4096x1000; sum, max and mean of a 4096x1000 tensor over each axis; a long 1-D sum.
For each, our template twice (its default schedule and the best of a seeded sample of its level-2
space, chosen by a short timing of each), numpy's idiomatic spelling, and torch's (CPU build, a
bench-only peer: ``n/a`` when it is not installed). Our programs are built with
``compiler.backends.cpu`` (each launch compiled, loaded, then the whole program called launch after
launch) and checked against the operator's float64 reference before anything is timed.

Every round times each contender under the same protocol (``compiler.backends.timing``: warm-up by
time, at least 10 repetitions or about 60 ms); the table shows the median over all rounds' samples
with p20/p80, GB/s counting the input read once and the output written once, and the ratio to
numpy's median time (above 1 is faster than numpy). numpy's ufuncs and reductions run on one thread;
ours and torch's on every core of this process's affinity mask. Numbers on a loaded machine are noisy:
run ``uptime`` beside them.

Usage: ``python bench/cpu_rowwise.py [--rounds 3] [--sample 16] [--only softmax]``
"""

from __future__ import annotations

import os

# Idle OpenMP workers that spin (libgomp's default) compete with the other pools (torch's) and with
# other users of a shared machine for the same cores; sleeping ones cost a launch a wake-up.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# OpenMP threads bound one to a CPU, as in a tuning's measuring process (search.tune.MEASURING_ENVIRONMENT):
# unbound, another process busy on one core could leave two of a kernel's threads on the other core,
# each spinning for its peer, and every call waited out scheduler ticks (README, "Measured", a busy host).
os.environ.setdefault("OMP_PROC_BIND", "true")

import argparse
import functools
import operator
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from compiler.backends import cpu
from compiler.backends.cpu_target import CpuTarget
from compiler.backends.timing import Protocol, measure, percentile
from compiler.cpu_device import CpuDevice, detect_cpu
from compiler.numeric import relative_error, tolerance
from compiler.ops.cpu import reduce as cpu_reduce
from compiler.ops.cpu import softmax as cpu_softmax
from compiler.ops.reduce import Kind, ReduceSpec, reduce_min_bytes, reduce_outputs, reduce_reference
from compiler.ops.softmax import SoftmaxSpec, softmax_min_bytes, softmax_outputs, softmax_reference
from compiler.program import Program
from service.cli.table import format_table

try:
    import torch
except ImportError:  # torch is a peer, not a dependency
    # mypy types the name as torch's module, which None is not; where torch is not installed the name is Any
    # and the ignore goes unused.
    torch = None  # type: ignore[assignment, unused-ignore]

PROTOCOL = Protocol(warmup_ms=20, min_repetitions=10, target_ms=60)
QUICK = Protocol(warmup_ms=5, min_repetitions=3, target_ms=15)


@dataclass(frozen=True)
class Workload:
    name: str
    spec: Any
    template: Any
    numpy: Callable[[np.ndarray], object]
    torch: Callable[[Any], object] | None

    @property
    def is_softmax(self) -> bool:
        return isinstance(self.spec, SoftmaxSpec)

    def outputs(self) -> Any:
        return softmax_outputs(self.spec) if self.is_softmax else reduce_outputs(self.spec)

    def reference(self, x: np.ndarray) -> np.ndarray:
        fn = softmax_reference if self.is_softmax else reduce_reference
        return fn(self.spec, {"x": x})["y"]

    def min_bytes(self) -> int:
        return softmax_min_bytes(self.spec) if self.is_softmax else reduce_min_bytes(self.spec)

    def default(self, device: CpuDevice) -> Any:
        if self.is_softmax:
            return cpu_softmax.default_schedule(device)
        return cpu_reduce.default_schedule(self.spec, device)


def _np_softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def workloads() -> list[Workload]:
    rows: list[Workload] = [Workload("softmax 4096x1000", SoftmaxSpec(rows=4096, cols=1000), cpu_softmax,
                                     _np_softmax, lambda t: torch.softmax(t, dim=1))]
    reducers: dict[Kind, tuple[Callable[..., Any], str]] = {
        "sum": (np.sum, "sum"), "max": (np.max, "amax"), "mean": (np.mean, "mean")}
    for axis in (1, 0):
        for kind, (np_fn, torch_name) in reducers.items():
            rows.append(Workload(
                f"{kind} 4096x1000 axis {axis}", ReduceSpec(shape=(4096, 1000), axis=axis, kind=kind), cpu_reduce,
                functools.partial(np_fn, axis=axis), operator.methodcaller(torch_name, dim=axis)))
    rows.append(Workload("sum 16M (1-D)", ReduceSpec(shape=(1 << 24,), axis=0, kind="sum"), cpu_reduce,
                         np.sum, lambda t: t.sum()))
    return rows


def program_call(program: Program, x: np.ndarray, out_shape: tuple[int, ...],
                 config: cpu.CpuConfig) -> tuple[Callable[[], None], np.ndarray]:
    """A call running every launch of ``program`` in order on ``x`` as the tuner times it, and the output
    array it fills."""
    y = np.full(out_shape, np.nan, dtype=np.float32)
    target = CpuTarget(config=config)
    return target.call(target.build(program), {"x": x, "y": y}), y


def checked_call(work: Workload, schedule: Any, x: np.ndarray,
                 config: cpu.CpuConfig) -> tuple[Callable[[], None], float]:
    """Our program for ``schedule``, run once and compared with the float64 reference (AssertionError if off)."""
    out = work.outputs()[0]
    call, y = program_call(work.template.build(work.spec, schedule), x, out.shape, config)
    call()
    error = relative_error(y.astype(np.float64), work.reference(x))
    if not error <= tolerance("float32", out.reduction):
        raise AssertionError(f"{work.name} {schedule}: relative error {error:.3g}")
    return call, error


def tune(work: Workload, device: CpuDevice, x: np.ndarray, config: cpu.CpuConfig, sample: int) -> tuple[Any, int]:
    """The fastest of a seeded sample of the level-2 space (and the default), by a short timing of each."""
    space = work.template.space(work.spec, device, 2)
    candidates = list(dict.fromkeys((*space.sample(sample, seed=0), work.default(device))))
    timed = []
    for schedule in candidates:
        call, _ = checked_call(work, schedule, x, config)
        timed.append((measure(call, QUICK).median_ns, schedule))
    return min(timed, key=lambda t: t[0])[1], len(candidates)


def _interleaved(calls: dict[str, Callable[[], object]], rounds: int) -> dict[str, list[int]]:
    samples: dict[str, list[int]] = {name: [] for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            samples[name] += measure(call, PROTOCOL).samples_ns
    return samples


def _row(work: Workload, who: str, samples: list[int], numpy_ms: float, note: str) -> list[object]:
    ms = [s * 1e-6 for s in samples]
    median = percentile(ms, 50)
    gbs = work.min_bytes() / (median * 1e-3) / 1e9
    return [work.name, who, f"{median:.3f}", f"[{percentile(ms, 20):.3f}, {percentile(ms, 80):.3f}]",
            f"{gbs:.1f}", f"{numpy_ms / median:.2f}x", note]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sample", type=int, default=16, help="level-2 schedules tried per workload")
    parser.add_argument("--only", default="", help="run the workloads whose name contains this")
    args = parser.parse_args(argv)
    device = detect_cpu()
    config = cpu.CpuConfig(cache_dir=Path(tempfile.mkdtemp(prefix="wm-cpu-rowwise-")))
    single = cpu.CpuConfig(cache_dir=config.cache_dir, workers=1)
    if torch is not None:
        torch.set_num_threads(config.workers)
    rng = np.random.default_rng(0)
    table: list[list[object]] = []
    tuned_notes: list[str] = []
    for work in workloads():
        if args.only not in work.name:
            continue
        x = (rng.normal(0.0, 3.0, work.spec.rows * work.spec.cols).reshape(work.spec.rows, work.spec.cols)
             if work.is_softmax else rng.uniform(-0.5, 1.5, work.spec.shape)).astype(np.float32)
        best, searched = tune(work, device, x, config, args.sample)
        default = work.default(device)
        calls: dict[str, Callable[[], object]] = {}
        errors: dict[str, str] = {}
        for who, schedule, cfg in (("ours default", default, config), ("ours tuned", best, config),
                                   ("ours tuned, 1 thread", best, single)):
            if who.endswith("1 thread") and not work.is_softmax:
                continue
            calls[who], error = checked_call(work, schedule, x, cfg)
            errors[who] = f"err {error:.1e}"
        calls["numpy"] = functools.partial(work.numpy, x)
        if torch is not None and work.torch is not None:
            calls["torch"] = functools.partial(work.torch, torch.from_numpy(x))
        samples = _interleaved(calls, args.rounds)
        numpy_ms = percentile([s * 1e-6 for s in samples["numpy"]], 50)
        for who in (*calls, *([] if torch is not None else ["torch"])):
            if who not in samples:
                table.append([work.name, who, "n/a", "", "", "", "torch is not installed"])
                continue
            table.append(_row(work, who, samples[who], numpy_ms, errors.get(who, "")))
        tuned_notes.append(f"{work.name}: default {default}; tuned {best} (best of {searched})")
    print(f"{device.model}, {device.isa_summary}, {config.workers} workers, {args.rounds} interleaved rounds, "
          f"load {os.getloadavg()[0]:.2f}")
    print(format_table(["workload", "who", "ms", "p20, p80", "GB/s", "vs numpy", "note"], table))
    print("\n".join(tuned_notes))


if __name__ == "__main__":
    main()
