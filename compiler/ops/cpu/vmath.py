"""Vector math written in the kernel IR: an ``exp`` the host compiler vectorises, of stated accuracy.

``<cmath>``'s ``expf`` is a library call that g++ does not vectorise without ``-ffast-math`` (and
then through libmvec, up to 2.6 ulp measured elsewhere); inside a ``range_(..., simd=True)`` loop the
function below is straight-line arithmetic (fma, min/max, integer add and shift, bit
reinterpretations), so each element becomes one lane of vector code of the machine's width.

Method. ``x = n*ln2 + r`` with ``n = round(x / ln2)`` and ``|r| <= ln2/2``: ``n`` is rounded by adding
``1.5 * 2**23`` in one fma (the sum's low mantissa bits are then ``n``, and subtracting the constant
back gives ``n`` as a float), ``r`` comes from a two-constant (Cody-Waite) split of ln2 with fmas;
``exp(r)`` is a degree-6 polynomial (coefficients fitted here for relative error, 0.05 ulp on its
own); ``2**n`` is built in the exponent field, ``bitcast((n + 127) << 23)``.

Accuracy, measured against float64 by ``tests/compiler/ops/cpu/test_vmath.py`` (which asserts it):
at most ``EXP_MAX_ULP`` = 1 ulp wherever the result is a normal float (0.87 ulp the worst seen, over
dense grids of the domain and every float of [-1, -0.5], [1, 2] and [-87, -64]), ``exp(0) == 1``
exactly.

- ``exp_f32(x)``: every float. Below ``ln(2**-126)`` (-87.34) the result is subnormal, computed as
  ``(p * 2**h) * 2**(n-h)`` (an exact scaling, then one rounding) so it stays right to an absolute
  error of a subnormal ulp; below -104 it is 0; above ``ln(FLT_MAX)`` it is ``inf``; NaN stays NaN.
- ``exp_f32(x, nonpositive=True)``: for callers that know ``x <= 0`` (softmax's ``x - max``). One
  scaling instead of two, no overflow or NaN handling: results below the smallest normal float flush
  towards 0 (exactly 0 below -87.68; absolute error under ``2**-126`` between).
"""

from __future__ import annotations

from typing import Any

from compiler.ir import Expr, f32, fma, i32, let, select
from compiler.ir.expr import as_expr
from compiler.ir.intrinsics import bitcast

#: The bound ``test_vmath`` asserts, in ulp of the float64 reference, over normal results.
EXP_MAX_ULP = 1.0
LOG2E = 1.4426950408889634
#: ln2 split for an exact-as-possible ``x - n*ln2``: the float32 nearest ln2 and what it misses.
LN2_HI = 0.693145751953125
LN2_LO = 1.428606765330187e-06
#: 1.5 * 2**23: adding it rounds to an integer held in the low mantissa bits (for |value| < 2**22).
SHIFTER = 12582912.0
_SHIFTER_BITS = 0x4B400000
#: exp(r) ~ sum(C[k] * r**k) on |r| <= ln2/2; fitted for relative error by iteratively reweighted
#: least squares on Chebyshev nodes (0.05 ulp before float rounding).
COEFFICIENTS = (1.0, 1.0, 0.4999999403953552, 0.1666652113199234, 0.04166828468441963,
                0.008368710055947304, 0.0013820341555401683)
#: Below this, every result of exp underflows to 0 (exp(-104) is under half the least subnormal).
LOWEST = -104.0
#: Below this, ``nonpositive`` mode's single scaling ``2**n`` has n <= -127 and gives 0.
LOWEST_NONPOSITIVE = -88.0
#: The largest float whose exp is finite (ln(FLT_MAX) = 88.7228390...).
HIGHEST = 88.72283172607422


def vmax(a: Any, b: Any) -> Expr:
    """The larger of two f32 values as a select, ``a > b ? a : b``: the host's ``fmaxf`` is a call
    that g++ does not vectorise without fast-math, the select is one ``vmaxps``. (If ``a`` is NaN,
    the result is ``b``.)"""
    x = as_expr(a, f32)
    return select(x > b, x, b)


def vmin(a: Any, b: Any) -> Expr:
    """The smaller of two f32 values as a select (see ``vmax``)."""
    x = as_expr(a, f32)
    return select(x < b, x, b)


def _power_of_two(n: Expr) -> Expr:
    """``2.0**n`` for an i32 ``n`` in -127..127 (0.0 at -127), from its exponent field."""
    return bitcast((n + 127) << 23, f32)


def _polynomial(r: Expr) -> Expr:
    p: Expr = as_expr(COEFFICIENTS[-1], f32)
    for c in reversed(COEFFICIENTS[:-1]):
        p = fma(p, r, c)
    return p


def exp_f32(value: Any, *, nonpositive: bool = False, name: str = "ex") -> Expr:
    """``exp(value)`` for an f32 expression, as straight-line IR (see the module docstring).

    Emits ``let`` locals named after ``name``: call it inside a kernel, typically in a simd loop.
    """
    x = as_expr(value, f32)
    if x.type != f32:
        raise TypeError(f"exp_f32 needs an f32 value, got {x!r} of type {x.type}")
    clamped = let(f"{name}_x", vmax(x, LOWEST_NONPOSITIVE) if nonpositive else vmin(vmax(x, LOWEST), HIGHEST))
    shifted = let(f"{name}_t", fma(clamped, LOG2E, SHIFTER))
    nf = let(f"{name}_nf", shifted - SHIFTER)
    r = let(f"{name}_r", fma(nf, -LN2_LO, fma(nf, -LN2_HI, clamped)))
    p = let(f"{name}_p", _polynomial(r))
    n = let(f"{name}_n", bitcast(shifted, i32) - _SHIFTER_BITS)
    if nonpositive:
        return p * _power_of_two(n)
    half = let(f"{name}_h", n >> 1)
    scaled = (p * _power_of_two(half)) * _power_of_two(n - half)
    finite = select(x > HIGHEST, float("inf"), scaled)
    return select(x == x, finite, x)  # NaN compares unequal to itself and passes through
