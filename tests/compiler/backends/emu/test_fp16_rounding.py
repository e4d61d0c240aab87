"""16-bit results rounded once: __hfma, __half(double), __nv_bfloat16(double) and __nv_bfloat16(int)
on inputs chosen where rounding to float first lands on a half-way point and ties the wrong way."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from compiler.source import Param

ROUND_ONCE = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
extern "C" __global__ void round_once(const __half* __restrict__ a, const __half* __restrict__ b,
                                      const __half* __restrict__ c, __half* __restrict__ fma_out,
                                      const float* __restrict__ hi, const float* __restrict__ lo,
                                      __half* __restrict__ half_of_double,
                                      __nv_bfloat16* __restrict__ bf16_of_double,
                                      const int* __restrict__ ints, __nv_bfloat16* __restrict__ bf16_of_int,
                                      int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  fma_out[i] = __hfma(a[i], b[i], c[i]);
  const double d = (double)hi[i] + (double)lo[i];
  half_of_double[i] = __half(d);
  bf16_of_double[i] = __nv_bfloat16(d);
  bf16_of_int[i] = __nv_bfloat16(ints[i]);
}
"""


def _bf16_bits(v: float) -> int:
    """Round a finite float64 to bfloat16 exactly (8 significant bits, subnormals from 2^-133, ties to even)."""
    if v == 0:
        return 0x8000 if math.copysign(1, v) < 0 else 0
    _, e = math.frexp(abs(v))
    lsb = max(e - 8, -133)
    q = Fraction(abs(v)) / Fraction(2) ** lsb
    n = math.floor(q)
    if q - n > Fraction(1, 2) or (q - n == Fraction(1, 2) and n % 2 == 1):
        n += 1
    mag = float(n * Fraction(2) ** lsb) if n * Fraction(2) ** lsb < 2**128 else math.inf
    bits = int(np.float32(mag).view(np.uint32)) >> 16
    return bits | (0x8000 if v < 0 else 0)


def _hfma_cases(rng: np.random.Generator, count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Triples whose exact a*b + c lies within float's last bit of a half-way point of half precision:
    a = 1 + i/1024 and b = 2^-12 (1 + j/1024) with a*b within 2^-24 of 2^-11, c in [1, 2). Rounded
    to float first, the sum ties, and ties to even go the wrong way about half of the time."""
    i, j = np.meshgrid(np.arange(1024, dtype=np.int64), np.arange(1024, dtype=np.int64), indexing="ij")
    off = (1024 + i) * (1024 + j) - (1 << 21)  # a*b - 2^-11 in units of 2^-32
    near = (off != 0) & (np.abs(off) < 256)
    pick = rng.choice(np.flatnonzero(near), count)
    ii, jj = i.ravel()[pick], j.ravel()[pick]
    sign = rng.choice([-1.0, 1.0], count)
    a = (sign * (1 + ii / 1024)).astype(np.float16)
    b = (2.0**-12 * (1 + jj / 1024)).astype(np.float16)
    c = (sign * (1 + rng.integers(0, 1023, count) / 1024)).astype(np.float16)
    return a, b, c


def test_sixteen_bit_results_are_rounded_once(run_kernel, rng) -> None:
    a, b, c = _hfma_cases(rng, 128)
    n = a.size
    # half midpoints (exact in float) plus a tail far below float's last bit
    h = (2.0 ** rng.integers(-10, 15, n) * (1 + rng.integers(0, 1024, n) / 1024)).astype(np.float16).astype(np.float64)
    hi_half = h + np.spacing(h.astype(np.float16)).astype(np.float64) / 2
    g = (2.0 ** rng.integers(-100, 100, n) * (1 + rng.integers(0, 128, n) / 128)).astype(np.float64)
    hi_bf16 = g + np.exp2(np.floor(np.log2(g)) - 8)  # bfloat16 midpoints
    use_half = np.arange(n) % 2 == 0
    hi = np.where(use_half, hi_half, hi_bf16) * rng.choice([-1.0, 1.0], n)
    lo = hi * 2.0**-30 * rng.choice([-1.0, 1.0], n)
    hi, lo = hi.astype(np.float32), lo.astype(np.float32)
    e = rng.integers(24, 31, n).astype(np.int64)
    mid = (np.int64(1) << e) + (2 * rng.integers(0, 128, n) + 1) * (np.int64(1) << (e - 8))  # bfloat16 midpoints
    ints = ((mid + rng.choice([-1, 1], n)) * rng.choice([-1, 1], n)).astype(np.int32)
    fma_out = np.full(n, np.nan, np.float16)
    half_of_double = np.full(n, np.nan, np.float16)
    bf16_of_double = np.full(n, 0x7FFF, np.uint16)
    bf16_of_int = np.full(n, 0x7FFF, np.uint16)
    params = [
        Param("a", "float16"),
        Param("b", "float16"),
        Param("c", "float16"),
        Param("fma_out", "float16"),
        Param("hi", "float32"),
        Param("lo", "float32"),
        Param("half_of_double", "float16"),
        Param("bf16_of_double", "bfloat16"),
        Param("ints", "int32"),
        Param("bf16_of_int", "bfloat16"),
        Param("n", "int32", False),
    ]
    args = [a, b, c, fma_out, hi, lo, half_of_double, bf16_of_double, ints, bf16_of_int, n]
    run_kernel(ROUND_ONCE, "round_once", (1, 1, 1), (n, 1, 1), params, args)
    exact_fma = a.astype(np.float64) * b.astype(np.float64) + c.astype(np.float64)
    np.testing.assert_array_equal(fma_out.view(np.uint16), exact_fma.astype(np.float16).view(np.uint16))
    d = hi.astype(np.float64) + lo.astype(np.float64)
    with np.errstate(over="ignore"):  # the bfloat16 cases overflow half: infinity on both sides
        half_d, half_via_float = d.astype(np.float16), d.astype(np.float32).astype(np.float16)
    np.testing.assert_array_equal(half_of_double.view(np.uint16), half_d.view(np.uint16))
    np.testing.assert_array_equal(bf16_of_double, np.array([_bf16_bits(float(v)) for v in d], np.uint16))
    np.testing.assert_array_equal(bf16_of_int, np.array([_bf16_bits(float(v)) for v in ints], np.uint16))
    # the inputs do test something: rounding through float would have changed these results
    assert (exact_fma.astype(np.float32).astype(np.float16) != exact_fma.astype(np.float16)).sum() > n // 8
    assert (half_via_float != half_d).sum() > n // 8
    via_float = np.array([_bf16_bits(float(np.float32(v))) for v in ints], np.uint16)
    assert (via_float != bf16_of_int).sum() > n // 8
