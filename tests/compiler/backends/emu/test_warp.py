"""Warp shuffles (each kind, with widths), __syncwarp and a butterfly reduction against numpy."""

from __future__ import annotations

import numpy as np
import pytest

from compiler.source import Param

SHUFFLES = r"""
extern "C" __global__ void shuffles(const float* __restrict__ x, const int* __restrict__ xi,
                                    float* __restrict__ out, int width) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const int lane = threadIdx.x & 31;
  const float v = x[i];
  float* o = out + 8 * i;
  o[0] = __shfl_sync(0xffffffffu, v, (lane * 7 + 3) & 31);
  o[1] = __shfl_sync(0xffffffffu, v, lane + 5, width);
  o[2] = __shfl_up_sync(0xffffffffu, v, 3, width);
  o[3] = __shfl_down_sync(0xffffffffu, v, 2, width);
  o[4] = __shfl_xor_sync(0xffffffffu, v, 5, width);
  o[5] = (float)__shfl_xor_sync(0xffffffffu, xi[i], 16);
  o[6] = (float)__shfl_down_sync(0xffffffffu, (unsigned int)xi[i], 1);
  float s = v;
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) s += __shfl_xor_sync(0xffffffffu, s, offset);
  __syncwarp();
  o[7] = s;
}
"""


def _reference(x: np.ndarray, xi: np.ndarray, width: int) -> np.ndarray:
    out = np.empty((x.size, 8), np.float32)
    for w0 in range(0, x.size, 32):
        xs, ys = x[w0 : w0 + 32], xi[w0 : w0 + 32]
        for lane in range(32):
            base = lane & ~(width - 1)
            up, down, xor = lane - 3, lane + 2, lane ^ 5
            out[w0 + lane] = [
                xs[(lane * 7 + 3) & 31],
                xs[base + ((lane + 5) & (width - 1))],
                xs[up] if up >= base else xs[lane],
                xs[down] if down < base + width else xs[lane],
                xs[xor] if xor < base + width else xs[lane],  # earlier groups are readable, later ones not
                ys[lane ^ 16],
                ys[lane + 1] if lane < 31 else ys[lane],
                xs.astype(np.float64).sum(),
            ]
    return out


@pytest.mark.parametrize("width", [32, 16, 8, 4])
def test_shuffles_match_cuda_semantics(run_kernel, rng, width: int) -> None:
    n = 128
    x = rng.standard_normal(n).astype(np.float32)
    xi = rng.integers(0, 10_000, n).astype(np.int32)
    out = np.full(8 * n, np.nan, np.float32)
    params = [
        Param("x", "float32"),
        Param("xi", "int32"),
        Param("out", "float32"),
        Param("width", "int32", False),
    ]
    run_kernel(SHUFFLES, "shuffles", (2, 1, 1), (64, 1, 1), params, [x, xi, out, width])
    want = _reference(x, xi, width)
    got = out.reshape(n, 8)
    np.testing.assert_array_equal(got[:, :7], want[:, :7])
    np.testing.assert_allclose(got[:, 7], want[:, 7], rtol=1e-5)


WARP_SUM = r"""
extern "C" __global__ void __launch_bounds__(96) warp_sum(const float* __restrict__ x,
                                             float* __restrict__ y) {
  __shared__ float partial[3];
  const int t = threadIdx.x;
  float s = x[blockIdx.x * blockDim.x + t];
  for (int offset = 1; offset < 32; offset <<= 1) s += __shfl_down_sync(0xffffffffu, s, offset);
  if ((t & 31) == 0) partial[t >> 5] = s;
  __syncthreads();
  if (t == 0) y[blockIdx.x] = partial[0] + partial[1] + partial[2];
}
"""


def test_block_reduction_with_shuffles_and_shared_memory(run_kernel, rng) -> None:
    blocks = 7
    x = rng.standard_normal(blocks * 96).astype(np.float32)
    y = np.full(blocks, np.nan, np.float32)
    run_kernel(
        WARP_SUM,
        "warp_sum",
        (blocks, 1, 1),
        (96, 1, 1),
        [Param("x", "float32"), Param("y", "float32")],
        [x, y],
    )
    np.testing.assert_allclose(y, x.reshape(blocks, 96).sum(axis=1), rtol=1e-5, atol=1e-5)


PARTIAL_MASK = r"""
extern "C" __global__ void partial_mask(const float* __restrict__ x, float* __restrict__ y) {
  const int lane = threadIdx.x & 31;
  float v = x[threadIdx.x];
  if (lane < 16) v += __shfl_xor_sync(0x0000ffffu, v, 1);
  else v -= __shfl_down_sync(0xffff0000u, v, 2, 16);
  y[threadIdx.x] = v;
}
"""


def test_shuffles_among_a_subset_of_lanes(run_kernel, rng) -> None:
    x = rng.standard_normal(64).astype(np.float32)
    y = np.full(64, np.nan, np.float32)
    run_kernel(
        PARTIAL_MASK, "partial_mask", (1, 1, 1), (64, 1, 1), [Param("x", "float32"), Param("y", "float32")], [x, y]
    )
    want = np.empty(64, np.float32)
    for i in range(64):
        lane, w0 = i % 32, i - i % 32
        if lane < 16:
            want[i] = x[i] + x[w0 + (lane ^ 1)]
        else:
            src = lane + 2 if lane + 2 < 32 else lane
            want[i] = x[i] - x[w0 + src]
    np.testing.assert_array_equal(y, want)
