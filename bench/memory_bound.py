"""Memory-bound operators (softmax, reductions): the bandwidth floor each realistic workload must meet.

Pure arithmetic, no kernel is run: the emulator says nothing about speed. For each spec the table
prints the bytes a kernel must move at least (``min_bytes``: every input read once, every output
written once), its FLOP count and arithmetic intensity, the schedule-space sizes, and the least time
the move can take at each device preset's peak bandwidth (``min_bytes / bandwidth``). A GPU run that
measures ``seconds`` for a kernel turns it into achieved bandwidth with
``compiler.ops.rowwise.achieved_bandwidth(min_bytes, seconds, device)``: GB/s (10**9 bytes, the unit
of ``DeviceSpec.memory_bandwidth_gbs``) and the fraction of the device's peak; the lower time limit
below is the time at which that fraction would be 1.

Usage: ``python bench/memory_bound.py [--devices h200 a100]``
"""

from __future__ import annotations

import argparse
from typing import Any

from compiler.device import DEVICES, device_preset
from compiler.ops import get_operator, parse_spec
from compiler.ops.rowwise import bandwidth_bound_seconds
from service.cli.table import format_table

#: Realistic shapes: attention scores, vocabulary logits, normalisation statistics, column sums.
SPECS: tuple[dict[str, Any], ...] = (
    {"op": "softmax", "rows": 32 * 32 * 1024, "cols": 1024, "dtype": "float16"},
    {"op": "softmax", "rows": 4096, "cols": 50257, "dtype": "float32"},
    {"op": "softmax", "rows": 8192, "cols": 32000, "dtype": "bfloat16"},
    {"op": "softmax", "rows": 1024, "cols": 128, "dtype": "float32"},
    {"op": "reduce", "shape": [8192, 4096], "axis": -1, "kind": "mean", "dtype": "float16"},
    {"op": "reduce", "shape": [32, 4096, 4096], "axis": 1, "kind": "sum", "dtype": "bfloat16"},
    {"op": "reduce", "shape": [4096, 8192], "axis": 0, "kind": "sum", "dtype": "float32"},
    {"op": "reduce", "shape": [256, 1024, 64], "axis": 1, "kind": "max", "dtype": "float32"},
)


def _describe(spec: Any) -> str:
    if spec.op == "softmax":
        return f"softmax {spec.rows}x{spec.cols}"
    return f"{spec.kind} {list(spec.shape)} axis {spec.axis}"


def rows(device_names: list[str]) -> tuple[list[str], list[list[object]]]:
    devices = [device_preset(name) for name in device_names]
    header = ["workload", "dtype", "MB moved", "MFLOP", "FLOP/B", "L1", "L2",
              *(f"floor us {d}" for d in device_names)]
    table: list[list[object]] = []
    for data in SPECS:
        spec = parse_spec(data)
        operator = get_operator(spec.op)
        moved, flops = operator.min_bytes(spec), operator.flops(spec)
        sizes = [len(operator.space(spec, devices[0], level).candidates()) for level in (1, 2)]
        floors = [f"{bandwidth_bound_seconds(moved, d) * 1e6:.1f}" for d in devices]
        table.append([_describe(spec), spec.dtype, f"{moved / 1e6:.1f}", f"{flops / 1e6:.1f}",
                      f"{flops / moved:.2f}", *sizes, *floors])
    return header, table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", nargs="+", default=["h200", "a100"], choices=sorted(DEVICES))
    args = parser.parse_args()
    header, table = rows(args.devices)
    peaks = ", ".join(f"{name} {device_preset(name).memory_bandwidth_gbs:.0f} GB/s" for name in args.devices)
    print(f"Bandwidth floors (arithmetic, not measurements): min_bytes / peak bandwidth ({peaks}).")
    print("Space sizes are valid schedules on the first device. No GPU time was measured here.\n")
    print(format_table(header, table))
    print("\nachieved GB/s = min_bytes / seconds / 1e9; fraction of peak = floor / measured time.")


if __name__ == "__main__":
    main()
