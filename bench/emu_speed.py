"""How fast the CUDA emulator runs kernels on this machine; prints a table.

Rows: emulated CUDA threads per second (an elementwise kernel and the tiled matmul), the run time of
the hand-written f32 tiled matmul (256-thread blocks, 4x4 register tiles) at 128^3, 256^3 and 512^3,
and the wall time to verify 30 schedules (30 distinct tilings, so 30 distinct sources) of a 128^3
matmul against numpy, compiles included, starting from an empty cache.

Usage: ``python bench/emu_speed.py [--workers 2] [--repeats 5]``
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # idle BLAS threads spin on a core and skew timings

import argparse
import importlib.util
import itertools
import resource
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from compiler.backends import emu
from compiler.source import KernelSource, Param

ELEMENTWISE = r"""
extern "C" __global__ void axpy(const float* __restrict__ x, float* __restrict__ y, float a, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
"""


EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "efficient_matmul.py"
#: The hand-written tiled matmul: test data, kept with the emulator's tests rather than in the package.
SAMPLES = Path(__file__).resolve().parents[1] / "tests" / "compiler" / "backends" / "emu" / "samples.py"


def tiled_matmul(m: int, n: int, k: int, **tiles: int) -> KernelSource:
    spec = importlib.util.spec_from_file_location("emu_test_samples", SAMPLES)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    kernel: KernelSource = module.tiled_matmul(m, n, k, **tiles)
    return kernel


def _example_matmul(size: int) -> KernelSource | None:
    """The compiler's generated example matmul, when this checkout has it."""
    spec = importlib.util.spec_from_file_location("efficient_matmul_example", EXAMPLE)
    if not EXAMPLE.exists() or spec is None or spec.loader is None:
        return None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.efficient_matmul_source(size, size, size)


def _median_launch(
    binary: emu.EmuBinary, args: list[object], cfg: emu.EmuConfig, repeats: int
) -> tuple[float, float, float]:
    """Median kernel seconds (in the child), launch wall seconds, and the child's CPU seconds: unlike
    wall time, CPU time does not grow when other work shares the cores."""
    kernel, wall, cpu = [], [], []
    for _ in range(repeats):
        stats = emu.launch(binary, args, config=cfg)  # type: ignore[arg-type]
        cpu.append(stats.cpu_s)
        kernel.append(stats.kernel_s)
        wall.append(stats.wall_s)
    return statistics.median(kernel), statistics.median(wall), statistics.median(cpu)


def _matmul_args(size: int, rng: np.random.Generator) -> list[object]:
    a = rng.standard_normal((size, size)).astype(np.float32)
    b = rng.standard_normal((size, size)).astype(np.float32)
    return [a, b, np.full((size, size), np.nan, np.float32), size, size, size]


def schedules(count: int) -> list[dict[str, int]]:
    """``count`` distinct matmul tilings with 64..256 threads per block."""
    found = []
    for bm, bn, bk, tm, tn in itertools.product((64, 32, 128), (64, 32, 128), (16, 8, 32), (4, 2, 8), (4, 2, 8)):
        if bm % tm == 0 and bn % tn == 0 and 64 <= (bm // tm) * (bn // tn) <= 256:
            found.append({"bm": bm, "bn": bn, "bk": bk, "tm": tm, "tn": tn})
    if len(found) < count:
        raise ValueError(f"only {len(found)} tilings, asked for {count}")
    return found[:count]


def _compilers_cpu_s() -> float:
    """CPU seconds of this process's reaped children: the host compilers (launches are the server's)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def verify_schedules(count: int, size: int, cfg: emu.EmuConfig, rng: np.random.Generator) -> tuple[float, float]:
    """Wall seconds to compile, run and check ``count`` distinct matmul sources (compiles overlap runs),
    and the CPU seconds of the compilers and launches."""
    a, b = (rng.standard_normal((size, size)).astype(np.float32) for _ in range(2))
    want = a.astype(np.float64) @ b

    def verify(tiles: dict[str, int]) -> float:
        c = np.full((size, size), np.nan, np.float32)
        stats = emu.run(tiled_matmul(size, size, size, **tiles), [a, b, c, size, size, size], config=cfg)
        if not np.allclose(c, want, rtol=1e-4, atol=1e-4):
            raise AssertionError(f"schedule {tiles} gave a wrong result")
        return stats.cpu_s

    start, compilers = time.perf_counter(), _compilers_cpu_s()
    with ThreadPoolExecutor(max_workers=cfg.workers) as pool:
        launches = sum(pool.map(verify, schedules(count)))
    return time.perf_counter() - start, _compilers_cpu_s() - compilers + launches


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2, help="OS threads per launch and parallel compiles")
    parser.add_argument("--repeats", type=int, default=5)
    opts = parser.parse_args()
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory(prefix="wm-emu-bench-") as tmp:
        cfg = emu.EmuConfig(cache_dir=Path(tmp) / "warm", workers=opts.workers)
        rows: list[tuple[str, str, str]] = []

        n = 1 << 20
        axpy = KernelSource(
            "axpy",
            ELEMENTWISE,
            (n // 256, 1, 1),
            (256, 1, 1),
            (
                Param("x", "float32"),
                Param("y", "float32"),
                Param("a", "float32", False),
                Param("n", "int32", False),
            ),
        )
        binary = emu.compile_kernel(axpy, config=cfg)
        x, y = rng.standard_normal(n).astype(np.float32), np.zeros(n, np.float32)
        kernel_s, _, cpu_s = _median_launch(binary, [x, y, 2.0, n], cfg, opts.repeats)
        rows.append(
            (
                "emulated threads/s, elementwise (2^20 threads, no barriers)",
                f"{n / kernel_s:.3g}",
                f"{n / cpu_s:.3g} per CPU-s",
            )
        )

        compile_s = []
        for size in (128, 256, 512):
            kernel = tiled_matmul(size, size, size)
            t0 = time.perf_counter()
            binary = emu.compile_kernel(kernel, config=cfg)
            compile_s.append(time.perf_counter() - t0)
            kernel_s, wall_s, cpu_s = _median_launch(binary, _matmul_args(size, rng), cfg, opts.repeats)
            threads = kernel.num_blocks * kernel.threads_per_block
            label = f"f32 tiled matmul {size}^3: kernel (whole launch)"
            rows.append((label, f"{kernel_s * 1e3:.1f} ms ({wall_s * 1e3:.1f} ms)", f"{cpu_s * 1e3:.1f} ms"))
            if size == 256:
                label = "emulated threads/s, matmul 256^3 (2 barriers per k-tile)"
                rows.append((label, f"{threads / kernel_s:.3g}", f"{threads / cpu_s:.3g} per CPU-s"))
        rows.append(("host compile of one matmul kernel (cold cache)", f"{compile_s[0] * 1e3:.0f} ms", ""))
        generated = _example_matmul(256)
        if generated is not None:
            binary = emu.compile_kernel(generated, config=cfg)
            args = _matmul_args(256, rng)[:3]
            kernel_s, wall_s, cpu_s = _median_launch(binary, args, cfg, opts.repeats)
            label = "generated example matmul 256^3 (64x256 tiles): kernel (whole launch)"
            rows.append((label, f"{kernel_s * 1e3:.1f} ms ({wall_s * 1e3:.1f} ms)", f"{cpu_s * 1e3:.1f} ms"))

        cold = emu.EmuConfig(cache_dir=Path(tmp) / "cold", workers=opts.workers)
        emu.compile_kernel(axpy, config=cold)  # builds the runtime library once, as any first use does
        wall, cpu = verify_schedules(30, 128, cold, rng)
        rows.append(("verify 30 schedules of 128^3 incl. compiles", f"{wall:.2f} s", f"{cpu:.2f} s"))

    load = os.getloadavg()[0]
    print(
        f"CUDA emulator: {opts.workers} workers, {os.cpu_count()} CPUs, load average {load:.1f}, "
        f"median of {opts.repeats}"
    )
    header = ("measure", "wall", "CPU")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(3)]
    for row in [header, ("-" * widths[0], "-" * widths[1], "-" * widths[2]), *rows]:
        print("| " + " | ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) + " |")


if __name__ == "__main__":
    main()
