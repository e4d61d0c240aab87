"""The cpu's measured bandwidth: the streaming kernel reads every element of its footprint on every core
(a sum over random data, checked against numpy), the probe's shape covers the footprint, and the rate
it reports is a finite positive number."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from compiler.backends import cpu
from compiler.backends.cpu_bandwidth import (
    LAUNCH_BYTES,
    MAX_FOOTPRINT,
    ROWS,
    measured_bandwidth_gbs,
    shape,
    stream_kernel,
)
from compiler.codegen.cpp import render_host
from compiler.cpu_device import detect_cpu
from compiler.ir import lower


@pytest.fixture
def config(tmp_path: Path) -> cpu.CpuConfig:
    if cpu.unavailable_reason(cpu.CpuConfig(cache_dir=tmp_path)) is not None:
        pytest.skip("no host compiler")
    return cpu.CpuConfig(cache_dir=tmp_path)


def test_the_stream_kernel_folds_every_element_of_every_core_s_share(config: cpu.CpuConfig) -> None:
    device = detect_cpu()
    lanes, cores, steps, passes = device.f32_lanes, config.workers, 5, 3
    built = cpu.compile(render_host(lower(stream_kernel(lanes, cores, steps, passes))), config, device)
    loaded = cpu.load(built, config)
    x = np.random.default_rng(3).uniform(-1.0, 1.0, (cores, steps, ROWS, 2 * lanes)).astype(np.float32)
    out = np.full((cores, ROWS, 2 * lanes), np.nan, np.float32)
    cpu.run(loaded, [x, out])
    expected = np.zeros(out.shape, np.float64)
    for _ in range(passes):
        for s in range(steps):
            expected = 0.5 * expected + x[:, s]
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("footprint", [1, 4096, 3 << 20, 40 << 20, 2 * MAX_FOOTPRINT])
def test_the_probe_covers_the_footprint_up_to_its_cap_in_launches_of_a_set_size(footprint: int) -> None:
    lanes, cores = 8, 3
    row = cores * ROWS * 2 * lanes * 4
    steps, passes = shape(footprint, lanes, cores)
    covered = steps * row
    assert min(footprint, MAX_FOOTPRINT) <= covered < min(footprint, MAX_FOOTPRINT) + row
    assert passes >= 1 and (passes == 1 or abs(passes * covered - LAUNCH_BYTES) <= covered)


def test_an_empty_footprint_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one byte"):
        shape(0, 8, 2)


def test_the_measured_bandwidth_is_a_finite_positive_rate(config: cpu.CpuConfig) -> None:
    bandwidth = measured_bandwidth_gbs(config, detect_cpu(), 256 << 10)
    # No bounds beyond that: speed is the benchmarks' business (bench/roofline.py prints these rates).
    assert 0 < bandwidth < float("inf")
