"""The matmul's default schedule launched on each thread count: by the timing protocol, and sustained.

A cpu launch uses as many threads as the process's CPUs, cut to its control group's CPU quota
(``compiler.cpu_device.PROCESS_CPUS``). This bench shows what that cut buys where a quota applies (a
container's ``--cpus``, a Kubernetes limit, a cgroup made by hand). For each size and thread count it
checks the template's default schedule (``busy_host.checked_default``). It then reports two figures:
the protocol's median of calls (``compiler.backends.timing``), and the time a call takes when calls run
back to back for ``--seconds`` seconds (their mean), which counts the quota's throttling. Thread counts alternate
within each round.

Usage: ``OMP_PROC_BIND=true python bench/cpu_threads.py [--sizes 96,512] [--threads 1,2] [--seconds 3]
[--rounds 2]``; under a cgroup v1 quota of one CPU, for example::

    mkdir /sys/fs/cgroup/cpu/one && echo 100000 > /sys/fs/cgroup/cpu/one/cpu.cfs_quota_us
    sh -c 'echo $$ > /sys/fs/cgroup/cpu/one/cgroup.procs && OMP_PROC_BIND=true python bench/cpu_threads.py'
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys

from busy_host import checked_default

from compiler.backends.timing import Protocol
from compiler.cpu_device import PROCESS_CPUS, cpu_quota


def sustained(seconds: float) -> Protocol:
    """Calls back to back for ``seconds``, no warm-up: the mean of its samples is what a call costs over
    time, throttling included, where the median of the default protocol sees the calls that ran free."""
    return Protocol(warmup_ms=0, min_repetitions=1, target_ms=seconds * 1e3, max_repetitions=10**8)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="96,512")
    parser.add_argument("--threads", default=",".join(str(t) for t in range(1, len(os.sched_getaffinity(0)) + 1)))
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    counts = [int(t) for t in args.threads.split(",")]
    if min(sizes) < 1 or min(counts) < 1 or args.seconds <= 0 or args.rounds < 1:
        parser.error("sizes, threads and rounds must be at least 1, seconds above 0")
    quota = cpu_quota()
    print(f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, affinity {len(os.sched_getaffinity(0))} "
          f"CPUs, CPU quota {quota if quota is not None else 'none'}, a launch on {len(PROCESS_CPUS)} by default, "
          f"OMP_PROC_BIND={os.environ.get('OMP_PROC_BIND', 'unset')}")
    programs = {(n, t): checked_default(n, t) for n in sizes for t in counts}
    figures: dict[tuple[int, int], list[tuple[float, float]]] = {key: [] for key in programs}
    for _ in range(args.rounds):
        for key, (target, loaded, buffers) in programs.items():
            median = target.time(loaded, buffers, Protocol()).median_ns / 1e3
            samples = target.time(loaded, buffers, sustained(args.seconds)).samples_ns
            figures[key].append((median, sum(samples) / len(samples) / 1e3))
    from service.cli.table import format_table

    rows = [[f"{n}³", t, ", ".join(f"{m:.1f}" for m, _ in figures[(n, t)]),
             ", ".join(f"{s:.1f}" for _, s in figures[(n, t)])] for n, t in programs]
    print(format_table(["matmul", "threads", "protocol median µs", "sustained µs a call"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
