"""Float math as a GPU delivers it: every result lies within CUDA's documented error bound of the exact
(float64) value and, on purpose, away from the correctly rounded float at the edge of that bound, on
both sides; so a kernel that is right only with exact math fails on the emulator, as on some GPU."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import pytest

from compiler.source import Param

Exact = Callable[[np.ndarray], np.ndarray]


@dataclass(frozen=True)
class Bound:
    """ulps(x): the ulp bound; abs_err (with abs_where(x)): an absolute bound where that holds."""

    ulps: Callable[[np.ndarray], np.ndarray]
    abs_err: float = 0.0
    abs_where: Callable[[np.ndarray], np.ndarray] = lambda x: np.zeros(x.shape, bool)


def _const(k: int) -> Callable[[np.ndarray], np.ndarray]:
    return lambda x: np.full(x.shape, k, np.int64)


def _half_to_two(x: np.ndarray) -> np.ndarray:
    return (x >= 0.5) & (x <= 2.0)


def _within_pi(x: np.ndarray) -> np.ndarray:
    return np.abs(x) <= np.pi


FUNCTIONS: dict[str, tuple[Exact, Bound]] = {
    "__expf": (np.exp, Bound(lambda x: 2 + np.floor(np.abs(1.173 * x)).astype(np.int64))),
    "__exp10f": (lambda x: np.power(10.0, x), Bound(lambda x: 2 + np.floor(np.abs(2.97 * x)).astype(np.int64))),
    "__logf": (np.log, Bound(_const(3), 2.0**-21.41, _half_to_two)),
    "__log2f": (np.log2, Bound(_const(2), 2.0**-22, _half_to_two)),
    "__log10f": (np.log10, Bound(_const(3), 2.0**-24, _half_to_two)),
    "__sinf": (np.sin, Bound(_const(0), 2.0**-21.41, _within_pi)),
    "__cosf": (np.cos, Bound(_const(0), 2.0**-21.19, _within_pi)),
    "rsqrtf": (lambda x: 1.0 / np.sqrt(x), Bound(_const(2))),
    "expf": (np.exp, Bound(_const(2))),
    "exp2f": (np.exp2, Bound(_const(2))),
    "logf": (np.log, Bound(_const(1))),
    "log2f": (np.log2, Bound(_const(1))),
    "sinf": (np.sin, Bound(_const(2))),
    "cosf": (np.cos, Bound(_const(2))),
    "tanhf": (np.tanh, Bound(_const(2))),
}

UNARY = (
    'extern "C" __global__ void unary(const float* __restrict__ x, float* __restrict__ y, int n) {\n'
    "  const int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i >= n) return;\n"
    "  const float v = x[i];\n"
    + "".join(f"  y[{k} * n + i] = {name}(v);\n" for k, name in enumerate(FUNCTIONS))
    + "}\n"
)


def _ordered(a: np.ndarray) -> np.ndarray:
    """float32 bits as integers whose differences count representable floats (ulps)."""
    b = a.astype(np.float32).view(np.int32).astype(np.int64)
    return np.where(b < 0, -(b & 0x7FFFFFFF), b)


def _inputs(rng: np.random.Generator) -> np.ndarray:
    return np.concatenate(
        [
            rng.uniform(-20.0, 20.0, 512),
            rng.uniform(0.5, 2.0, 512),
            rng.uniform(-np.pi, np.pi, 512),
            np.exp(rng.uniform(-30.0, 30.0, 512)),
        ]
    ).astype(np.float32)


def test_math_functions_sit_at_their_documented_error_bounds(run_kernel, rng) -> None:
    x = _inputs(rng)
    n = x.size
    y = np.full(len(FUNCTIONS) * n, np.nan, np.float32)
    params = [Param("x", "float32"), Param("y", "float32"), Param("n", "int32", False)]
    run_kernel(UNARY, "unary", (n // 128, 1, 1), (128, 1, 1), params, [x, y, n])
    xd = x.astype(np.float64)
    for k, (name, (exact_fn, bound)) in enumerate(FUNCTIONS.items()):
        got = y[k * n : (k + 1) * n]
        with np.errstate(all="ignore"):
            exact = exact_fn(xd)
            nearest = exact.astype(np.float32)
            err = np.abs(got.astype(np.float64) - exact)
        ok = np.isfinite(exact) & (nearest != 0) & np.isfinite(nearest) & (nearest.astype(np.float64) != exact)
        if name in ("__sinf", "__cosf"):
            ok &= _within_pi(xd)  # beyond pi the guide only says "larger"
        assert ok.sum() > 1000, name
        is_abs = bound.abs_where(xd) & ok
        is_ulp = ~bound.abs_where(xd) & ok
        ulp_at = np.spacing(np.abs(got[is_abs])).astype(np.float64)
        assert (err[is_abs] <= bound.abs_err).all(), f"{name}: over its absolute bound"
        assert (err[is_abs] > bound.abs_err - ulp_at).all(), f"{name}: not at its absolute bound"
        dist = np.abs(_ordered(got) - _ordered(nearest))
        np.testing.assert_array_equal(dist[is_ulp], bound.ulps(xd)[is_ulp], err_msg=f"{name}: ulps")
        moved = got[ok] != nearest[ok]
        assert moved.all(), f"{name}: returned the correctly rounded value"
        assert (got[ok] > nearest[ok]).any() and (got[ok] < nearest[ok]).any(), f"{name}: pushed one way only"


SPECIAL = r"""
extern "C" __global__ void special(const float* __restrict__ a, const float* __restrict__ b,
                                   float* __restrict__ y, int n) {
  const int i = threadIdx.x;
  if (i >= n) return;
  y[4 * i] = __fdividef(a[i], b[i]);
  y[4 * i + 1] = __powf(a[i], b[i]);
  y[4 * i + 2] = __frsqrt_rn(a[i]);
  y[4 * i + 3] = fmaxf(a[i], b[i]) - fminf(a[i], b[i]);
}
"""


def _run_special(run_kernel, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    n = a.size
    y = np.full(4 * n, np.nan, np.float32)
    params = [Param("a", "float32"), Param("b", "float32"), Param("y", "float32"), Param("n", "int32", False)]
    run_kernel(SPECIAL, "special", (1, 1, 1), (n, 1, 1), params, [a.astype(np.float32), b.astype(np.float32), y, n])
    return y.reshape(n, 4)


def test_fast_division_is_two_ulps_off_and_zero_for_huge_divisors(run_kernel, rng) -> None:
    a = np.concatenate([rng.uniform(-100, 100, 200), [3.0, 3.0, np.inf, 1e30]]).astype(np.float32)
    huge = [2.0**127, -(2.0**127.5), 2.0**127, 2.0**126.5]
    b = np.concatenate([rng.uniform(0.01, 1e3, 200) * rng.choice([-1, 1], 200), huge]).astype(np.float32)
    got = _run_special(run_kernel, a, b)[:, 0]
    exact = (a.astype(np.float64) / b).astype(np.float32)
    np.testing.assert_array_equal(np.abs(_ordered(got[:200]) - _ordered(exact[:200])), 2)
    assert got[200] == 0 and not np.signbit(got[200])  # x / y with 2^126 < |y| < 2^128: x * rcp(y) = x * 0
    assert got[201] == 0 and np.signbit(got[201])
    assert np.isnan(got[202])  # inf * 0
    assert got[203] == 0  # the exact quotient, about 1e-8, is far from zero


def test_fast_power_goes_through_log2_and_exp2(run_kernel) -> None:
    got = _run_special(run_kernel, np.array([1.5, -2.0, 3.0, 2.0]), np.array([10.0, 2.0, 0.5, 10.0]))[:, 1]
    exact = 1.5**10
    assert got[0] != np.float32(exact) and abs(got[0] / exact - 1) < 10 * 2.0**-22  # __log2f(1.5) is near
    assert np.isnan(got[1])  # a negative base has no log2: NaN, as on a GPU
    assert abs(got[2] / np.sqrt(3.0) - 1) < 1e-6
    assert got[3] == 1024.0  # log2(2) and 2^10 are exact: the hardware hits them


EXACT = r"""
extern "C" __global__ void exact(float* __restrict__ y) {
  y[0] = exp2f(3.0f); y[1] = __expf(0.0f); y[2] = cosf(0.0f); y[3] = __log2f(4.0f); y[4] = rsqrtf(4.0f);
  y[5] = tanhf(20.0f); y[6] = __logf(1.0f); y[7] = expf(-200.0f); y[8] = __fdividef(6.0f, 3.0f);
}
"""


def test_results_that_are_floats_stay_exact(run_kernel) -> None:
    y = np.full(9, np.nan, np.float32)
    run_kernel(EXACT, "exact", (1, 1, 1), (1, 1, 1), [Param("y", "float32")], [y])
    np.testing.assert_array_equal(y, [8.0, 1.0, 1.0, 2.0, 0.5, 1.0, 0.0, 0.0, 2.0])


def _rsqrt_correctly_rounded(x: np.float32, r: np.float32) -> bool:
    """r = RN(1/sqrt(x)) iff 1/sqrt(x) lies between the midpoints to r's neighbours, decided exactly."""
    lo, hi = np.nextafter(r, np.float32(0)), np.nextafter(r, np.float32(np.inf))
    m_lo, m_hi = (Fraction(float(lo)) + Fraction(float(r))) / 2, (Fraction(float(r)) + Fraction(float(hi))) / 2
    fx = Fraction(float(x))
    return m_lo * m_lo * fx <= 1 <= m_hi * m_hi * fx  # 1/sqrt(x) >= m  <=>  m*m*x <= 1


def test_rsqrt_rn_rounds_once(run_kernel, rng) -> None:
    x = np.concatenate([np.exp2(rng.uniform(-140, 120, 500)), rng.uniform(1.0, 4.0, 500)]).astype(np.float32)
    got = _run_special(run_kernel, x, np.ones_like(x))[:, 2]
    bad = [(float(v), float(r)) for v, r in zip(x, got, strict=True) if not _rsqrt_correctly_rounded(v, r)]
    assert not bad, f"{len(bad)} of {x.size} not correctly rounded, e.g. {bad[:3]}"


@pytest.mark.parametrize(("a", "b"), [(0.0, -0.0), (-0.0, 0.0)])
def test_min_and_max_order_negative_zero_below_positive_zero(run_kernel, a: float, b: float) -> None:
    src = r"""
extern "C" __global__ void mm(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ y) {
  y[0] = fminf(a[0], b[0]); y[1] = fmaxf(a[0], b[0]); y[2] = min(a[0], b[0]); y[3] = max(a[0], b[0]);
  y[4] = fminf(a[0], __int_as_float(0x7fc00000)); y[5] = fmaxf(__int_as_float(0x7fc00000), b[0]);
}
"""
    y = np.full(6, np.nan, np.float32)
    params = [Param("a", "float32"), Param("b", "float32"), Param("y", "float32")]
    run_kernel(src, "mm", (1, 1, 1), (1, 1, 1), params, [np.float32([a]), np.float32([b]), y])
    assert [bool(s) for s in np.signbit(y[:4])] == [True, False, True, False]
    assert math.copysign(1, y[4]) == math.copysign(1, a) and math.copysign(1, y[5]) == math.copysign(1, b)


NEAR_ONE = r"""
extern "C" __global__ void near_one(const float* __restrict__ x, float* __restrict__ fast, float* __restrict__ soft,
                                    int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  fast[i] = __logf(x[i]);  // an absolute error of 2^-21.41 is large next to log(x) for x near 1
  float m = x[0], s = 0.0f;
  for (int j = 0; j < n; ++j) m = fmaxf(m, x[j]);
  for (int j = 0; j < n; ++j) s += __expf(x[j] - m);
  soft[i] = __expf(x[i] - m) / s;  // relative errors: fine at verification's tolerance
}
"""


def _rel_l2(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.linalg.norm(got.astype(np.float64) - want) / np.linalg.norm(want))


def test_exact_math_dependence_is_seen_at_the_verification_tolerance(run_kernel, rng) -> None:
    n = 256
    x = (1.0 + rng.uniform(1e-4, 1e-3, n)).astype(np.float32)
    fast, soft = np.full(n, np.nan, np.float32), np.full(n, np.nan, np.float32)
    params = [Param("x", "float32"), Param("fast", "float32"), Param("soft", "float32"), Param("n", "int32", False)]
    run_kernel(NEAR_ONE, "near_one", (2, 1, 1), (128, 1, 1), params, [x, fast, soft, n])
    xd = x.astype(np.float64)
    assert _rel_l2(fast, np.log(xd)) > 1e-5  # the exact log would be within 1e-7
    e = np.exp(xd - xd.max())
    assert _rel_l2(soft, e / e.sum()) < 1e-5
