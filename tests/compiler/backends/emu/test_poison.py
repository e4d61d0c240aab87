"""Memory a kernel never wrote reads as garbage, never as a lucky 0: uninitialised locals, register
arrays and shared memory (per block) must make a kernel that relies on them fail against numpy."""

from __future__ import annotations

import numpy as np

from compiler.backends import emu
from compiler.source import KernelSource, Param

ROWS, COLS = 256, 37
X_Y_N = [Param("x", "float32"), Param("y", "float32"), Param("n", "int32", pointer=False)]

UNINIT_ACCUMULATOR = r"""
extern "C" __global__ void row_sum(const float* __restrict__ x, float* __restrict__ y, int n) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  float s;  // missing "= 0"
  for (int j = 0; j < n; ++j) s += x[r * n + j];
  y[r] = s;
}
"""

UNINIT_REGISTER_ARRAY = r"""
extern "C" __global__ void row_sum4(const float* __restrict__ x, float* __restrict__ y, int n) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  float acc[4];  // never cleared
  for (int j = 0; j < n; ++j) acc[j & 3] += x[r * n + j];
  y[r] = (acc[0] + acc[1]) + (acc[2] + acc[3]);
}
"""

UNINIT_COUNTER = r"""
extern "C" __global__ void count_positive(const float* __restrict__ x, int* __restrict__ y, int n) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  int count;
  for (int j = 0; j < n; ++j) count += x[r * n + j] > 0.0f;
  y[r] = count;
}
"""

# Only the first half of the block stages its element; the second half reads slots nobody wrote.
SHARED_HALF_WRITTEN = r"""
extern "C" __global__ void half_staged(const float* __restrict__ x, float* __restrict__ y, int n) {
  __shared__ float s[64];
  extern __shared__ float d[];
  const int t = threadIdx.x, i = blockIdx.x * 64 + t;
  if (t < 32) { s[t] = x[i]; d[t] = x[i]; }
  __syncthreads();
  y[i] = s[t] + d[t];
}
"""

# Block b writes only slot b: every other slot it reads holds, at best, what an earlier block wrote.
SHARED_LEFTOVERS = r"""
extern "C" __global__ void one_slot(const float* __restrict__ x, float* __restrict__ y, int n) {
  __shared__ float s[8];
  const int t = threadIdx.x;
  if (t == blockIdx.x) s[t] = x[t];
  __syncthreads();
  y[blockIdx.x * 8 + t] = s[t];
}
"""


def _rows(rng: np.random.Generator) -> np.ndarray:
    return rng.standard_normal((ROWS, COLS)).astype(np.float32)


def _assert_all_wrong(got: np.ndarray, want: np.ndarray) -> None:
    """Every element disagrees with numpy: the garbage start value shows in each output."""
    close = np.isclose(got.astype(np.float64), want, rtol=1e-3, atol=1e-3)
    assert not close.any(), f"{int(close.sum())} of {close.size} elements match numpy: {got[close][:4]}"


def test_uninitialised_accumulator_fails_against_numpy(run_kernel, rng) -> None:
    x = _rows(rng)
    y = np.full(ROWS, np.nan, np.float32)
    run_kernel(UNINIT_ACCUMULATOR, "row_sum", (ROWS // 64, 1, 1), (64, 1, 1), X_Y_N, [x, y, COLS])
    _assert_all_wrong(y, x.astype(np.float64).sum(axis=1))


def test_uninitialised_register_array_fails_against_numpy(run_kernel, rng) -> None:
    x = _rows(rng)
    y = np.full(ROWS, np.nan, np.float32)
    run_kernel(UNINIT_REGISTER_ARRAY, "row_sum4", (ROWS // 64, 1, 1), (64, 1, 1), X_Y_N, [x, y, COLS])
    _assert_all_wrong(y, x.astype(np.float64).sum(axis=1))


def test_uninitialised_integer_is_recognisable_garbage(run_kernel, rng) -> None:
    x = _rows(rng)
    y = np.full(ROWS, -1, np.int32)
    params = [Param("x", "float32"), Param("y", "int32"), Param("n", "int32", pointer=False)]
    run_kernel(UNINIT_COUNTER, "count_positive", (ROWS // 64, 1, 1), (64, 1, 1), params, [x, y, COLS])
    want = (x > 0).sum(axis=1)
    # Far outside any count a row of COLS elements can give.
    assert (np.abs(y.astype(np.int64) - want) > 1 << 20).all(), y[:4]


def test_shared_memory_read_before_written_is_nan(run_kernel, rng) -> None:
    blocks = 5
    x = rng.standard_normal(blocks * 64).astype(np.float32)
    y = np.full_like(x, 0.0)
    run_kernel(SHARED_HALF_WRITTEN, "half_staged", (blocks, 1, 1), (64, 1, 1), X_Y_N, [x, y, 0], 64 * 4)
    staged = (np.arange(blocks * 64) % 64) < 32
    np.testing.assert_allclose(y[staged], 2 * x[staged], rtol=1e-6)
    assert np.isnan(y[~staged]).all()


def test_each_block_starts_from_poisoned_shared_memory(tmp_path, rng) -> None:
    # One worker, so every block runs after the previous one on the same shared memory.
    config = emu.EmuConfig(cache_dir=tmp_path, workers=1)
    kernel = KernelSource("one_slot", SHARED_LEFTOVERS, (8, 1, 1), (8, 1, 1), tuple(X_Y_N))
    x = rng.standard_normal(8).astype(np.float32)
    y = np.zeros(64, np.float32)
    emu.run(kernel, [x, y, 0], config=config)
    grid = y.reshape(8, 8)
    np.testing.assert_array_equal(np.diag(grid), x)
    assert np.isnan(grid[~np.eye(8, dtype=bool)]).all()
