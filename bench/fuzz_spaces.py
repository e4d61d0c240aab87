"""Random specs of every operator, a sample of each one's level-2 space, checked on a target.

Draws specs with awkward shapes (every dtype, layout, stride, padding and axis the specs allow), samples
``--samples`` schedules from each level-2 space, adds the template's default schedule, and checks them
as ``warpmap check`` does, until
``--minutes`` pass. ``--target emu`` (the default) checks the CUDA templates on the emulator, built
for an H200; ``--target cpu`` the host's templates on this machine's cores, float32 only (the cpu
refuses 16-bit inputs), with sizes up to a few hundred so that blocking, packing and edge tiles all
come into play. Prints every failure with the ``warpmap check`` command that reproduces it, then a
table of outcomes; exits 1 if any schedule failed. Usage:
``python bench/fuzz_spaces.py [--target emu|cpu] [--minutes 5] [--seed 0] [--samples 3]``.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import Counter
from typing import Any

from scratch_cache import add_cache_option, use_cache_dir

from compiler.backends import get_target
from compiler.device import device_preset
from compiler.ops import get_operator, parse_spec
from search.verify import check_schedules
from service.cli.table import format_table

DTYPES = ("float32", "float16", "bfloat16")
#: What each target is fuzzed with: its dtypes, the largest size of a matmul or conv2d dimension, of a
#: softmax's row count and of a reduced tensor's axis, and whether half the draws are kept small. The
#: emulator runs every CUDA thread as a fiber, so its specs stay small (and draw as they always have, so
#: a seed gives the specs it gave before the cpu was fuzzed); the cpu's reach past its templates' blocks
#: (micro-tiles up to 8 x 48, cache blocks of a few hundred) so that packing, blocking and every edge
#: tile are exercised, with half the draws at most 40, where edge tiles and single-row blocks live.
PROFILES = {"emu": (DTYPES, 150, 40, 40, False), "cpu": (("float32",), 700, 300, 200, True)}
#: The most elements of a cpu reduction's tensor, however many axes it has.
CPU_REDUCE_ELEMENTS = 1_000_000


def random_spec(rnd: random.Random, target: str = "emu") -> dict[str, Any]:
    """One spec for ``target`` (``PROFILES``), as JSON data: awkward sizes, edges everywhere."""
    dtypes, size, rows, axis, small_half = PROFILES[target]
    op = rnd.choice(("matmul", "matmul", "conv2d", "softmax", "reduce"))
    dtype = rnd.choice(dtypes)

    def dim(high: int) -> int:
        return rnd.randint(1, min(high, 40)) if small_half and rnd.random() < 0.5 else rnd.randint(1, high)

    if op == "matmul":
        return {"op": op, "m": dim(size), "n": dim(size), "k": dim(size),
                "batch": rnd.randint(1, 3), "dtype": dtype, "layout_a": rnd.choice(("row", "col")),
                "layout_b": rnd.choice(("row", "col"))}
    if op == "conv2d":
        r = rnd.randint(1, 4)
        image = max(14, size // 20)
        return {"op": op, "n": rnd.randint(1, 2), "c": rnd.randint(1, max(9, size // 16)),
                "h": rnd.randint(r, image), "w": rnd.randint(r, image), "k": rnd.randint(1, max(12, size // 12)),
                "r": r, "s": rnd.randint(1, r),
                "stride": [rnd.randint(1, 3), rnd.randint(1, 3)], "padding": [rnd.randint(0, 2), rnd.randint(0, 2)],
                "dilation": [rnd.randint(1, 2), rnd.randint(1, 2)], "dtype": dtype,
                "layout": rnd.choice(("NCHW", "NHWC"))}
    if op == "softmax":
        cols = rnd.choice((rnd.randint(1, 70), rnd.randint(1, 5000)))
        return {"op": op, "rows": rnd.randint(1, rows), "cols": cols, "dtype": dtype}
    rank = rnd.randint(1, 4)
    high = max(2, min(axis, int(CPU_REDUCE_ELEMENTS ** (1 / rank)))) if small_half else axis
    return {"op": op, "shape": [rnd.randint(1, high) for _ in range(rank)], "axis": rnd.randrange(rank),
            "kind": rnd.choice(("sum", "max", "mean")), "dtype": dtype}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", choices=sorted(PROFILES), default="emu",
                        help="emu: the CUDA templates on the emulator; cpu: the host's templates on its cores")
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--samples", type=int, default=3, help="schedules sampled from each space")
    add_cache_option(parser)
    opts = parser.parse_args(argv)
    use_cache_dir(opts.cache_dir)
    rnd = random.Random(opts.seed)
    target = get_target("emu", gpu=device_preset("h200")) if opts.target == "emu" else get_target("cpu")
    reason = target.unavailable_reason()
    if reason:
        print(f"fuzz_spaces.py: the {opts.target} target cannot run here: {reason}", file=sys.stderr)
        return 2
    device = target.device()
    deadline = time.monotonic() + 60 * opts.minutes
    outcomes: Counter[tuple[str, str]] = Counter()
    specs = failures = 0
    started = last_progress = time.monotonic()
    while time.monotonic() < deadline:
        if time.monotonic() - last_progress >= 30:
            last_progress = time.monotonic()
            print(f"  {last_progress - started:4.0f} s: {specs} specs, {sum(outcomes.values())} schedules, "
                  f"{failures} failed", file=sys.stderr, flush=True)
        data = random_spec(rnd, opts.target)
        try:
            spec = parse_spec(data)
        except ValueError:
            continue  # e.g. a filter larger than the padded image
        operator = get_operator(data["op"])
        space = operator.space(spec, device, 2)
        schedules = space.sample(opts.samples, rnd.randrange(1 << 30))
        # The default too: what an untuned call and every search's first trial run.
        default = space.default_values()
        if default is not None and (first := space.schedule(default)) not in schedules:
            schedules = (first, *schedules)
        seed = rnd.randrange(1000)
        specs += 1
        for result in check_schedules(operator, spec, schedules, target=target, seed=seed):
            outcomes[(data["op"], result.status.value)] += 1
            if result.status.is_failure:
                failures += 1
                command = f"warpmap check --target {opts.target} --spec '{json.dumps(data)}' --level 2 --seed {seed}"
                print(f"FAIL {result.status.value}: {result.message}\n  schedule {result.schedule}\n  {command}",
                      flush=True)
    rows = [[op, status, count] for (op, status), count in sorted(outcomes.items())]
    print(f"{specs} random specs on {opts.target} in {opts.minutes:g} min (seed {opts.seed}), "
          f"{opts.samples} level-2 schedules each and the default")
    print(format_table(["operator", "outcome", "schedules"], rows))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
