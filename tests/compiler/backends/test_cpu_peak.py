"""The cpu's measured FP32 peak: the register-FMA kernel builds, runs on every core, stores what it
computed, and its rate is not beyond what the machine's description allows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from compiler.backends import cpu
from compiler.backends.cpu_peak import ROWS, fma_kernel, measured_peak_gflops
from compiler.codegen.cpp import render_host
from compiler.cpu_device import detect_cpu
from compiler.ir import lower


@pytest.fixture
def config(tmp_path: Path) -> cpu.CpuConfig:
    if cpu.unavailable_reason(cpu.CpuConfig(cache_dir=tmp_path)) is not None:
        pytest.skip("no host compiler")
    return cpu.CpuConfig(cache_dir=tmp_path)


def test_the_fma_kernel_computes_its_chains_on_every_core(config: cpu.CpuConfig) -> None:
    device = detect_cpu()
    lanes, cores, steps = device.f32_lanes, config.workers, 1000
    loaded = cpu.load(cpu.compile(render_host(lower(fma_kernel(lanes, cores, steps))), config, device), config)
    out = np.full((cores, ROWS, 2 * lanes), np.nan, np.float32)
    cpu.run(loaded, [out])
    value = np.float64(1.0)
    for _ in range(steps):  # the chain's fixed point is 1: a few float32 ulps away after rounding
        value = value * 0.999999 + 1e-6
    assert np.allclose(out, value, rtol=1e-4) and np.isfinite(out).all()


def test_the_measured_peak_is_positive_and_not_beyond_the_hardware(config: cpu.CpuConfig) -> None:
    device = detect_cpu()
    peak = measured_peak_gflops(config, device, steps=20_000)
    assert 0 < peak < float("inf")
    estimate = device.peak_gflops_f32
    if estimate is not None:
        # Boost passes the OS's clock, hence the slack; a rate far beyond it would be flops miscounted.
        # No lower bound: a loaded machine (other tests on the same cores) may lend a fraction of a core,
        # and speed is the benchmarks' business (bench/cpu_vs_numpy.py prints the measured peak).
        assert peak * device.peak_cores / config.workers < 4 * estimate
