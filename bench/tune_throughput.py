"""Wall time of a tuning with one build at a time against builds k at a time (``compile_workers``).

The workload and budget are those of ``warpmap tune``'s first example (a 512^3 float32 matmul on the
cpu, 40 trials, the default strategy, level 2, the default timing protocol); each run compiles into a
fresh, empty cache so no build is free. Runs alternate between the settings (A B A B ...) so drift in
the machine's load falls on both; prints each run, then the median, p20 and p80 per setting and the
ratio, with the load average before and after.

Usage: ``python bench/tune_throughput.py [--workers 1,2] [--repeats 3] [--trials 40] [--spec JSON]``
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import optuna

from compiler.backends import get_target
from compiler.ops import parse_spec
from search.strategies import Budget
from search.tune import tune

SPEC = {"op": "matmul", "m": 512, "n": 512, "k": 512}


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


def _once(spec_data: dict[str, object], trials: int, workers: int, seed: int) -> tuple[float, float]:
    """Seconds one tuning took, and its best latency (ms), compiling into a fresh cache."""
    folder = tempfile.mkdtemp(prefix="warpmap-throughput-")
    os.environ["WARPMAP_CACHE_DIR"] = folder  # read when used, also by the spawned pool
    try:
        start = time.perf_counter()
        result = tune(parse_spec(spec_data), get_target("cpu"), budget=Budget(trials=trials), seed=seed,
                      compile_workers=workers)
        return time.perf_counter() - start, result.latency_ms
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _quantiles(values: list[float]) -> tuple[float, float, float]:
    if len(values) < 2:
        return values[0], values[0], values[0]
    cuts = statistics.quantiles(values, n=5, method="inclusive")
    return statistics.median(values), cuts[0], cuts[3]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="1,2", help="comma-separated pool sizes to compare")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--trials", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--spec", default=json.dumps(SPEC))
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    settings = [int(w) for w in args.workers.split(",")]
    spec_data = json.loads(args.spec)
    print(f"tune {json.dumps(spec_data)} on cpu, {args.trials} trials, pools {settings}, {args.repeats} runs each")
    print("before:", _uptime(), flush=True)
    walls: dict[int, list[float]] = {w: [] for w in settings}
    for repeat in range(args.repeats):
        for workers in settings:
            wall, best = _once(spec_data, args.trials, workers, args.seed)
            walls[workers].append(wall)
            print(f"  run {repeat + 1} workers={workers}: {wall:.1f} s, best {best:.3f} ms", flush=True)
    print("after: ", _uptime())
    print(f"{'workers':>7}  {'median s':>8}  {'p20':>6}  {'p80':>6}  vs {settings[0]}")
    base = statistics.median(walls[settings[0]])
    for workers in settings:
        median, p20, p80 = _quantiles(walls[workers])
        print(f"{workers:>7}  {median:8.1f}  {p20:6.1f}  {p80:6.1f}  {base / median:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
