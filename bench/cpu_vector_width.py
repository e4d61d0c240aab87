"""The cpu matmul's default schedules built with 512-bit vectors and with the compiler's own choice.

On an AVX-512 host the cpu schedules are built for 16 f32 lanes, and the target compiles them with
``-mprefer-vector-width=512`` (``CpuDevice.compile_flags``): GCC tunes many AVX-512 parts to prefer
256-bit vectors, which vectorises a 16-lane loop as two halves of 8. This bench builds the same
source both ways, the second as it would be for a device of 8 lanes (``-march=native`` alone, GCC's
choice of width), checks both against numpy on random inputs (outputs poisoned), then times them in
interleaved rounds under one protocol (``compiler.backends.timing``). It prints GFLOP/s (2mnk per
second), median [p20, p80] over all samples, and the ratio. On a host without 16 lanes both builds
are the same and the bench says so.

Usage: ``python bench/cpu_vector_width.py [--sizes 256,512,1024] [--rounds 5]``
"""

from __future__ import annotations

import os

# OpenMP threads bound one to a CPU, as in a tuning's measuring process (search.tune.MEASURING_ENVIRONMENT):
# unbound, another process busy on one core could leave two of a kernel's threads on the other core,
# each spinning for its peer, and every call waited out scheduler ticks (README, "Measured", a busy host).
os.environ.setdefault("OMP_PROC_BIND", "true")

import argparse
import datetime
import tempfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np

from compiler.backends import cpu
from compiler.backends.cpu_target import CpuTarget
from compiler.backends.timing import Protocol, measure, percentile
from compiler.cpu_device import CpuDevice, detect_cpu
from compiler.ops.cpu import matmul
from compiler.ops.matmul_spec import MatmulSpec
from compiler.program import Program
from service.cli.table import format_table


def program_call(program: Program, buffers: dict[str, np.ndarray], config: cpu.CpuConfig,
                 device: CpuDevice) -> Callable[[], None]:
    """A call running every launch of ``program`` on ``buffers``, each compiled with ``device``'s flags."""
    target = CpuTarget(config=config, cpu=device)
    return target.call(target.build(program), buffers)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="256,512,1024", help="square matmul sizes, comma-separated")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    device = detect_cpu()
    if "-mprefer-vector-width=512" not in device.compile_flags:
        print(f"{device.isa_summary}: no 512-bit builds on this host, nothing to compare")
        return
    builds = {"512-bit": device, "compiler's choice": replace(device, f32_lanes=8)}
    config = cpu.CpuConfig(cache_dir=Path(tempfile.mkdtemp(prefix="warpmap-vw-")))
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    print(f"# {stamp}, load {os.getloadavg()[0]:.2f}; {device.model}, {device.isa_summary}; "
          f"{args.rounds} interleaved rounds of {Protocol()}")
    rows = []
    rng = np.random.default_rng(0)
    for n in (int(s) for s in args.sizes.split(",")):
        spec = MatmulSpec(m=n, n=n, k=n)
        program = matmul.build(spec, matmul.default_schedule(spec, device))
        a = rng.standard_normal((n, n), dtype=np.float32)
        b = rng.standard_normal((n, n), dtype=np.float32)
        calls = {}
        for name, build in builds.items():
            buffers = {"a": a, "b": b, "c": np.full((n, n), np.nan, np.float32)}
            calls[name] = program_call(program, buffers, config, build)
            calls[name]()
            error = np.linalg.norm(buffers["c"] - a @ b) / np.linalg.norm(a @ b)
            if not error < 1e-5:
                raise SystemExit(f"{n}^3, {name}: relative error {error:.2e} against numpy")
        samples: dict[str, list[int]] = {name: [] for name in calls}
        for _ in range(args.rounds):
            for name, call in calls.items():
                samples[name] += measure(call, Protocol()).samples_ns
        medians = {}
        for name, ns in samples.items():
            rates = [2 * n**3 / s for s in ns]
            medians[name] = percentile(rates, 50)
            rows.append([f"{n}^3", name, f"{medians[name]:.1f} [{percentile(rates, 20):.0f}, "
                         f"{percentile(rates, 80):.0f}]", ""])
        wide, chosen = (medians[name] for name in builds)
        rows[-2][3] = f"{wide / chosen:.2f}x"
    print(format_table(["matmul f32", "build", "GFLOP/s median (p20, p80 in brackets)", "512-bit / compiler's"], rows))


if __name__ == "__main__":
    main()
