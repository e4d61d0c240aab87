"""The host's memory bandwidth at a given footprint, measured: the sloped part of the cpu's roofline.

A memory-bound kernel (softmax, a reduction) is judged against how fast the cores can move its bytes,
not against the FMA peak (``compiler.backends.cpu_peak``), which it can never approach. How fast
depends on where the bytes live: a footprint that fits the caches streams from them, a larger one from
DRAM. So the probe reads a buffer of the workload's own footprint, spread over every core in
contiguous shares, as many passes as make one launch last a few milliseconds (the launch's dispatch is
then a small part of it), each load folded into one of 16 independent accumulator vectors so that no
add chain limits it. Its fastest sample is the bound: nothing moves that many bytes through these
cores faster than plain vector loads of them.

The buffer is filled before it is read: pages that were only allocated all map the kernel's one zero
page, which stays cached, and would report a bandwidth no real operand gets.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np

from compiler.backends import cpu
from compiler.backends.timing import Protocol, measure
from compiler.codegen.cpp import render_host
from compiler.cpu_device import CpuDevice
from compiler.ir import Kernel, blockIdx, f32, fma, kernel, lower, range_, registers

#: Independent accumulator rows, each two vectors wide: 16 load chains a core.
ROWS = 8
#: Bytes one launch reads (all passes together): a few milliseconds at tens to hundreds of GB/s.
LAUNCH_BYTES = 256 << 20
#: The largest footprint probed. Past every cache the bandwidth no longer depends on the footprint
#: (DRAM's), and a larger buffer would only cost memory.
MAX_FOOTPRINT = 512 << 20
#: Fewer repetitions than the peak's: a launch over a large footprint takes tens of milliseconds.
PROTOCOL = Protocol(warmup_ms=10, min_repetitions=10, target_ms=100)


def stream_kernel(lanes: int, cores: int, steps: int, passes: int) -> Kernel:
    """One block a core; block ``b`` reads ``x[b]`` (``steps`` x ``ROWS`` x ``2 * lanes`` floats)
    ``passes`` times, each load folded into its accumulator (``acc = 0.5 * acc + x``), then stores the
    accumulators so nothing is dead code."""
    width = 2 * lanes
    with kernel("stream_read", block=1, grid=cores) as k:
        x = k.tensor("x", f32, (cores, steps, ROWS, width))
        out = k.tensor("out", f32, (cores, ROWS, width))
        acc = registers("acc", f32, (ROWS, width))
        for i in range_(ROWS, name="i", unroll=True):
            for j in range_(width, name="j", simd=True):
                acc[i, j] = 0.0
        for _ in range_(passes, name="p"):
            for s in range_(steps, name="s"):
                for i in range_(ROWS, name="i", unroll=True):
                    for j in range_(width, name="j", simd=True):
                        acc[i, j] = fma(acc[i, j], 0.5, x[blockIdx.x, s, i, j])
        for i in range_(ROWS, name="i", unroll=True):
            for j in range_(width, name="j", simd=True):
                out[blockIdx.x, i, j] = acc[i, j]
    return k.kernel


def shape(footprint: int, lanes: int, cores: int) -> tuple[int, int]:
    """(steps, passes) for a footprint of ``footprint`` bytes (capped at ``MAX_FOOTPRINT``, rounded up to
    whole rows on every core) read ``passes`` times, about ``LAUNCH_BYTES`` a launch.

    >>> shape(1 << 20, 8, 2)
    (1024, 256)
    """
    if footprint < 1:
        raise ValueError(f"the footprint must be at least one byte, got {footprint}")
    row = cores * ROWS * 2 * lanes * 4
    steps = max(1, math.ceil(min(footprint, MAX_FOOTPRINT) / row))
    return steps, max(1, round(LAUNCH_BYTES / (steps * row)))


def measured_bandwidth_gbs(config: cpu.CpuConfig, device: CpuDevice, footprint: int,
                           protocol: Protocol = PROTOCOL,
                           clock: Callable[[], int] = time.perf_counter_ns) -> float:
    """GB/s (10**9 bytes) of :func:`stream_kernel` over ``footprint`` bytes on ``config.workers`` cores,
    from its fastest sample under ``clock`` (``RuntimeError`` when the kernel does not build or reads
    nothing)."""
    cores, lanes = config.workers, device.f32_lanes
    steps, passes = shape(footprint, lanes, cores)
    built = cpu.compile(render_host(lower(stream_kernel(lanes, cores, steps, passes))), config, device)
    if isinstance(built, cpu.CompileFailure):
        raise RuntimeError(f"the bandwidth kernel did not build: {built.message}")
    loaded = cpu.load(built, config)
    x = np.full((cores, steps, ROWS, 2 * lanes), 1.0, np.float32)
    out = np.zeros((cores, ROWS, 2 * lanes), np.float32)
    values = cpu.check_args(loaded.artifact.kernel, [x, out])
    samples = measure(lambda: loaded.function(*values, loaded.workers), protocol, clock=clock)
    # Every accumulator converges to 2 (acc = 0.5 acc + 1): anything else means loads were skipped.
    if not np.allclose(out, 2.0 - 0.5 ** (passes * steps - 1), rtol=1e-5):
        raise RuntimeError("the bandwidth kernel computed a wrong sum: its loads were not all made")
    return passes * x.nbytes / min(samples.samples_ns)
