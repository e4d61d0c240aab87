"""Hand-written CUDA kernels that exercise the emulator in tests and benchmarks.

``tiled_matmul`` is the classic shared-memory SIMT matmul: a block computes a ``bm x bn`` tile of C
with ``(bm / tm) * (bn / tn)`` threads, each holding a ``tm x tn`` register tile; A and B tiles of
depth ``bk`` are staged through shared memory between two barriers. Edges are guarded, so any
``M, N, K`` works.

Example::

    >>> k = tiled_matmul(256, 256, 256)            # 64x64 tiles, 256 threads, 4x4 per thread
    >>> k.grid, k.block
    ((4, 4, 1), (256, 1, 1))
"""

from __future__ import annotations

from compiler.source import KernelSource, Param

_MATMUL = r"""
extern "C" __global__ void __launch_bounds__({threads}) {name}(const float* __restrict__ A,
    const float* __restrict__ B, float* __restrict__ C, int M, int N, int K) {{
  __shared__ __align__(16) float As[{bk}][{bm}];
  __shared__ __align__(16) float Bs[{bk}][{bn}];
  const int tid = threadIdx.x;
  const int tx = tid % {cols};
  const int ty = tid / {cols};
  const int m0 = blockIdx.y * {bm};
  const int n0 = blockIdx.x * {bn};
  float acc[{tm}][{tn}];
#pragma unroll
  for (int i = 0; i < {tm}; ++i)
#pragma unroll
    for (int j = 0; j < {tn}; ++j) acc[i][j] = 0.0f;
  for (int k0 = 0; k0 < K; k0 += {bk}) {{
    for (int idx = tid; idx < {bm} * {bk}; idx += {threads}) {{
      const int m = idx / {bk}, k = idx % {bk};
      const int gm = m0 + m, gk = k0 + k;
      As[k][m] = (gm < M && gk < K) ? A[gm * K + gk] : 0.0f;
    }}
    for (int idx = tid; idx < {bk} * {bn}; idx += {threads}) {{
      const int k = idx / {bn}, n = idx % {bn};
      const int gk = k0 + k, gn = n0 + n;
      Bs[k][n] = (gk < K && gn < N) ? B[gk * N + gn] : 0.0f;
    }}
    __syncthreads();
#pragma unroll
    for (int k = 0; k < {bk}; ++k) {{
      float a[{tm}], b[{tn}];
#pragma unroll
      for (int i = 0; i < {tm}; ++i) a[i] = As[k][ty * {tm} + i];
#pragma unroll
      for (int j = 0; j < {tn}; ++j) b[j] = Bs[k][tx * {tn} + j];
#pragma unroll
      for (int i = 0; i < {tm}; ++i)
#pragma unroll
        for (int j = 0; j < {tn}; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }}
    __syncthreads();
  }}
#pragma unroll
  for (int i = 0; i < {tm}; ++i)
#pragma unroll
    for (int j = 0; j < {tn}; ++j) {{
      const int gm = m0 + ty * {tm} + i, gn = n0 + tx * {tn} + j;
      if (gm < M && gn < N) C[gm * N + gn] = acc[i][j];
    }}
}}
"""

MATMUL_PARAMS = (
    Param("A", "float32"),
    Param("B", "float32"),
    Param("C", "float32"),
    Param("M", "int32", pointer=False),
    Param("N", "int32", pointer=False),
    Param("K", "int32", pointer=False),
)


def tiled_matmul(
    m: int, n: int, k: int, *, bm: int = 64, bn: int = 64, bk: int = 16, tm: int = 4, tn: int = 4
) -> KernelSource:
    """C[m, n] = A[m, k] @ B[k, n] (row-major f32); launch with arguments ``(A, B, C, m, n, k)``."""
    if bm % tm or bn % tn:
        raise ValueError(f"tile {bm}x{bn} is not a multiple of the register tile {tm}x{tn}")
    threads = (bm // tm) * (bn // tn)
    if not 32 <= threads <= 1024:
        raise ValueError(
            f"tile {bm}x{bn} with register tile {tm}x{tn} gives {threads} threads, not in [32, 1024]"
        )
    name = f"matmul_f32_{bm}x{bn}x{bk}_{tm}x{tn}"
    source = _MATMUL.format(name=name, threads=threads, bm=bm, bn=bn, bk=bk, tm=tm, tn=tn, cols=bn // tn)
    grid = (-(-n // bn), -(-m // bm), 1)
    return KernelSource(name, source, grid, (threads, 1, 1), MATMUL_PARAMS)
