"""Any worker count runs: many workers of 1024-thread blocks must not pass the process's mapping limit
(each fiber stack and its guard page are two mappings), and stacks keep their guards there too."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from compiler.backends import emu
from compiler.backends.emu.server import SERVERS
from compiler.source import KernelSource, Param

SCALE = r"""
extern "C" __global__ void scale(const float* __restrict__ x, float* __restrict__ y) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  __syncthreads();  // every fiber of the block live at once, each on its own stack
  y[i] = 2.0f * x[i];
}
"""

DEEP = r"""
extern "C" __global__ void deep(const float* __restrict__ x, float* __restrict__ y) {
  float scratch[40000];
  for (int i = 0; i < 40000; ++i) scratch[i] = x[(i + threadIdx.x) & 1023];
  y[threadIdx.x] = scratch[(int)x[threadIdx.x] * 97 % 40000];
}
"""
X_Y = (Param("x", "float32"), Param("y", "float32"))


@pytest.mark.parametrize("workers", [64, 300])
def test_many_workers_run_1024_thread_blocks(tmp_path, rng, workers: int) -> None:
    config = emu.EmuConfig(cache_dir=tmp_path, workers=workers)
    blocks = 96
    kernel = KernelSource("scale", SCALE, (blocks, 1, 1), (1024, 1, 1), X_Y)
    x = rng.standard_normal(blocks * 1024).astype(np.float32)
    y = np.full_like(x, np.nan)
    emu.run(kernel, [x, y], config=config)
    np.testing.assert_array_equal(y, 2 * x)


def test_stack_overflow_is_caught_with_many_workers(tmp_path) -> None:
    config = emu.EmuConfig(cache_dir=tmp_path, workers=64)
    kernel = KernelSource("deep", DEEP, (64, 1, 1), (1024, 1, 1), X_Y)
    x, y = np.zeros(1024, np.float32), np.full(1024, np.nan, np.float32)
    with pytest.raises(emu.StackOverflowError, match="stack overflow in kernel 'deep'"):
        emu.run(kernel, [x, y], config=config)


def test_a_small_launch_after_a_large_one_does_not_fork_the_large_stack_pool(tmp_path, rng) -> None:
    # Every fork copies the server's mappings: a pool kept from a launch of many 1024-thread blocks
    # made each later small launch about ten times slower.
    config = emu.EmuConfig(cache_dir=tmp_path, workers=64)

    def launch(threads: int) -> int:
        kernel = KernelSource("scale", SCALE, (64, 1, 1), (threads, 1, 1), X_Y)
        x = rng.standard_normal(64 * threads).astype(np.float32)
        y = np.full_like(x, np.nan)
        emu.run(kernel, [x, y], config=config)
        np.testing.assert_array_equal(y, 2 * x)
        server = SERVERS.get(config).process.pid
        return len(Path(f"/proc/{server}/maps").read_text().splitlines())

    assert launch(1024) > 20000
    assert launch(32) < 10000
