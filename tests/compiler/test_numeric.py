import struct

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from compiler.numeric import from_storage, poisoned, relative_error, to_storage


def bf16_round_scalar(value: float) -> int:
    """Round-to-nearest-even of a float32 to bfloat16, written the slow, obvious way."""
    bits = struct.unpack("<I", struct.pack("<f", value))[0]
    upper, lower = bits >> 16, bits & 0xFFFF
    if lower > 0x8000 or (lower == 0x8000 and upper & 1):
        upper += 1
    return upper & 0xFFFF


@given(st.floats(width=32, allow_nan=False))
def test_bfloat16_rounding_matches_scalar_definition(value):
    assert int(to_storage(np.array([value]), "bfloat16")[0]) == bf16_round_scalar(value)


def test_bfloat16_keeps_nan_and_infinities():
    bits = to_storage(np.array([np.nan, np.inf, -np.inf, np.finfo(np.float32).max]), "bfloat16")
    back = from_storage(bits, "bfloat16")
    assert np.isnan(back[0])
    assert back[1] == np.inf and back[2] == -np.inf
    assert back[3] == np.inf  # float32's largest value rounds past bfloat16's


def test_float16_storage_round_trips():
    values = np.random.default_rng(0).uniform(-4, 4, 64)
    stored = to_storage(values, "float16")
    assert stored.dtype == np.float16
    np.testing.assert_array_equal(from_storage(stored, "float16"), values.astype(np.float16))


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_poisoned_float_buffers_are_all_nan(dtype):
    assert np.all(np.isnan(from_storage(poisoned((3, 5), dtype), dtype)))


def test_relative_error():
    ref = np.array([3.0, 4.0])
    assert relative_error(ref.copy(), ref) == 0.0
    assert relative_error(np.array([3.0, 4.5]), ref) == pytest.approx(0.1)
    assert relative_error(np.array([np.nan, 4.0]), ref) == float("inf")
    with pytest.raises(ValueError, match="shape"):
        relative_error(np.zeros(3), ref)
