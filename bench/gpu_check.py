"""The one-call GPU check: every template's level-1 space verified on the GPU against numpy.

Run it on a machine with an NVIDIA GPU (``python bench/gpu_check.py``); it prints the toolchain, then
one summary row per (operator spec, template space) and every failing schedule with its message, and
exits 1 if any schedule fails. Without a GPU it says why and exits 2. Later stages (tuning, timing
against cuBLAS) are added here so that one command covers everything that needs a device.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter

from scratch_cache import add_cache_option, use_cache_dir

from compiler.backends import get_target
from compiler.device import DEVICES, DeviceSpec
from compiler.ops import operators, parse_spec
from compiler.toolchain import detect_gpus
from search.trial import TrialStatus
from search.verify import check_schedules
from service.cli.table import format_table

#: Awkward shapes per operator: edges in every dimension, both layouts, batches.
SPECS: dict[str, list[dict[str, object]]] = {
    "matmul": [
        {"op": "matmul", "m": 67, "n": 45, "k": 83, "batch": 3, "layout_a": "col", "layout_b": "row"},
        {"op": "matmul", "m": 512, "n": 512, "k": 512},
        {"op": "matmul", "m": 67, "n": 45, "k": 83, "batch": 2, "dtype": "float16", "layout_b": "col"},
        {"op": "matmul", "m": 257, "n": 129, "k": 100, "dtype": "bfloat16", "layout_a": "col"},
    ],
    "conv2d": [
        {"op": "conv2d", "n": 2, "c": 3, "h": 17, "w": 19, "k": 5, "r": 3, "s": 3, "stride": [2, 2],
         "padding": [1, 1], "layout": "NCHW"},
    ],
    "softmax": [
        {"op": "softmax", "rows": 5, "cols": 4099},
        {"op": "softmax", "rows": 64, "cols": 1000, "dtype": "float16"},
    ],
    "reduce": [
        {"op": "reduce", "shape": [5, 37, 9], "axis": 1, "kind": "sum"},
        {"op": "reduce", "shape": [5, 37, 9], "axis": 2, "kind": "max"},
    ],
}


def gpu_device() -> DeviceSpec:
    """The preset matching the GPU's compute capability (the limits a space is shaped by)."""
    found = detect_gpus()
    if not found.devices:
        raise SystemExit(f"no GPU: {found.reason}")
    major, minor = found.devices[0].compute_capability
    arch = f"sm_{major}{minor}"
    preset = next((d for d in DEVICES.values() if d.arch == arch), None)
    if preset is None:
        raise SystemExit(f"GPU {found.devices[0].name} ({arch}) has no preset in compiler.device.DEVICES")
    print(f"GPU: {found.devices[0].name} ({arch}), driver {found.driver_version}; limits from preset {preset.name}")
    return preset


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--level", type=int, default=1)
    parser.add_argument("--only", help="check only this operator")
    add_cache_option(parser)
    args = parser.parse_args()
    use_cache_dir(args.cache_dir)
    reason = get_target("cuda").unavailable_reason()
    if reason is not None:
        print(reason, file=sys.stderr)
        return 2
    device = gpu_device()
    target = get_target("cuda", gpu=device, archs=(device.arch,))
    rows: list[list[object]] = []
    failures: list[str] = []
    for name, operator in sorted(operators().items()):
        if args.only and name != args.only:
            continue
        for data in SPECS.get(name, []):
            spec = parse_spec(data)
            space = operator.space(spec, device, args.level)
            start = time.perf_counter()
            schedules = space.candidates()
            # One at a time: the GPU target launches in this process, on one context.
            results = check_schedules(operator, spec, schedules, target=target, jobs=1, timeout_s=20.0)
            counts = Counter(result.status for result in results)
            failures += [f"{space.template} {spec.canonical_json()} {result.schedule}: {result.status} {result.message}"
                         for result in results if result.status.is_failure]
            rows.append([space.template, spec.canonical_json(), len(schedules), counts[TrialStatus.OK],
                         sum(n for s, n in counts.items() if s.is_failure), counts[TrialStatus.INVALID],
                         round(time.perf_counter() - start, 1)])
            print(format_table(["space", "spec", "schedules", "ok", "failed", "pruned", "seconds"], rows[-1:]),
                  flush=True)
    print()
    print(format_table(["space", "spec", "schedules", "ok", "failed", "pruned", "seconds"], rows))
    for line in failures:
        print("FAIL", line)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
