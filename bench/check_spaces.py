"""Wall time to verify whole level-1 spaces on the emulator: the README's table of checked spaces.

Each row builds every level-1 schedule of one awkward spec, compiles it for sm_80 and sm_90, runs it
on the CPU emulator and compares with numpy (what ``warpmap check`` does, race detection included).
Compiles start from an empty cache unless ``--warm``. Then the same check runs again with every
build cached, without race detection and with it, so the last two columns show what the default race
check costs a check whose compiles are already paid.
Usage: ``python bench/check_spaces.py [--jobs 2] [--warm]``.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from compiler.backends import Target, get_target
from compiler.device import device_preset
from compiler.ops import get_operator, parse_spec
from search.trial import TrialStatus
from search.verify import CheckResult, check_schedules
from service.cli.table import format_table

SPECS: list[tuple[str, dict[str, object]]] = [
    ("matmul f32 67x45x83, batch 3, A column-major",
     {"op": "matmul", "m": 67, "n": 45, "k": 83, "batch": 3, "layout_a": "col"}),
    ("matmul f32 256x256x256 (grids larger than the race sample)", {"op": "matmul", "m": 256, "n": 256, "k": 256}),
    ("matmul f16 67x45x83, batch 3, B column-major",
     {"op": "matmul", "m": 67, "n": 45, "k": 83, "batch": 3, "dtype": "float16", "layout_b": "col"}),
    ("matmul bf16 67x45x83, batch 3, A column-major",
     {"op": "matmul", "m": 67, "n": 45, "k": 83, "batch": 3, "dtype": "bfloat16", "layout_a": "col"}),
    ("conv2d f32 NCHW 2x3x17x19, 5 filters 3x3, stride 2, padding 1",
     {"op": "conv2d", "n": 2, "c": 3, "h": 17, "w": 19, "k": 5, "r": 3, "s": 3, "stride": [2, 2],
      "padding": [1, 1]}),
    ("softmax f32 5x4099", {"op": "softmax", "rows": 5, "cols": 4099}),
    ("reduce f32 mean over axis 1 of 5x37x9", {"op": "reduce", "shape": [5, 37, 9], "axis": 1, "kind": "mean"}),
]


def timed(check: Callable[..., list[CheckResult]], target: Target) -> tuple[float, list[CheckResult]]:
    start = time.perf_counter()
    results = check(target=target)
    return time.perf_counter() - start, results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--warm", action="store_true", help="reuse the user's compile caches")
    args = parser.parse_args()
    if not args.warm:
        # The emulator reads its cache folder from the environment; NVRTC builds get the same fresh root.
        os.environ["WARPMAP_CACHE_DIR"] = tempfile.mkdtemp(prefix="warpmap-bench-")
    device = device_preset("h200")
    runner = get_target("emu", gpu=device)
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}, caches "
          f"{'warm' if args.warm else 'cold (' + str(Path(os.environ['WARPMAP_CACHE_DIR'])) + ')'}")
    without_races = get_target("emu", gpu=device, detect_races=False)
    header = ["spec", "schedules", "passed", "failed", "pruned", "wall", "cached, no races", "cached, races"]
    rows: list[list[object]] = []
    failed = 0
    for label, data in SPECS:
        spec = parse_spec(data)
        operator = get_operator(spec.op)
        schedules = operator.space(spec, device, 1).candidates()
        check = functools.partial(check_schedules, operator, spec, schedules, jobs=args.jobs)
        seconds, results = timed(check, runner)
        # Small grids run only the race-checked build by default: build the plain ones untimed first.
        timed(check, without_races)
        cached_plain, _ = timed(check, without_races)
        cached_races, _ = timed(check, runner)
        counts = Counter(r.status for r in results)
        bad = sum(n for status, n in counts.items() if status.is_failure)
        failed += bad
        rows.append([label, len(schedules), counts[TrialStatus.OK], bad, counts[TrialStatus.INVALID],
                     f"{seconds:.1f} s", f"{cached_plain:.1f} s", f"{cached_races:.1f} s"])
        print(format_table(header, rows[-1:]), flush=True)
    print()
    print(format_table(header, rows))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
