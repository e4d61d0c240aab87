"""Random specs of every operator, a sample of each one's level-2 space, checked on the emulator.

Draws specs with awkward shapes (every dtype, layout, stride, padding and axis the specs allow), samples
``--samples`` schedules from each level-2 space and checks them as ``warpmap check`` does, until
``--minutes`` pass. Prints every failure with the ``warpmap check`` command that reproduces it, then a
table of outcomes; exits 1 if any schedule failed. Usage:
``python bench/fuzz_spaces.py [--minutes 5] [--seed 0] [--samples 3]``.
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


def random_spec(rnd: random.Random) -> dict[str, Any]:
    """One spec, as JSON data; sizes small enough for the emulator, edges everywhere."""
    op = rnd.choice(("matmul", "matmul", "conv2d", "softmax", "reduce"))
    dtype = rnd.choice(DTYPES)
    if op == "matmul":
        return {"op": op, "m": rnd.randint(1, 150), "n": rnd.randint(1, 150), "k": rnd.randint(1, 150),
                "batch": rnd.randint(1, 3), "dtype": dtype, "layout_a": rnd.choice(("row", "col")),
                "layout_b": rnd.choice(("row", "col"))}
    if op == "conv2d":
        r = rnd.randint(1, 4)
        return {"op": op, "n": rnd.randint(1, 2), "c": rnd.randint(1, 9), "h": rnd.randint(r, 14),
                "w": rnd.randint(r, 14), "k": rnd.randint(1, 12), "r": r, "s": rnd.randint(1, r),
                "stride": [rnd.randint(1, 3), rnd.randint(1, 3)], "padding": [rnd.randint(0, 2), rnd.randint(0, 2)],
                "dilation": [rnd.randint(1, 2), rnd.randint(1, 2)], "dtype": dtype,
                "layout": rnd.choice(("NCHW", "NHWC"))}
    if op == "softmax":
        cols = rnd.choice((rnd.randint(1, 70), rnd.randint(1, 5000)))
        return {"op": op, "rows": rnd.randint(1, 40), "cols": cols, "dtype": dtype}
    rank = rnd.randint(1, 4)
    return {"op": op, "shape": [rnd.randint(1, 40) for _ in range(rank)], "axis": rnd.randrange(rank),
            "kind": rnd.choice(("sum", "max", "mean")), "dtype": dtype}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--samples", type=int, default=3, help="schedules sampled from each space")
    add_cache_option(parser)
    opts = parser.parse_args()
    use_cache_dir(opts.cache_dir)
    rnd = random.Random(opts.seed)
    device = device_preset("h200")
    target = get_target("emu", gpu=device)
    deadline = time.monotonic() + 60 * opts.minutes
    outcomes: Counter[tuple[str, str]] = Counter()
    specs = failures = 0
    started = last_progress = time.monotonic()
    while time.monotonic() < deadline:
        if time.monotonic() - last_progress >= 30:
            last_progress = time.monotonic()
            print(f"  {last_progress - started:4.0f} s: {specs} specs, {sum(outcomes.values())} schedules, "
                  f"{failures} failed", file=sys.stderr, flush=True)
        data = random_spec(rnd)
        try:
            spec = parse_spec(data)
        except ValueError:
            continue  # e.g. a filter larger than the padded image
        operator = get_operator(data["op"])
        schedules = operator.space(spec, device, 2).sample(opts.samples, rnd.randrange(1 << 30))
        seed = rnd.randrange(1000)
        specs += 1
        for result in check_schedules(operator, spec, schedules, target=target, seed=seed):
            outcomes[(data["op"], result.status.value)] += 1
            if result.status.is_failure:
                failures += 1
                print(f"FAIL {result.status.value}: {result.message}\n  schedule {result.schedule}\n"
                      f"  warpmap check --spec '{json.dumps(data)}' --level 2 --seed {seed}", flush=True)
    rows = [[op, status, count] for (op, status), count in sorted(outcomes.items())]
    print(f"{specs} random specs in {opts.minutes:g} min (seed {opts.seed}), {opts.samples} level-2 schedules each")
    print(format_table(["operator", "outcome", "schedules"], rows))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
