"""Indices, shared memory, vector types, atomics and argument passing, each against numpy."""

from __future__ import annotations

import numpy as np
import pytest

from compiler.backends import emu
from compiler.source import KernelSource, Param

INDEX_3D = r"""
extern "C" __global__ void index3d(int* __restrict__ out) {
  const int t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const int b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  int* o = out + 8 * (b * blockDim.x * blockDim.y * blockDim.z + t);
  o[0] = threadIdx.x; o[1] = threadIdx.y; o[2] = threadIdx.z;
  o[3] = blockIdx.x; o[4] = blockIdx.y; o[5] = blockIdx.z;
  o[6] = blockDim.x * 100 + blockDim.y * 10 + blockDim.z;
  o[7] = gridDim.x * 100 + gridDim.y * 10 + gridDim.z;
}
"""


def test_three_dimensional_indices(run_kernel) -> None:
    grid, block = (3, 2, 2), (4, 3, 2)
    nthreads = 12 * 24
    out = np.full(nthreads * 8, -1, np.int32)
    run_kernel(INDEX_3D, "index3d", grid, block, [Param("out", "int32")], [out])
    want = []
    for bz in range(2):
        for by in range(2):
            for bx in range(3):
                for tz in range(2):
                    for ty in range(3):
                        for tx in range(4):
                            want.append([tx, ty, tz, bx, by, bz, 432, 322])
    np.testing.assert_array_equal(out.reshape(-1, 8), np.array(want))


SHARED = r"""
extern "C" __global__ void __launch_bounds__(128) shared_mix(const float* __restrict__ x,
                                             float* __restrict__ y) {
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ __align__(16) float tile[2][128];
  __shared__ float bias;
  float* dyn = reinterpret_cast<float*>(smem);
  const int t = threadIdx.x, base = blockIdx.x * blockDim.x;
  if (t == 0) bias = (float)blockIdx.x;
  dyn[t] = x[base + t];
  tile[1][t] = 2.0f * x[base + t];
  __syncthreads();
  y[base + t] = dyn[blockDim.x - 1 - t] + tile[1][(t + 1) % 128] + bias;
}
"""


def test_static_and_dynamic_shared_memory_are_private_to_each_block(run_kernel, rng) -> None:
    blocks = 9
    x = rng.standard_normal(blocks * 128).astype(np.float32)
    y = np.full_like(x, np.nan)
    params = [Param("x", "float32"), Param("y", "float32")]
    run_kernel(SHARED, "shared_mix", (blocks, 1, 1), (128, 1, 1), params, [x, y], shared_bytes=128 * 4)
    xb = x.reshape(blocks, 128)
    want = xb[:, ::-1] + 2.0 * np.roll(xb, -1, axis=1) + np.arange(blocks, dtype=np.float32)[:, None]
    np.testing.assert_allclose(y.reshape(blocks, 128), want, rtol=1e-6)


VECTORS = r"""
#include <cuda_fp16.h>
extern "C" __global__ void vectors(const float* __restrict__ x, float* __restrict__ y,
                                   const int* __restrict__ a,
                                   int* __restrict__ b, const __half* __restrict__ h, float* __restrict__ hf,
                                   unsigned int* __restrict__ u) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const float4 v = reinterpret_cast<const float4*>(x)[i];
  *reinterpret_cast<float4*>(y + 4 * i) = make_float4(v.w, v.z * 2.0f, v.y, v.x + 1.0f);
  const int4 q = reinterpret_cast<const int4*>(a)[i];
  reinterpret_cast<int4*>(b)[i] = make_int4(q.y, q.x, q.w ^ 5, q.z);
  const __half2 hh = reinterpret_cast<const __half2*>(h)[i];
  reinterpret_cast<float2*>(hf)[i] = __half22float2(hh);
  const uint2 p = reinterpret_cast<const uint2*>(a)[i];
  reinterpret_cast<uint4*>(u)[i] = make_uint4(p.x + 1u, p.y, p.x, p.y * 3u);
  const int2 r = reinterpret_cast<const int2*>(a)[i];
  const float2 s = reinterpret_cast<const float2*>(x)[i];
  hf[2 * gridDim.x * blockDim.x + i] = s.x * (float)r.y + s.y;
}
"""


def test_vector_loads_and_stores(run_kernel, rng) -> None:
    n = 256
    x = rng.standard_normal(4 * n).astype(np.float32)
    a = rng.integers(-1000, 1000, 4 * n).astype(np.int32)
    h = rng.standard_normal(2 * n).astype(np.float16)
    y = np.full(4 * n, np.nan, np.float32)
    b = np.full(4 * n, -7, np.int32)
    hf = np.full(3 * n, np.nan, np.float32)
    u = np.zeros(4 * n, np.uint32)
    params = [
        Param("x", "float32"),
        Param("y", "float32"),
        Param("a", "int32"),
        Param("b", "int32"),
        Param("h", "float16"),
        Param("hf", "float32"),
        Param("u", "uint32"),
    ]
    run_kernel(VECTORS, "vectors", (4, 1, 1), (64, 1, 1), params, [x, y, a, b, h, hf, u])
    xv, av = x.reshape(n, 4), a.reshape(n, 4)
    np.testing.assert_array_equal(y.reshape(n, 4), np.stack([xv[:, 3], xv[:, 2] * 2, xv[:, 1], xv[:, 0] + 1], 1))
    np.testing.assert_array_equal(b.reshape(n, 4), np.stack([av[:, 1], av[:, 0], av[:, 3] ^ 5, av[:, 2]], 1))
    np.testing.assert_array_equal(hf[: 2 * n], h.astype(np.float32))
    p = a.view(np.uint32).reshape(-1, 2)[:n]
    np.testing.assert_array_equal(u.reshape(n, 4), np.stack([p[:, 0] + 1, p[:, 1], p[:, 0], p[:, 1] * 3], 1))
    s, r = x.reshape(-1, 2)[:n], a.reshape(-1, 2)[:n]
    np.testing.assert_allclose(hf[2 * n :], s[:, 0] * r[:, 1].astype(np.float32) + s[:, 1], rtol=1e-6)


ATOMICS = r"""
extern "C" __global__ void atomics(const int* __restrict__ x, const float* __restrict__ f,
                                   int* __restrict__ isum,
                                   unsigned int* __restrict__ usum, float* __restrict__ fsum,
                                     int* __restrict__ imax,
                                   unsigned int* __restrict__ umax, int* __restrict__ hist) {
  __shared__ int local[8];
  const int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
  if (t < 8) local[t] = 0;
  __syncthreads();
  atomicAdd(isum, x[i]);
  atomicAdd(usum, (unsigned int)(x[i] & 0xff));
  atomicAdd(fsum, f[i]);
  atomicMax(imax, x[i]);
  atomicMax(umax, (unsigned int)x[i]);
  atomicAdd(&local[x[i] & 7], 1);
  __syncthreads();
  if (t < 8) atomicAdd(&hist[t], local[t]);
}
"""


def test_atomics_on_global_and_shared_memory(run_kernel, rng) -> None:
    n = 64 * 24
    x = rng.integers(-(2**20), 2**20, n).astype(np.int32)
    f = rng.integers(-50, 50, n).astype(np.float32)  # integer-valued: any summation order is exact
    isum, usum, imax = (np.zeros(1, np.int32), np.zeros(1, np.uint32), np.full(1, -(2**31), np.int32))
    fsum, umax, hist = np.zeros(1, np.float32), np.zeros(1, np.uint32), np.zeros(8, np.int32)
    params = [
        Param("x", "int32"),
        Param("f", "float32"),
        Param("isum", "int32"),
        Param("usum", "uint32"),
        Param("fsum", "float32"),
        Param("imax", "int32"),
        Param("umax", "uint32"),
        Param("hist", "int32"),
    ]
    run_kernel(ATOMICS, "atomics", (24, 1, 1), (64, 1, 1), params, [x, f, isum, usum, fsum, imax, umax, hist])
    assert isum[0] == x.sum()
    assert usum[0] == (x & 0xFF).sum()
    assert fsum[0] == f.sum()
    assert imax[0] == x.max()
    assert umax[0] == x.view(np.uint32).max()
    np.testing.assert_array_equal(hist, np.bincount(x & 7, minlength=8))


SCALARS = r"""
extern "C" __global__ void scalars(float* __restrict__ y, int n, unsigned int u, float s,
                                   bool* __restrict__ flag) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = s * (float)i + (float)(u % 7u) + fminf(fabsf(-s), 2.0f) + rsqrtf(4.0f) + (float)max(i, 3);
  if (i == 0) flag[0] = !flag[0];
}
"""


def test_scalar_arguments_and_math(run_kernel) -> None:
    n = 100
    y = np.full(128, np.nan, np.float32)
    flag = np.array([True, False])
    params = [
        Param("y", "float32"),
        Param("n", "int32", False),
        Param("u", "uint32", False),
        Param("s", "float32", False),
        Param("flag", "bool"),
    ]
    run_kernel(SCALARS, "scalars", (2, 1, 1), (64, 1, 1), params, [y, n, 4_000_000_005, 1.5, flag])
    i = np.arange(n, dtype=np.float32)
    want = 1.5 * i + np.float32(4_000_000_005 % 7) + 1.5 + 0.5 + np.maximum(i, 3)
    np.testing.assert_allclose(y[:n], want, rtol=1e-6)
    assert np.isnan(y[n:]).all()
    assert not flag[0] and not flag[1]


def test_arguments_are_checked_against_parameters(emu_config) -> None:
    k = KernelSource(
        "scalars",
        SCALARS,
        (1, 1, 1),
        (32, 1, 1),
        (
            Param("y", "float32"),
            Param("n", "int32", False),
            Param("u", "uint32", False),
            Param("s", "float32", False),
            Param("flag", "bool"),
        ),
    )
    y, flag = np.zeros(32, np.float32), np.zeros(1, bool)
    with pytest.raises(emu.EmulationArgumentError, match="expected 5 arguments"):
        emu.run(k, [y, 1], config=emu_config)
    with pytest.raises(emu.EmulationArgumentError, match="'y' needs a numpy array of float32"):
        emu.run(k, [y.astype(np.float64), 1, 2, 3.0, flag], config=emu_config)
    with pytest.raises(emu.EmulationArgumentError, match="'u': -1 does not fit uint32"):
        emu.run(k, [y, 1, -1, 3.0, flag], config=emu_config)
    with pytest.raises(emu.EmulationArgumentError, match="'n' is a int32 scalar"):
        emu.run(k, [y, y, 1, 3.0, flag], config=emu_config)


def test_blocks_larger_than_cuda_allows_are_rejected(emu_config) -> None:
    k = KernelSource(
        "scalars",
        SCALARS,
        (1, 1, 1),
        (32, 33, 1),
        (
            Param("y", "float32"),
            Param("n", "int32", False),
            Param("u", "uint32", False),
            Param("s", "float32", False),
            Param("flag", "bool"),
        ),
    )
    with pytest.raises(emu.EmulationArgumentError, match=r"block \(32, 33, 1\) has 1056 threads"):
        emu.run(k, [np.zeros(4, np.float32), 1, 2, 3.0, np.zeros(1, bool)], config=emu_config)


REUSE = r"""
extern "C" __global__ void reuse(const float* __restrict__ x, float* __restrict__ y) {
  __shared__ float s[64];
  const int t = threadIdx.x;
  s[t] = x[t];
  __syncthreads();
  const float a = s[t ^ 1];
  __syncthreads();
  s[t] = 2.0f * a;  // this thread never reads s[t] again: only other threads see the store
  __syncthreads();
  y[t] = s[t ^ 2];
}
"""


def test_shared_stores_read_only_by_other_threads_survive_optimisation(run_kernel, rng) -> None:
    # The host compiler must treat a barrier as reading and writing every __shared__ array; otherwise
    # the second store to s[t] looks dead (this thread never reads it back).
    x = rng.standard_normal(64).astype(np.float32)
    y = np.full(64, np.nan, np.float32)
    run_kernel(REUSE, "reuse", (1, 1, 1), (64, 1, 1), [Param("x", "float32"), Param("y", "float32")], [x, y])
    t = np.arange(64)
    np.testing.assert_array_equal(y, 2.0 * x[(t ^ 2) ^ 1])


SHIFT = r"""
extern "C" __global__ void shift(const float* x, float* y, int n) {
  // Each block reads the element the previous block wrote: only aliased buffers see the writes.
  for (int b = 0; b < n; ++b) {
    if (blockIdx.x == 0 && threadIdx.x == 0) y[b + 1] = x[b] + 1.0f;
  }
}
"""
SHIFT_PARAMS = (Param("x", "float32"), Param("y", "float32"), Param("n", "int32", False))


def test_the_same_array_passed_twice_is_one_buffer_as_on_the_gpu(emu_config) -> None:
    kernel = KernelSource("shift", SHIFT, (1, 1, 1), (32, 1, 1), SHIFT_PARAMS)
    a = np.zeros(9, np.float32)
    emu.run(kernel, [a, a, 8], config=emu_config)  # in place: y[b + 1] = y[b] + 1 sees its own writes
    np.testing.assert_array_equal(a, np.arange(9, dtype=np.float32))
    x, y = np.zeros(9, np.float32), np.full(9, np.nan, np.float32)
    emu.run(kernel, [x, y, 8], config=emu_config)  # disjoint arrays: every read sees the zeros
    np.testing.assert_array_equal(y[1:], np.ones(8, np.float32))
    interleaved = np.zeros(18, np.float32)  # disjoint views of one array stay two buffers
    emu.run(kernel, [interleaved[::2], interleaved[1::2], 8], config=emu_config)
    np.testing.assert_array_equal(interleaved[1::2][1:], np.ones(8, np.float32))


def test_arrays_that_overlap_in_part_are_refused(emu_config) -> None:
    kernel = KernelSource("shift", SHIFT, (1, 1, 1), (32, 1, 1), SHIFT_PARAMS)
    a = np.zeros(10, np.float32)
    with pytest.raises(emu.EmulationArgumentError, match="'x' and 'y' overlap in part"):
        emu.run(kernel, [a[:9], a[1:], 8], config=emu_config)


BLOCK_ID = r"""
extern "C" __global__ void block_id(float* __restrict__ y) {
  y[(blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x] = blockIdx.x + 10 * blockIdx.y + 100 * blockIdx.z;
}
"""


def test_a_launch_may_run_only_some_blocks_of_its_grid(run_kernel) -> None:
    grid = (5, 3, 2)
    y = np.full(30, np.nan, np.float32)
    run_kernel(BLOCK_ID, "block_id", grid, (1, 1, 1), [Param("y", "float32")], [y], blocks=[29, 0, 7, 7])
    assert np.isnan(np.delete(y, [0, 7, 29])).all()
    np.testing.assert_array_equal(y[[0, 7, 29]], [0, 2 + 10 * 1, 4 + 10 * 2 + 100 * 1])
    for bad in ([], [30], [-1]):
        with pytest.raises(emu.EmulationArgumentError, match=r"blocks must be a non-empty subset of 0\.\.29"):
            run_kernel(BLOCK_ID, "block_id", grid, (1, 1, 1), [Param("y", "float32")], [y], blocks=bad)
