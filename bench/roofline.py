"""The cpu's roofline as `warpmap tune` measures it, and tuned kernels (and numpy) held against it.

Two tables, one run:

1. The roofs: the bandwidth probe (``compiler.backends.cpu_bandwidth``: vector loads of a buffer of the
   given footprint on every core) at footprints from the first-level cache to past the last, and the
   FP32 peak (``compiler.backends.cpu_peak``), each measured ``--rounds`` times, the footprints
   interleaved in every round; median and [min, max] of the rounds, and the ridge point (the peak over
   the bandwidth: a kernel needs more FLOP per byte than this to be compute-bound at that footprint),
   with what each probe took (the first round, which builds what the build cache lacks, then the median
   of the others): what it adds to a tuning.
2. Tuned workloads: each tuned on the cpu target by ``search.tune.tune`` (the default strategy,
   ``--trials``), then the tuned artifact and numpy's idiomatic spelling timed in ``--rounds``
   interleaved rounds under one protocol. For each: its footprint (``min_bytes``), the roof that binds
   (from the tuning's own measured roofs), and the fraction of the roofline reached by ours and by numpy
   (the roofline's least time over the median time). numpy's ufuncs run on one thread, its matmul on
   OpenBLAS's threads.

Usage: ``python bench/roofline.py [--rounds 5] [--trials 20] [--only hierarchy,tuned]``
"""

from __future__ import annotations

import os

# OpenMP threads bound one to a CPU, as in a tuning's measuring process (search.tune.MEASURING_ENVIRONMENT):
# unbound, another process busy on one core could leave two of a kernel's threads on the other core,
# each spinning for its peer, and every call waited out scheduler ticks (README, "Measured", a busy host).
os.environ.setdefault("OMP_PROC_BIND", "true")

import argparse
import functools
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from compiler.backends import cpu, get_target
from compiler.backends.cpu_bandwidth import measured_bandwidth_gbs
from compiler.backends.cpu_peak import measured_peak_gflops
from compiler.backends.timing import Protocol, measure
from compiler.cpu_device import detect_cpu
from compiler.ops import get_operator, parse_spec
from compiler.roofline import roofline
from search.strategies import Budget
from search.tune import tune
from service.cli.cache import human_bytes
from service.cli.table import format_table

FOOTPRINTS = (16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20)

#: name, spec, numpy's spelling of it over the operator's inputs.
WORKLOADS: tuple[tuple[str, dict[str, Any], Callable[[dict[str, np.ndarray]], object]], ...] = (
    ("softmax 4096x1000", {"op": "softmax", "rows": 4096, "cols": 1000},
     lambda a: (lambda e: e / e.sum(1, keepdims=True))(np.exp(a["x"] - a["x"].max(1, keepdims=True)))),
    ("softmax 256x300", {"op": "softmax", "rows": 256, "cols": 300},
     lambda a: (lambda e: e / e.sum(1, keepdims=True))(np.exp(a["x"] - a["x"].max(1, keepdims=True)))),
    ("sum 4096x1000 axis 1", {"op": "reduce", "shape": [4096, 1000], "axis": 1, "kind": "sum"},
     lambda a: a["x"].sum(1)),
    ("matmul 512^3", {"op": "matmul", "m": 512, "n": 512, "k": 512}, lambda a: a["a"] @ a["b"]),
    ("matmul 64^3", {"op": "matmul", "m": 64, "n": 64, "k": 64}, lambda a: a["a"] @ a["b"]),
)

PROTOCOL = Protocol(warmup_ms=20, min_repetitions=10, target_ms=80)


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} [{min(values):.1f}, {max(values):.1f}]"


def hierarchy(rounds: int) -> None:
    config, device = cpu.CpuConfig.default(), detect_cpu()
    rates: dict[int, list[float]] = {size: [] for size in FOOTPRINTS}
    # What each probe costs a tuning: the first round builds the kernels the build cache lacks.
    seconds: dict[int | None, list[float]] = {size: [] for size in (None, *FOOTPRINTS)}
    peaks: list[float] = []
    for _ in range(rounds):
        started = time.perf_counter()
        peaks.append(measured_peak_gflops(config, device))
        seconds[None].append(time.perf_counter() - started)
        for size in FOOTPRINTS:
            started = time.perf_counter()
            rates[size].append(measured_bandwidth_gbs(config, device, size))
            seconds[size].append(time.perf_counter() - started)
    peak = statistics.median(peaks)
    print(f"FP32 peak, register FMAs on {config.workers} cores: {_spread(peaks)} GFLOP/s ({rounds} rounds; "
          f"{_cost(seconds[None])})")
    caches = ", ".join(f"L{c.level} {human_bytes(c.size_bytes)} per {c.shared_cpus} cpu(s)"
                       for c in (device.l1d, device.l2, device.l3) if c is not None)
    print(f"caches: {caches}")
    table = [[human_bytes(size), _spread(rates[size]), f"{peak / statistics.median(rates[size]):.1f}",
              _cost(seconds[size])] for size in FOOTPRINTS]
    print(format_table(["footprint", "GB/s median [min, max]", "ridge FLOP/B", "probe seconds"], table))


def _cost(seconds: list[float]) -> str:
    """The first round's seconds, and the median of the others (builds cached) when there are others."""
    rest = f", then {statistics.median(seconds[1:]):.2f}" if len(seconds) > 1 else ""
    return f"{seconds[0]:.2f} s first{rest}"


def tuned(rounds: int, trials: int) -> None:
    target = get_target("cpu")
    rows = []
    for name, data, spell in WORKLOADS:
        spec = parse_spec(data)
        operator = get_operator(spec.op)
        result = tune(spec, target, budget=Budget(trials=trials))
        inputs = operator.inputs(spec, np.random.default_rng(0))
        buffers = {**inputs, **{o.name: np.empty(o.shape, np.float32) for o in operator.outputs(spec)}}
        loaded = target.load(result.artifact)
        ours: list[int] = []
        theirs: list[int] = []
        for _ in range(rounds):
            ours += target.time(loaded, buffers, PROTOCOL).samples_ns
            theirs += measure(functools.partial(spell, inputs), PROTOCOL).samples_ns
        mine, numpy_ns = statistics.median(ours), statistics.median(theirs)
        times = [f"{mine / 1e6:.4f}", "n/a", f"{numpy_ns / 1e6:.4f}", "n/a"]
        roof = "n/a (a roof was not measured)"
        if result.roofline is not None:
            roof = (f"compute: {result.peak_gflops:.0f} GFLOP/s" if result.roofline.bound == "compute"
                    else f"memory: {result.bandwidth_gbs:.0f} GB/s")
            # Each contender's own rates against the tuning's roofs (GFLOP/s = FLOP/ns).
            for column, ns in ((1, mine), (3, numpy_ns)):
                place = roofline(result.flops / ns, result.min_bytes / ns, result.peak_gflops, result.bandwidth_gbs)
                times[column] = f"{100 * place.fraction:.0f}%" if place is not None else "n/a"
        rows.append([name, f"{result.min_bytes / 1e6:.3g} MB", roof, *times])
    print(format_table(["workload", "footprint", "roof", "ours ms", "ours of roofline", "numpy ms",
                        "numpy of roofline"], rows))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--only", default="hierarchy,tuned")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.trials < 1:
        parser.error("--rounds and --trials must be at least 1")
    only = set(args.only.split(","))
    if unknown := only - {"hierarchy", "tuned"}:
        parser.error(f"--only: unknown section(s) {', '.join(sorted(unknown))}; known: hierarchy, tuned")
    if "hierarchy" in only:
        hierarchy(args.rounds)
    if "tuned" in only:
        tuned(args.rounds, args.trials)


if __name__ == "__main__":
    main()
