"""The default strategy on a large synthetic space: seconds, memory and quality of 200 evaluations.

The brute-forced spaces of the replays hold at most 17,956 valid points; a space the search has not
seen may hold hundreds of thousands (a space of up to 2,000,000 combinations is enumerated whole, a
larger one sampled). This builds such a space as a replay target (``bench/strategy_replay.py``'s
``Replay``): parameters of ``--sizes`` choices (by default 16, 8, 8, 6, 6, 4, 4 and 2: 1,179,648
combinations), each combination valid with probability ``--keep`` (so the valid points are scattered at
random, the hardest case for a sampled space), its time a seeded smooth function of the parameters (a
sum of one sine per parameter, exponentiated) with 30% noise. It prints, per seed, the seconds the search took
(building its candidate pool included; the objective is a table lookup), the quality at 100 and 200
evaluations (optimum / best found) and, at the end, the peak resident memory of the process.

Usage: ``python bench/large_space.py [--sizes 16,8,8,6,6,4,4,2] [--keep 0.1] [--seeds 3] [--strategy default]``
"""

from __future__ import annotations

import argparse
import itertools
import math
import random
import resource
import sys
import time

import optuna
from strategy_replay import Replay, quality, run_ours

SIZES = (16, 8, 8, 6, 6, 4, 4, 2)


def synthetic(keep: float, sizes: tuple[int, ...] = SIZES, seed: int = 1) -> Replay:
    """The replay of a seeded space: ``keep`` of the combinations valid, times smooth plus noise."""
    rng = random.Random(seed)
    params = {f"p{i}": tuple(range(n)) for i, n in enumerate(sizes)}
    weights = [rng.uniform(-1.0, 1.0) for _ in sizes]
    times: dict[tuple[int, ...], float | None] = {}
    for point in itertools.product(*params.values()):
        if rng.random() < keep:
            smooth = sum(w * math.sin(1.3 * x + i) for i, (w, x) in enumerate(zip(weights, point, strict=True)))
            times[point] = math.exp(smooth + 0.3 * rng.random())
    return Replay(f"synthetic-{keep}", params, times, dict.fromkeys(times, "correct"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="each parameter's number of choices")
    parser.add_argument("--keep", type=float, default=0.1, help="the share of combinations that are valid")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--strategy", default="default")
    args = parser.parse_args(argv)
    if not 0 < args.keep <= 1:
        print(f"large_space: --keep must be in (0, 1], got {args.keep}", file=sys.stderr)
        return 2
    try:
        sizes = tuple(int(n) for n in args.sizes.split(","))
    except ValueError:
        sizes = ()
    if not sizes or min(sizes) < 1:
        print(f"large_space: --sizes must be positive integers, got {args.sizes!r}", file=sys.stderr)
        return 2
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    space = synthetic(args.keep, sizes)
    sampled = "sampled" if not space.space().enumerable else "enumerated"
    print(f"# {math.prod(sizes):,} combinations ({sampled}), {len(space.times):,} valid; strategy {args.strategy}")
    print("| seed | seconds | quality at 100 | at 200 |")
    print("| ---: | ---: | ---: | ---: |")
    for seed in range(args.seeds):
        start = time.monotonic()
        evaluated = run_ours(space, args.strategy, seed, 200)
        seconds = time.monotonic() - start
        print(f"| {seed} | {seconds:.1f} | {quality(space, evaluated, 100):.3f} | "
              f"{quality(space, evaluated, 200):.3f} |", flush=True)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux
    print(f"# peak resident memory {peak:.2f} GiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
