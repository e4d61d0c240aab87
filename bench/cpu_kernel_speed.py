"""A baseline for the cpu target: the example host kernels against numpy, interleaved in one run.

Rows: the elementwise kernel ``alpha * x + exp(y)`` (GB/s counting x and y read once and out written
once) and the naive register-tiled matmul of ``examples/host_kernels.py`` (GFLOP/s, 2mnk flops),
each beside numpy doing the same work. Every round times our kernel and then numpy under the same
timing protocol (``compiler.backends.timing``: warm-up by time, at least 10 repetitions or about
100 ms); the table shows the median over all samples with p20/p80 in brackets, higher is better.
These kernels are written plainly, not tuned: this is where the cpu target starts, not its goal.

numpy's elementwise ufuncs run on one thread; its matmul (OpenBLAS) on all cores. Our kernels use all
cores of this process's affinity mask, with OMP_WAIT_POLICY=PASSIVE unless the environment says
otherwise (see below).

Usage: ``python bench/cpu_kernel_speed.py [--rounds 3] [--size 2048] [--mm 512]``
"""

from __future__ import annotations

import os

# Two thread pools take turns here (OpenMP's for our kernels, OpenBLAS's for numpy): idle OpenMP
# workers that spin, libgomp's default, would compete with BLAS's threads for the same cores. Sleeping
# workers cost a launch a wake-up, nothing measurable at these sizes. Read when libgomp loads.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# OpenMP threads bound one to a CPU, as in a tuning's measuring process (search.tune.MEASURING_ENVIRONMENT):
# unbound, another process busy on one core could leave two of a kernel's threads on the other core,
# each spinning for its peer, and every call waited out scheduler ticks (README, "Measured", a busy host).
os.environ.setdefault("OMP_PROC_BIND", "true")

import argparse
import importlib.util
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import numpy as np

from compiler.backends import cpu
from compiler.backends.timing import Protocol, measure, percentile
from compiler.codegen.cpp import render_host
from compiler.cpu_device import detect_cpu
from service.cli.table import format_table

_EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "host_kernels.py"


def _host_kernels() -> ModuleType:
    spec = importlib.util.spec_from_file_location("host_kernels_example", _EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _interleaved(calls: dict[str, Callable[[], object]], rounds: int, protocol: Protocol) -> dict[str, list[int]]:
    samples: dict[str, list[int]] = {name: [] for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            samples[name] += measure(call, protocol).samples_ns
    return samples


def _rate(work: float, samples_ns: list[int]) -> tuple[float, float, float]:
    """(median, p20, p80) of ``work`` per second in units of 1e9, from samples in ns (rate is work/ns)."""
    rates = [work / s for s in samples_ns]
    return percentile(rates, 50), percentile(rates, 20), percentile(rates, 80)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--size", type=int, default=2048, help="elementwise rows; columns are 2x this")
    parser.add_argument("--mm", type=int, default=512, help="square matmul size")
    args = parser.parse_args()
    kernels = _host_kernels()
    config = cpu.CpuConfig(cache_dir=Path(tempfile.mkdtemp(prefix="wm-cpu-bench-")))
    rng = np.random.default_rng(0)

    m, n = args.size, 2 * args.size
    x, y = (rng.standard_normal((m, n), dtype=np.float32) for _ in range(2))
    out, scratch = np.empty_like(x), np.empty_like(x)
    artifact = cpu.compile(render_host(kernels.elementwise(m, n)), config)
    axpy = cpu.load(artifact, config)
    axpy_args = cpu.check_args(axpy.artifact.kernel, [x, y, out, 1.5])

    def numpy_axpy() -> None:
        np.multiply(x, np.float32(1.5), out=scratch)
        np.exp(y, out=out)
        np.add(out, scratch, out=out)

    s = args.mm
    a, b = (rng.standard_normal((s, s), dtype=np.float32) for _ in range(2))
    c = np.empty_like(a)
    mm = cpu.load(cpu.compile(render_host(kernels.matmul(s, s, s)), config), config)
    mm_args = cpu.check_args(mm.artifact.kernel, [a, b, c])

    protocol = Protocol()
    samples = _interleaved({
        "axpy_exp (ours)": lambda: axpy.function(*axpy_args, axpy.workers),
        "axpy_exp (numpy)": numpy_axpy,
        "matmul naive (ours)": lambda: mm.function(*mm_args, mm.workers),
        "matmul (numpy)": lambda: np.matmul(a, b, out=c),
    }, args.rounds, protocol)
    np.testing.assert_allclose(c, a @ b, rtol=1e-3, atol=1e-3)

    moved = 3 * m * n * 4
    flops = 2 * s ** 3
    rows = []
    for name, work, unit, shape in (("axpy_exp (ours)", moved, "GB/s", f"{m}x{n}"),
                                    ("axpy_exp (numpy)", moved, "GB/s", f"{m}x{n}"),
                                    ("matmul naive (ours)", flops, "GFLOP/s", f"{s}^3"),
                                    ("matmul (numpy)", flops, "GFLOP/s", f"{s}^3")):
        median, p20, p80 = _rate(work, samples[name])
        rows.append([name, shape, unit, round(median, 2), f"[{p20:.2f}, {p80:.2f}]  n={len(samples[name])}"])
    device = detect_cpu()
    print(f"{device.model}, {device.isa_summary}, {config.workers} workers, {args.rounds} interleaved rounds")
    print(format_table(["kernel", "shape", "unit", "median", "p20, p80"], rows))


if __name__ == "__main__":
    main()
