"""The one-call GPU check: every template's level-1 space verified on the GPU against numpy, then matmul
tuned and timed against cuBLAS.

Run it on a machine with an NVIDIA GPU (``python bench/gpu_check.py``, about 8 minutes on an H200); it
prints the toolchain, then one summary row per (operator spec, template space) and every failing
schedule with its message, then the tuning section (``bench/gpu_tune.py``): per workload ours, cuBLAS,
their ratio, TFLOP/s and % of peak. Each section prints its elapsed time. It exits 1 if any schedule
fails. Without a GPU it says why and exits 2.

``--dry-run`` needs no GPU: it prints the tuning plan and builds each workload's first candidates with
NVRTC for sm_90 (the H200's limits). ``--only``, ``--workloads`` and ``--skip-verify`` narrow a run.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter

import gpu_tune
from scratch_cache import add_cache_option, use_cache_dir

from compiler.backends import Target, get_target
from compiler.device import DEFAULT_GPU, DEVICES, DeviceSpec, device_preset
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


def verify(target: Target, device: DeviceSpec, level: int, only: str | None) -> int:
    """Every template's space at ``level`` checked on the GPU; 1 if any schedule failed."""
    rows: list[list[object]] = []
    failures: list[str] = []
    for name, operator in sorted(operators().items()):
        if only and name != only:
            continue
        for data in SPECS.get(name, []):
            spec = parse_spec(data)
            space = operator.space(spec, device, level)
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--level", type=int, default=1)
    parser.add_argument("--only", help="verify only this operator")
    parser.add_argument("--workloads", help="tune only the workloads whose label contains one of these "
                        "comma-separated words (e.g. '16bit,bert')")
    parser.add_argument("--skip-verify", action="store_true", help="only the tuning section")
    parser.add_argument("--dry-run", action="store_true", help="no GPU: print the tuning plan and build its "
                        "first candidates with NVRTC for sm_90")
    parser.add_argument("--trials", type=int, default=gpu_tune.TRIALS, help="candidates built per workload "
                        "in a dry run")
    add_cache_option(parser)
    args = parser.parse_args()
    use_cache_dir(args.cache_dir)
    started = time.monotonic()
    if args.dry_run:
        device = device_preset(DEFAULT_GPU)
        target = get_target("cuda", gpu=device, archs=(device.arch,))
        print(f"dry run: no timing; limits of preset {device.name} ({device.arch})")
        status = gpu_tune.dry_run(target, device, args.workloads, args.trials)
        print(f"tuning plan: {time.monotonic() - started:.0f} s")
        return status
    reason = get_target("cuda").unavailable_reason()
    if reason is not None:
        print(reason, file=sys.stderr)
        return 2
    device = gpu_device()
    target = get_target("cuda", gpu=device, archs=(device.arch,))
    status = 0
    if not args.skip_verify:
        status = verify(target, device, args.level, args.only)
        print(f"verification: {time.monotonic() - started:.0f} s", flush=True)
    tuning = time.monotonic()
    gpu_tune.run(target, device, started, args.workloads)
    print(f"tuning: {time.monotonic() - tuning:.0f} s; whole check: {time.monotonic() - started:.0f} s")
    return status


if __name__ == "__main__":
    sys.exit(main())
