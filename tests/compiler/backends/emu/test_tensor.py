"""mma.m16n8k16 (f16, bf16), ldmatrix x1/x2/x4 with and without .trans, and a cp.async pipeline, each
through warpmap/prims.cuh and against numpy. The mma and ldmatrix fragment layouts are those of the
PTX ISA; the combined test loads fragments with ldmatrix the way real kernels do and feeds them to
mma, so the two layouts must agree with each other as well as with the ISA."""

from __future__ import annotations

import numpy as np
import pytest

from compiler.source import Param

MMA = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include "warpmap/prims.cuh"
static __device__ __forceinline__ unsigned pack(const unsigned short* m, int i, int j) {
  return (unsigned)m[i] | ((unsigned)m[j] << 16);
}
extern "C" __global__ void mma_{T}(const {CT}* __restrict__ A_, const {CT}* __restrict__ B_,
                                   const float* __restrict__ C, float* __restrict__ D) {
  const int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
  // A: 16x16 row-major; B: 16x8 (k x n) row-major; one pair per warp
  const unsigned short* A = reinterpret_cast<const unsigned short*>(A_) + warp * 256;
  const unsigned short* B = reinterpret_cast<const unsigned short*>(B_) + warp * 128;
  const float* c = C + warp * 128;
  float* d = D + warp * 128;
  const int g = lane >> 2, t = lane & 3;
  unsigned a[4], b[2];
  a[0] = pack(A, g * 16 + 2 * t, g * 16 + 2 * t + 1);
  a[1] = pack(A, (g + 8) * 16 + 2 * t, (g + 8) * 16 + 2 * t + 1);
  a[2] = pack(A, g * 16 + 2 * t + 8, g * 16 + 2 * t + 9);
  a[3] = pack(A, (g + 8) * 16 + 2 * t + 8, (g + 8) * 16 + 2 * t + 9);
  b[0] = pack(B, (2 * t) * 8 + g, (2 * t + 1) * 8 + g);
  b[1] = pack(B, (2 * t + 8) * 8 + g, (2 * t + 9) * 8 + g);
  float acc[4] = {c[g * 8 + 2 * t], c[g * 8 + 2 * t + 1], c[(g + 8) * 8 + 2 * t], c[(g + 8) * 8 + 2 * t + 1]};
  wm_mma_m16n8k16_{T}(acc, a, b, acc);
  d[g * 8 + 2 * t] = acc[0]; d[g * 8 + 2 * t + 1] = acc[1];
  d[(g + 8) * 8 + 2 * t] = acc[2]; d[(g + 8) * 8 + 2 * t + 1] = acc[3];
}
"""


def _bf16_bits(x: np.ndarray) -> np.ndarray:
    return ((x.astype(np.float32).view(np.uint32) + 0x8000) >> 16).astype(np.uint16)  # values here never tie


def _bf16_value(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


@pytest.mark.parametrize("kind", ["f16", "bf16"])
def test_mma_m16n8k16_matches_numpy(run_kernel, rng, kind: str) -> None:
    warps = 4
    a = rng.standard_normal((warps, 16, 16)).astype(np.float32)
    b = rng.standard_normal((warps, 16, 8)).astype(np.float32)
    c = rng.standard_normal((warps, 16, 8)).astype(np.float32)
    if kind == "f16":
        a_in, b_in = a.astype(np.float16), b.astype(np.float16)
        a_val, b_val, ctype, dtype = a_in.astype(np.float64), b_in.astype(np.float64), "__half", "float16"
    else:
        a_in, b_in = _bf16_bits(a), _bf16_bits(b)
        a_val, b_val = _bf16_value(a_in).astype(np.float64), _bf16_value(b_in).astype(np.float64)
        ctype, dtype = "__nv_bfloat16", "bfloat16"
    d = np.full((warps, 16, 8), np.nan, np.float32)
    src = MMA.replace("{T}", kind).replace("{CT}", ctype)
    params = [Param("A", dtype), Param("B", dtype), Param("C", "float32"), Param("D", "float32")]
    run_kernel(src, f"mma_{kind}", (2, 1, 1), (64, 1, 1), params, [a_in, b_in, c, d])
    np.testing.assert_allclose(d, a_val @ b_val + c, rtol=1e-5, atol=1e-5)


LDMATRIX = r"""
#include "warpmap/prims.cuh"
extern "C" __global__ void ldm(const float* __restrict__ src, unsigned int* __restrict__ out) {
  __shared__ __align__(16) unsigned short tile[4][8][16];  // four 8x8 matrices, rows padded to 32 bytes
  const int lane = threadIdx.x;
  const unsigned short* s = reinterpret_cast<const unsigned short*>(src);
  for (int i = lane; i < 4 * 8 * 8; i += 32) tile[i / 64][(i / 8) % 8][i % 8] = s[i];
  __syncwarp();
  const void* row = &tile[lane / 8][lane % 8][0];
  unsigned r1[1], r2[2], r4[4], t1[1], t2[2], t4[4];
  wm_ldmatrix_x1(r1, row); wm_ldmatrix_x2(r2, row); wm_ldmatrix_x4(r4, row);
  wm_ldmatrix_x1_trans(t1, row); wm_ldmatrix_x2_trans(t2, row); wm_ldmatrix_x4_trans(t4, row);
  unsigned* o = out + lane * 14;
  o[0] = r1[0]; o[1] = r2[0]; o[2] = r2[1];
  for (int i = 0; i < 4; ++i) o[3 + i] = r4[i];
  o[7] = t1[0]; o[8] = t2[0]; o[9] = t2[1];
  for (int i = 0; i < 4; ++i) o[10 + i] = t4[i];
}
"""


def test_ldmatrix_thread_to_row_mapping(run_kernel, rng) -> None:
    mats = rng.integers(0, 2**16, (4, 8, 8), dtype=np.uint64).astype(np.uint16)
    src = mats.reshape(-1).view(np.float32)  # 16-bit patterns travel as raw bytes
    out = np.zeros(32 * 14, np.uint32)
    run_kernel(LDMATRIX, "ldm", (1, 1, 1), (32, 1, 1), [Param("src", "float32"), Param("out", "uint32")], [src, out])
    lane = np.arange(32)
    r, c = lane // 4, 2 * (lane % 4)

    def frag(m: int) -> np.ndarray:
        return mats[m, r, c].astype(np.uint32) | mats[m, r, c + 1].astype(np.uint32) << 16

    def frag_t(m: int) -> np.ndarray:
        return mats[m, c, r].astype(np.uint32) | mats[m, c + 1, r].astype(np.uint32) << 16

    want = np.stack(
        [
            frag(0),
            frag(0),
            frag(1),
            *(frag(m) for m in range(4)),
            frag_t(0),
            frag_t(0),
            frag_t(1),
            *(frag_t(m) for m in range(4)),
        ],
        axis=1,
    )
    np.testing.assert_array_equal(out.reshape(32, 14), want)


LDMATRIX_MMA = r"""
#include <cuda_fp16.h>
#include "warpmap/prims.cuh"
extern "C" __global__ void ldm_mma(const __half* __restrict__ A, const __half* __restrict__ B,
                                   float* __restrict__ D) {
  __shared__ __align__(16) __half As[16][24];   // 16x16 tile, rows padded to 48 bytes
  __shared__ __align__(16) __half Bs[16][16];   // 16x8 (k x n) tile, rows padded to 32 bytes
  const int lane = threadIdx.x;
  for (int i = lane; i < 256; i += 32) As[i / 16][i % 16] = A[i];
  for (int i = lane; i < 128; i += 32) Bs[i / 8][i % 8] = B[i];
  __syncwarp();
  unsigned a[4], b[2];
  wm_ldmatrix_x4(a, &As[lane % 16][(lane / 16) * 8]);   // matrices: rows 0-7|8-15 x cols 0-7, then cols 8-15
  wm_ldmatrix_x2_trans(b, &Bs[lane % 16][0]);            // k rows 0-7, then 8-15
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  wm_mma_m16n8k16_f16(acc, a, b, acc);
  const int g = lane >> 2, t = lane & 3;
  D[g * 8 + 2 * t] = acc[0]; D[g * 8 + 2 * t + 1] = acc[1];
  D[(g + 8) * 8 + 2 * t] = acc[2]; D[(g + 8) * 8 + 2 * t + 1] = acc[3];
}
"""


def test_ldmatrix_fragments_feed_mma(run_kernel, rng) -> None:
    a = rng.standard_normal((16, 16)).astype(np.float16)
    b = rng.standard_normal((16, 8)).astype(np.float16)
    d = np.full((16, 8), np.nan, np.float32)
    params = [Param("A", "float16"), Param("B", "float16"), Param("D", "float32")]
    run_kernel(LDMATRIX_MMA, "ldm_mma", (1, 1, 1), (32, 1, 1), params, [a, b, d])
    np.testing.assert_allclose(d, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5, atol=1e-5)


PIPELINE = r"""
#include "warpmap/prims.cuh"
#define STAGES 3
extern "C" __global__ void __launch_bounds__(64) pipeline(const float* __restrict__ x,
                                             float* __restrict__ y, int n) {
  __shared__ __align__(16) float buf[STAGES][256];
  const int t = threadIdx.x;
  const int tiles = (n + 255) / 256;
  float acc = 0.0f;
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < tiles) {
      const int g = s * 256 + 4 * t, left = n - g;
      const int bytes = left >= 4 ? 16 : (left > 0 ? 4 * left : 0);
      wm_cp_async_16(&buf[s][4 * t], x + (bytes ? g : 0), bytes);
    }
    wm_cp_async_commit();
  }
  for (int s = 0; s < tiles; ++s) {
    const int next = s + STAGES - 1;
    if (next < tiles) {
      const int g = next * 256 + 4 * t, left = n - g;
      const int bytes = left >= 4 ? 16 : (left > 0 ? 4 * left : 0);
      wm_cp_async_16(&buf[next % STAGES][4 * t], x + (bytes ? g : 0), bytes);
    }
    wm_cp_async_commit();
    wm_cp_async_wait<STAGES - 1>();
    __syncthreads();
    acc += buf[s % STAGES][(4 * t + 5 + blockIdx.x) % 256] * (float)(s + 1);
    __syncthreads();
  }
  y[blockIdx.x * 64 + t] = acc;
}
"""


@pytest.mark.parametrize("n", [1024, 1003, 250])
def test_cp_async_multistage_pipeline_with_zero_fill(run_kernel, rng, n: int) -> None:
    blocks = 3
    x = rng.standard_normal(n).astype(np.float32)
    y = np.full(blocks * 64, np.nan, np.float32)
    params = [Param("x", "float32"), Param("y", "float32"), Param("n", "int32", False)]
    run_kernel(PIPELINE, "pipeline", (blocks, 1, 1), (64, 1, 1), params, [x, y, n])
    tiles = -(-n // 256)
    padded = np.zeros(tiles * 256, np.float32)
    padded[:n] = x
    t = np.arange(64)
    for blk in range(blocks):
        want = sum(padded[s * 256 + (4 * t + 5 + blk) % 256] * (s + 1) for s in range(tiles))
        np.testing.assert_allclose(y[blk * 64 : (blk + 1) * 64], want, rtol=1e-5, atol=1e-5)


ASYNC_VISIBILITY = r"""
#include "warpmap/prims.cuh"
extern "C" __global__ void visibility(const float* __restrict__ x, float* __restrict__ y) {
  __shared__ __align__(16) float s[32][4];
  const int t = threadIdx.x;
  s[t][0] = -1.0f;
  wm_cp_async_16(&s[t][0], x + 4 * t, 16);
  wm_cp_async_commit();
  y[3 * t] = s[t][0];             // the copy is still in flight
  wm_cp_async_wait<1>();          // one group may stay pending: still nothing
  y[3 * t + 1] = s[t][0];
  wm_cp_async_wait<0>();
  y[3 * t + 2] = s[t][0];
}
"""


def test_cp_async_data_arrives_only_at_the_wait(run_kernel, rng) -> None:
    x = rng.standard_normal(128).astype(np.float32)
    y = np.full(96, np.nan, np.float32)
    run_kernel(
        ASYNC_VISIBILITY,
        "visibility",
        (1, 1, 1),
        (32, 1, 1),
        [Param("x", "float32"), Param("y", "float32")],
        [x, y],
    )
    np.testing.assert_array_equal(y.reshape(32, 3), np.stack([np.full(32, -1.0), np.full(32, -1.0), x[0::4]], 1))


SMALL_COPIES = r"""
#include "warpmap/prims.cuh"
extern "C" __global__ void small_copies(const float* __restrict__ x, float* __restrict__ y) {
  __shared__ __align__(16) float s[32][4];
  const int t = threadIdx.x;
  for (int i = 0; i < 4; ++i) s[t][i] = -1.0f;
  wm_cp_async_8(&s[t][0], x + 2 * t, (t % 3) * 4);  // 0, 4 or 8 bytes from x, zeros after
  wm_cp_async_4(&s[t][2], x + 64 + t, t % 2 ? 4 : 0);
  wm_cp_async_commit();
  wm_cp_async_wait<0>();
  for (int i = 0; i < 4; ++i) y[4 * t + i] = s[t][i];
}
"""


def test_cp_async_4_and_8_bytes_with_partial_sources(run_kernel, rng) -> None:
    x = rng.standard_normal(96).astype(np.float32)
    y = np.full(128, np.nan, np.float32)
    run_kernel(
        SMALL_COPIES, "small_copies", (1, 1, 1), (32, 1, 1), [Param("x", "float32"), Param("y", "float32")], [x, y]
    )
    want = np.full((32, 4), -1.0, np.float32)
    for t in range(32):
        want[t, :2] = [x[2 * t] if t % 3 >= 1 else 0.0, x[2 * t + 1] if t % 3 == 2 else 0.0]
        want[t, 2] = x[64 + t] if t % 2 else 0.0
    np.testing.assert_array_equal(y.reshape(32, 4), want)
