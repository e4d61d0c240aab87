"""__half and __nv_bfloat16: conversions bit-exact with round-to-nearest-even (numpy float16 and an
independent bfloat16 reference), including subnormals, overflow, infinities and NaN; arithmetic."""

from __future__ import annotations

import numpy as np

from compiler.source import Param

CONVERT = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
extern "C" __global__ void convert(const float* __restrict__ x, __half* __restrict__ h,
                                   __nv_bfloat16* __restrict__ b,
                                   float* __restrict__ back, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const __half hv = __float2half_rn(x[i]);
  const __nv_bfloat16 bv = __float2bfloat16_rn(x[i]);
  h[i] = hv;
  b[i] = bv;
  back[2 * i] = __half2float(hv);
  back[2 * i + 1] = __bfloat162float(bv);
}
"""

ARITH = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
extern "C" __global__ void arith(const __half* __restrict__ ha, const __half* __restrict__ hb,
                                 __half* __restrict__ hout,
                                 const __nv_bfloat16* __restrict__ ba, const __nv_bfloat16* __restrict__ bb,
                                 __nv_bfloat16* __restrict__ bout, int* __restrict__ cmp, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const __half a = ha[i], b = hb[i];
  hout[4 * i] = a + b; hout[4 * i + 1] = a - b; hout[4 * i + 2] = a * b; hout[4 * i + 3] = a / b;
  const __nv_bfloat16 c = ba[i], d = bb[i];
  bout[4 * i] = c + d; bout[4 * i + 1] = c - d; bout[4 * i + 2] = c * d; bout[4 * i + 3] = c / d;
  cmp[2 * i] = (a < b) + 2 * (a == b) + 4 * (a >= b);
  cmp[2 * i + 1] = (c < d) + 2 * (c == d) + 4 * (c >= d);
}
"""


def _bf16_reference(x: np.ndarray) -> np.ndarray:
    """Round finite or infinite float32 -> bfloat16 bits: pick the nearer of the two bfloat16 neighbours
    by exact float64 distances, ties to the even one; past the largest finite value the upper
    neighbour is 2^128, which encodes as infinity."""
    u = x.view(np.uint32).astype(np.int64)
    sign = np.where(u >> 31 == 1, -1.0, 1.0)
    lo = u & 0xFFFF0000
    exp = (lo >> 23) & 0xFF
    lo_val = (lo.astype(np.uint32)).view(np.float32).astype(np.float64)
    ulp = np.exp2(np.maximum(exp, 1).astype(np.float64) - 127 - 7)
    hi_val = lo_val + sign * ulp
    xd = x.astype(np.float64)
    with np.errstate(invalid="ignore"):  # infinities: both distances are nan, and inf stays inf
        d_lo, d_hi = np.abs(xd - lo_val), np.abs(hi_val - xd)
    pick_hi = (d_hi < d_lo) | ((d_hi == d_lo) & ((lo >> 16) & 1 == 1))
    pick_hi &= np.isfinite(x)
    return (np.where(pick_hi, lo + 0x10000, lo) >> 16).astype(np.uint16)


def _special_floats(rng: np.random.Generator) -> np.ndarray:
    specials = [
        0.0,
        -0.0,
        np.inf,
        -np.inf,
        np.nan,
        65504.0,
        65519.99,
        65520.0,
        -65520.0,
        1e-8,
        -3e-8,
        2.0**-24,
        2.0**-25,
        1.5 * 2.0**-25,
        2.0**-14,
        2.0**-14 - 2.0**-25,
        3.0e38,
        -3.4e38,
        1e-40,
        1.0009765625,
    ]
    ties_half = (np.arange(1, 200, dtype=np.float32) + 0.5) * np.float32(2.0**-10) + 1  # exact half-way cases
    ties_bf16 = (np.arange(1, 200, dtype=np.uint32) << 16 | 0x8000).view(np.float32)
    wide = (rng.standard_normal(3000) * np.exp2(rng.uniform(-30, 20, 3000))).astype(np.float32)
    random_bits = rng.integers(0, 2**32, 3000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    return np.concatenate([np.array(specials, np.float32), ties_half, ties_bf16, wide, random_bits])


def test_conversions_round_to_nearest_even_bit_exactly(run_kernel, rng) -> None:
    x = _special_floats(rng)
    n = x.size
    h = np.full(n, 0x1234, np.uint16).view(np.float16)
    b = np.full(n, 0x1234, np.uint16)
    back = np.full(2 * n, np.nan, np.float32)
    params = [
        Param("x", "float32"),
        Param("h", "float16"),
        Param("b", "bfloat16"),
        Param("back", "float32"),
        Param("n", "int32", False),
    ]
    run_kernel(CONVERT, "convert", (-(-n // 128), 1, 1), (128, 1, 1), params, [x, h, b, back, n])
    nan = np.isnan(x)
    with np.errstate(over="ignore"):
        want_h = x.astype(np.float16)
    np.testing.assert_array_equal(h.view(np.uint16)[~nan], want_h.view(np.uint16)[~nan])
    want_b = _bf16_reference(x[~nan])
    np.testing.assert_array_equal(b[~nan], want_b)
    assert (h.view(np.uint16)[nan] == 0x7FFF).all() and (b[nan] == 0x7FFF).all()  # the GPU's canonical NaN
    np.testing.assert_array_equal(back[0::2][~nan], want_h.astype(np.float32)[~nan])
    np.testing.assert_array_equal(back[1::2][~nan], (want_b.astype(np.uint32) << 16).view(np.float32))
    assert np.isnan(back[nan.repeat(2)]).all()


def test_arithmetic_and_comparisons(run_kernel, rng) -> None:
    n = 2048
    ha = (rng.standard_normal(n) * 30).astype(np.float16)
    hb = (rng.standard_normal(n) * 3).astype(np.float16)
    hb[::17] = ha[::17]  # some equal pairs for the comparisons
    fa, fb = (rng.standard_normal(n) * 1e4).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    ba, bb = _bf16_reference(fa), _bf16_reference(fb)
    bb[::13] = ba[::13]
    hout = np.full(4 * n, np.nan, np.float16)
    bout = np.zeros(4 * n, np.uint16)
    cmp = np.full(2 * n, -1, np.int32)
    params = [
        Param("ha", "float16"),
        Param("hb", "float16"),
        Param("hout", "float16"),
        Param("ba", "bfloat16"),
        Param("bb", "bfloat16"),
        Param("bout", "bfloat16"),
        Param("cmp", "int32"),
        Param("n", "int32", False),
    ]
    run_kernel(ARITH, "arith", (n // 128, 1, 1), (128, 1, 1), params, [ha, hb, hout, ba, bb, bout, cmp, n])
    # numpy float16 arithmetic computes in float32 and rounds once: correctly rounded, like the GPU.
    with np.errstate(over="ignore"):
        want_h = np.stack([ha + hb, ha - hb, ha * hb, ha / hb], axis=1).reshape(-1)
    np.testing.assert_array_equal(hout.view(np.uint16), want_h.view(np.uint16))
    fa_r = (ba.astype(np.uint32) << 16).view(np.float32)
    fb_r = (bb.astype(np.uint32) << 16).view(np.float32)
    want_b = np.stack([fa_r + fb_r, fa_r - fb_r, fa_r * fb_r, fa_r / fb_r], axis=1).reshape(-1)
    np.testing.assert_array_equal(bout, _bf16_reference(want_b.astype(np.float32)))
    code = lambda a, b: (a < b) + 2 * (a == b) + 4 * (a >= b)  # noqa: E731
    np.testing.assert_array_equal(cmp[0::2], code(ha, hb))
    np.testing.assert_array_equal(cmp[1::2], code(fa_r, fb_r))
