"""The host's FP32 peak, measured: a kernel of register FMAs and nothing else, on every core.

The estimate of ``CpuDevice.peak_gflops_f32`` multiplies by the clock the OS reports, which boost
passes: on the 2-core Zen 2 VM the estimate said 144 GFLOP/s and a tuned 512³ matmul ran at 175
(122% "of peak"). A roofline needs a bound the machine cannot beat, so the cpu target measures one:
12 x 2 vectors of independent FMA chains per core, in one launch over all the cores, through the same
build and load path as every kernel; the rate of its fastest sample is the peak. 24 chains are more
than AVX2's 16 registers hold, yet on the Zen 2 VM they measured faster than chains that fit (in one
run: 6 x 2 chains 93 GFLOP/s, 8 x 2 108, 12 x 2 108, 16 x 2 91; OpenBLAS ran at 188 when these 24
measured 186), so the kernel keeps them on every machine.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from compiler.backends import cpu
from compiler.backends.timing import Protocol, measure
from compiler.codegen.cpp import render_host
from compiler.cpu_device import CpuDevice
from compiler.ir import Kernel, blockIdx, f32, fma, kernel, lower, range_, registers

#: Independent accumulator rows, each two vectors wide: 24 chains a core.
ROWS = 12
#: FMAs each chain does per launch (a launch of a few milliseconds).
STEPS = 200_000
#: Enough samples that the fastest is what the cores do when the machine lends them whole.
PROTOCOL = Protocol(warmup_ms=20, min_repetitions=30, target_ms=150)


def fma_kernel(lanes: int, cores: int, steps: int = STEPS) -> Kernel:
    """One block a core; each keeps ``ROWS`` x ``2 * lanes`` accumulators in registers and does
    ``steps`` FMAs on each, then stores them (so nothing is dead code)."""
    width = 2 * lanes
    with kernel("fma_peak", block=1, grid=cores) as k:
        out = k.tensor("out", f32, (cores, ROWS, width))
        acc = registers("acc", f32, (ROWS, width))
        for i in range_(ROWS, name="i", unroll=True):
            for j in range_(width, name="j", simd=True):
                acc[i, j] = 1.0
        for _ in range_(steps, name="s"):
            for i in range_(ROWS, name="i", unroll=True):
                for j in range_(width, name="j", simd=True):
                    acc[i, j] = fma(acc[i, j], 0.999999, 1e-6)
        for i in range_(ROWS, name="i", unroll=True):
            for j in range_(width, name="j", simd=True):
                out[blockIdx.x, i, j] = acc[i, j]
    return k.kernel


def measured_peak_gflops(config: cpu.CpuConfig, device: CpuDevice, steps: int = STEPS,
                         protocol: Protocol = PROTOCOL, clock: Callable[[], int] = time.perf_counter_ns) -> float:
    """GFLOP/s of :func:`fma_kernel` on ``config.workers`` cores, from its fastest sample under ``clock``
    (``RuntimeError`` when the kernel does not build or computes nothing)."""
    cores = config.workers
    built = cpu.compile(render_host(lower(fma_kernel(device.f32_lanes, cores, steps))), config, device)
    if isinstance(built, cpu.CompileFailure):
        raise RuntimeError(f"the peak kernel did not build: {built.message}")
    loaded = cpu.load(built, config)
    buffer = np.zeros((cores, ROWS, 2 * device.f32_lanes), np.float32)
    values = cpu.check_args(loaded.artifact.kernel, [buffer])
    samples = measure(lambda: loaded.function(*values, loaded.workers), protocol, clock=clock)
    if not (np.isfinite(buffer).all() and (buffer != 0).all()):
        raise RuntimeError("the peak kernel computed nothing: its FMAs were optimised away")
    return 2.0 * cores * ROWS * 2 * device.f32_lanes * steps / min(samples.samples_ns)
