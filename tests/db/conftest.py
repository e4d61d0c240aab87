"""Fixtures of the storage tests: a workload, a device, a toolchain, and kernels that name their latency.

The databases themselves (``url``, ``engine``, ``backend``: SQLite and a real PostgreSQL) come from the
root ``tests/conftest.py``.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from db.records import DeviceInfo, KernelResult, ToolchainInfo, WorkloadSpec


@pytest.fixture
def workload() -> WorkloadSpec:
    return WorkloadSpec(op="matmul", spec={"m": 256, "n": 512, "k": 128, "dtype": "float16"})


@pytest.fixture
def device() -> DeviceInfo:
    return DeviceInfo(
        name="NVIDIA H100 80GB HBM3",
        arch="sm_90",
        driver="580.65.06",
        compute_units=132,
        memory_bytes=80 * 2**30,
        l2_bytes=50 * 2**20,
    )


@pytest.fixture
def toolchain() -> ToolchainInfo:
    return ToolchainInfo(warpmap="0.1.0", nvrtc="13.5", host_compiler="g++ 12.2.0")


def kernel_result(latency_us: float, *, tag: str = "k", binary: bytes | None = b"\x7fELF\x00\x01") -> KernelResult:
    """A kernel whose schedule and source name its latency, so tests can tell stored kernels apart."""
    return KernelResult(
        schedule={"block_m": 64, "tag": tag, "latency": latency_us},
        source=f'extern "C" __global__ void {tag}(float* a) {{ /* {latency_us} */ }}',
        entry=tag,
        grid=(8, 4, 1),
        block=(128, 1, 1),
        shared_bytes=4096,
        params=({"name": "a", "dtype": "float32", "pointer": True},),
        latency_us=latency_us,
        trials_used=7,
        binary=binary,
        gflops=2.5,
        latency_p20_us=0.97 * latency_us,
        latency_p80_us=1.05 * latency_us,
        gbs=80.0,
        peak_gflops=400.0,
        bandwidth_gbs=100.0,
    )


@pytest.fixture
def make_result() -> Callable[..., KernelResult]:
    return kernel_result
