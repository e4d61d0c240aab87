"""Timing cpu kernels on a host that something else keeps busy: OpenMP threads unbound, and bound to places.

The measuring process of a tuning sets ``OMP_PROC_BIND=true`` (``search.tune.MEASURING_ENVIRONMENT``).
This bench shows why. Each cell times the matmul template's default schedule (level 2) of an n³ float32
product in fresh processes, one per sample: checked against numpy as a tuning checks it, then timed
under the default protocol (``compiler.backends.timing``) on every core the process may use. Half the
processes run with ``OMP_PROC_BIND=false`` and half with ``true``, interleaved. This is done on a quiet
host, then with ``--spinners`` processes each spinning on a core. It prints each process's median, then
the median, min and max of those medians. A sample is a whole process because where the scheduler
first puts a process's threads decides its fate on a busy host, for every call that process makes.

Usage: ``python bench/busy_host.py [--sizes 96,512] [--processes 5] [--spinners 1]``
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BINDINGS = ("false", "true")


def checked_default(n: int, workers: int | None = None) -> tuple[Any, Any, dict[str, Any]]:
    """The matmul template's default schedule (level 2) of an n³ float32 product on the cpu target (on
    ``workers`` threads, else the target's own count), checked against numpy as a tuning checks it
    (``search.verify``: random inputs, outputs poisoned, the operator's tolerance), then loaded: (target,
    loaded program, its buffers). Exits naming the error when the check fails."""
    from compiler.backends import cpu, get_target
    from compiler.ops import get_operator, parse_spec
    from search.verify import Oracle, check_schedule

    spec = parse_spec({"op": "matmul", "m": n, "n": n, "k": n})
    operator = get_operator("matmul")
    target = get_target("cpu") if workers is None else get_target(
        "cpu", config=replace(cpu.CpuConfig.default(), workers=workers))
    space = operator.space(spec, target.device(), 2)
    values = space.default_values()
    assert values is not None, "the template has no default schedule for this shape"
    checked = check_schedule(operator, spec, space.schedule(values), target=target)
    if checked.artifact is None or checked.program is None or checked.status.value != "ok":
        sys.exit(f"the default schedule of {n}³: {checked.status.value}: {checked.message}")
    buffers, _ = Oracle(operator, spec).arguments(checked.program)
    return target, target.load(checked.artifact), buffers


def child(n: int) -> None:
    """Time the default schedule of an n³ matmul here; print its median in ns."""
    from compiler.backends.timing import Protocol

    target, loaded, buffers = checked_default(n)
    print(int(target.time(loaded, buffers, Protocol()).median_ns))


def run_child(n: int, binding: str) -> float:
    environment = {**os.environ, "OMP_PROC_BIND": binding, "OPENBLAS_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, __file__, "--child", str(n)], env=environment, cwd=ROOT,
                          capture_output=True, text=True, timeout=600, check=True)
    return int(done.stdout.split()[-1]) / 1e3


def spin() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def cell(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} [{min(values):.1f}, {max(values):.1f}]"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="96,512")
    parser.add_argument("--processes", type=int, default=5, help="timing processes per cell")
    parser.add_argument("--spinners", type=int, default=1, help="busy processes in the busy rows")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        child(args.child)
        return 0
    sizes = [int(s) for s in args.sizes.split(",")]
    cores = len(os.sched_getaffinity(0))
    print(f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, {cores} cores, load average "
          f"{os.getloadavg()[0]:.2f}; {args.processes} processes a cell, µs per call of the default schedule")
    rows = []
    for condition in ("quiet", "busy"):
        spinners = [spin() for _ in range(args.spinners)] if condition == "busy" else []
        try:
            for n in sizes:
                medians: dict[str, list[float]] = {b: [] for b in BINDINGS}
                for _ in range(args.processes):
                    for binding in BINDINGS:
                        medians[binding].append(run_child(n, binding))
                print(f"{condition} {n}³: " + "; ".join(f"OMP_PROC_BIND={b} " + " ".join(f"{v:.1f}" for v in m)
                                                       for b, m in medians.items()), flush=True)
                ratio = statistics.median(medians["false"]) / statistics.median(medians["true"])
                rows.append([f"{n}³", condition if not spinners else f"{condition} ({len(spinners)} spinning)",
                             cell(medians["false"]), cell(medians["true"]), f"{ratio:.2f}"])
        finally:
            for process in spinners:
                process.kill()
                process.wait()
    from service.cli.table import format_table

    print()
    print(format_table(["matmul", "host", "unbound: median [min, max]", "bound", "unbound / bound"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
