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

#: Largest relative L2 error (``||out - ref|| / ||ref||``) a correct kernel may show, by output dtype.
TOLERANCE: dict[str, float] = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1e-2}


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
