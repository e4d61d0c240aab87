"""Host-side storage of kernel element types, and the error measure every correctness check uses.

numpy has no bfloat16: a bfloat16 tensor lives on the host as ``uint16`` bit patterns, the upper half of
the float32 bits rounded to nearest even, exactly as ``__float2bfloat16_rn`` does on the GPU.

>>> bits = to_storage(np.array([1.0, -2.5, 3.14159]), "bfloat16")
>>> bits.dtype, from_storage(bits, "bfloat16").tolist()
(dtype('uint16'), [1.0, -2.5, 3.140625])
"""

from __future__ import annotations

import math

import numpy as np

STORAGE_DTYPES: dict[str, np.dtype] = {
    "float32": np.dtype(np.float32),
    "float16": np.dtype(np.float16),
    "bfloat16": np.dtype(np.uint16),
    "int32": np.dtype(np.int32),
    "uint32": np.dtype(np.uint32),
    "bool": np.dtype(np.bool_),
}

#: Largest relative L2 error (``||out - ref|| / ||ref||``) a correct kernel may show, by output dtype,
#: for outputs that sum few terms. Every template computes in float32 and rounds a 16-bit output once,
#: to nearest, which moves each element by at most the type's unit roundoff (2**-11 relative for
#: float16, 2**-8 for bfloat16), so their bound is that roundoff plus float32's own: a kernel that
#: keeps 16-bit intermediates (accumulating in half precision, rounding twice) exceeds it. Long sums add
#: :func:`tolerance`'s reduction term; subnormal results add :func:`underflow_allowance`.
TOLERANCE: dict[str, float] = {"float32": 1e-5, "float16": 2.0**-11 + 1e-5, "bfloat16": 2.0**-8 + 1e-5}

#: Unit roundoff of float32 under round-to-nearest: every template accumulates in float32.
F32_UNIT_ROUNDOFF = 2.0**-24
#: Allowed multiple of ``u * sqrt(n)`` for an n-term float32 sum (the expected value is about 0.3).
REDUCTION_MARGIN = 2.0


#: Per float dtype: the smallest normal magnitude, and the largest rounding error below it (half the
#: subnormal spacing), where relative precision gives way to an absolute one.
_UNDERFLOW: dict[str, tuple[float, float]] = {
    "float32": (2.0**-126, 2.0**-150),
    "float16": (2.0**-14, 2.0**-25),
    "bfloat16": (2.0**-126, 2.0**-134),
}


def underflow_allowance(dtype: str, reference: np.ndarray) -> float:
    """Relative L2 error that rounding to ``dtype`` may add where the reference is subnormal there.

    Below the smallest normal number an element rounds to a fixed absolute grid, so each such element
    may be off by half its spacing whatever its size: ``sqrt(count) * half_spacing / ||reference||``.
    It matters for float16 results of many tiny values (a softmax over millions of columns, whose
    outputs lie near ``1 / cols``, below float16's ``6.1e-5``), where it exceeds the relative term.

    >>> underflow_allowance("float16", np.array([1.0, 1e-6, 2e-6])) == 2**0.5 * 2.0**-25 / l2_norm(
    ...     np.array([1.0, 1e-6, 2e-6]))
    True
    """
    if dtype not in _UNDERFLOW:
        return 0.0
    smallest_normal, half_spacing = _UNDERFLOW[dtype]
    count = int(np.count_nonzero(np.abs(reference) < smallest_normal))
    norm = l2_norm(reference)
    if count == 0:
        return 0.0
    return math.sqrt(count) * half_spacing / norm if norm > 0.0 else math.inf


def tolerance(dtype: str, reduction: int = 1) -> float:
    """The relative L2 error allowed in an output of ``dtype`` whose elements each sum ``reduction`` terms.

    ``TOLERANCE[dtype] + REDUCTION_MARGIN * u * sqrt(reduction)`` with ``u = 2**-24``.

    Error model: a float32 sum (or dot product, FMA or not) of ``n`` terms added one after another
    makes one rounding per addition, ``s_j = (s_{j-1} + x_j)(1 + d_j)`` with ``|d_j| <= u``, so its
    error is ``sum_j d_j * s_j`` to first order. The worst-case bound that follows,
    ``gamma_n * sum |x_j|`` with ``gamma_n = n u / (1 - n u)``, is no use as a threshold: on the
    random-sign data checks use it is about ``n**1.5 * u`` relative to the result, far above what a
    dropped term costs (``1 / sqrt(n)``). Roundings of random data are independent with mean zero
    and a standard deviation of about ``0.4 u`` (half an ulp, uniformly placed, over a ulp that is
    ``u`` to ``2u`` of the value), so the error's root mean square is ``0.4 u * sqrt(sum_j s_j**2)``.
    For terms of mean zero, ``s_j**2`` averages ``j / n`` of ``s_n**2``, so over many outputs the
    relative L2 error is ``0.4 u * sqrt(n / 2) ~= 0.28 u sqrt(n)``; for terms of a non-zero mean
    (``s_j ~ j / n * s_n``) it is ``0.4 u * sqrt(n / 3) ~= 0.23 u sqrt(n)``. Blocked, tree or
    compensated sums, which the templates also use, only do better. ``REDUCTION_MARGIN = 2`` allows
    about seven times that expected error (measured: 0.10 to 0.54 ``u sqrt(n)`` over 8 outputs,
    ``n = 83 .. 2**20``), and 16-bit outputs, which accumulate in float32 too, take the same term.

    What it still catches: one dropped term of a random-sign dot product costs ``1 / sqrt(n)``
    relative: seven times the tolerance at ``n = 2**20``, twice at ``2**22``, and below it past ``2**23``,
    where float32 summation itself loses as much (a limit of any float32 kernel, not of the model); a wrong
    edge or wrong rounding of 16-bit outputs is judged by the base term, which stays as it was at small
    ``n`` (``1.1e-5`` for float32 at ``n = 83``). Outputs with subnormal values add
    :func:`underflow_allowance`, which depends on the reference.

    >>> tolerance("float32", 83) < 1.2e-5, round(tolerance("float32", 2**20), 6)
    (True, 0.000132)
    """
    if reduction < 1:
        raise ValueError(f"a reduction sums at least one term, got {reduction}")
    return TOLERANCE[dtype] + REDUCTION_MARGIN * F32_UNIT_ROUNDOFF * math.sqrt(reduction)


def _bfloat16_bits(values: np.ndarray) -> np.ndarray:
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    nan = np.isnan(values)
    rounded = bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
    out = (rounded >> np.uint32(16)).astype(np.uint16)
    # A NaN must stay a NaN: rounding could carry its payload into the infinity pattern.
    out[nan] = ((bits[nan] >> np.uint32(16)) | np.uint32(0x0040)).astype(np.uint16)
    return out


def to_storage(values: np.ndarray, dtype: str) -> np.ndarray:
    """``values`` converted to the host storage of ``dtype`` (round to nearest even)."""
    if dtype == "bfloat16":
        return _bfloat16_bits(np.asarray(values, dtype=np.float32))
    return np.asarray(values).astype(STORAGE_DTYPES[dtype])


def from_storage(array: np.ndarray, dtype: str) -> np.ndarray:
    """The float64 values held by a host array of ``dtype``."""
    if dtype == "bfloat16":
        return (array.astype(np.uint32) << np.uint32(16)).view(np.float32).astype(np.float64)
    return array.astype(np.float64)


def poisoned(shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """A host buffer filled with NaN (or an improbable integer), so an unwritten element cannot pass."""
    if dtype in ("float32", "float16", "bfloat16"):
        return to_storage(np.full(shape, np.nan, dtype=np.float32), dtype)
    return np.full(shape, -0x2A2A2A2A if dtype == "int32" else 0x2A2A2A2A, dtype=STORAGE_DTYPES[dtype])


def relative_error(output: np.ndarray, reference: np.ndarray) -> float:
    """Relative L2 error of ``output`` against ``reference`` (both float64); inf when any NaN is present."""
    if output.shape != reference.shape:
        raise ValueError(f"output shape {output.shape} differs from reference shape {reference.shape}")
    if not np.all(np.isfinite(output)):
        return float("inf")
    norm = l2_norm(reference)
    diff = l2_norm(output - reference)
    return diff / norm if norm > 0.0 else diff


def l2_norm(values: np.ndarray) -> float:
    """The Euclidean norm, scaled so that squaring cannot overflow (``np.linalg.norm`` squares as is).

    >>> l2_norm(np.array([3.0, -4.0]) * 2.0**600) == 5.0 * 2.0**600  # np.linalg.norm overflows to inf
    True
    """
    flat = np.asarray(values, dtype=np.float64).reshape(-1)
    scale = float(np.max(np.abs(flat))) if flat.size else 0.0
    if scale == 0.0 or not math.isfinite(scale):
        return scale
    return scale * math.sqrt(float(np.sum(np.square(flat / scale))))
