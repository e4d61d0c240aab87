"""``bitcast``: f32 bits read as i32/u32 and back, the same in the interpreter, on the host and in CUDA text."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest

from compiler.backends import cpu
from compiler.codegen import render_cuda
from compiler.codegen.cpp import render_host
from compiler.ir import blockIdx, f32, kernel, lower
from compiler.ir.evaluate import evaluate_expr
from compiler.ir.expr import Var
from compiler.ir.intrinsics import bitcast
from compiler.ir.types import DataType, i32, u32

_SPECIAL = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, 1e-45, -3e-39, 3.4e38, 0.1], dtype=np.float32)


def _floats(n: int) -> np.ndarray:
    rng = np.random.default_rng(7)
    # Random bit patterns cover every exponent; NaNs are left out (their payloads are not values).
    bits = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)
    return np.concatenate([_SPECIAL, bits[np.isfinite(bits)]]).astype(np.float32)


@pytest.mark.parametrize("target", [i32, u32])
def test_the_interpreter_reads_the_bits_as_numpy_view_does(target: DataType) -> None:
    x = Var("x", f32)
    for value in _floats(200):
        got = evaluate_expr(bitcast(x, target), {x: float(value)})
        assert got == np.float32(value).view(target.dtype)
        back = Var("b", target)
        assert evaluate_expr(bitcast(back, f32), {back: got}) == float(value)


def test_only_four_byte_pairs_through_f32_are_allowed() -> None:
    with pytest.raises(TypeError, match="only f32->i32"):
        bitcast(Var("x", f32), f32)
    with pytest.raises(TypeError, match="only"):
        bitcast(Var("i", i32), u32)


def _roundtrip_kernel(n: int, target: DataType):
    with kernel("bits", block=1, grid=n) as k:
        x = k.tensor("x", f32, (n,), const=True)
        bits = k.tensor("bits", target, (n,))
        y = k.tensor("y", f32, (n,))
        bits[blockIdx.x] = bitcast(x[blockIdx.x], target)
        # Flip the sign bit through the integer view: a bit operation, not a negation.
        flipped = bitcast(x[blockIdx.x], u32) ^ 0x80000000
        y[blockIdx.x] = bitcast(flipped, f32)
    return lower(k.kernel)


@pytest.mark.skipif(cpu.unavailable_reason() is not None, reason=str(cpu.unavailable_reason()))
@pytest.mark.parametrize("target", [i32, u32])
def test_host_code_matches_numpy_view(target: DataType) -> None:
    x = _floats(4000)
    n = x.size
    bits = np.full(n, 7, dtype=target.dtype)
    y = np.full(n, np.nan, dtype=np.float32)
    config = cpu.CpuConfig(cache_dir=Path(tempfile.mkdtemp(prefix="wm-bitcast-")))
    source = render_host(_roundtrip_kernel(n, target))
    assert "__builtin_memcpy" in source.source
    cpu.run(cpu.load(cpu.compile(source, config), config), [x, bits, y])
    np.testing.assert_array_equal(bits, x.view(target.dtype))
    np.testing.assert_array_equal(y.view(np.uint32), x.view(np.uint32) ^ np.uint32(0x80000000))


def test_cuda_spells_the_intrinsics() -> None:
    text = render_cuda(_roundtrip_kernel(8, i32)).source
    assert "__float_as_int(" in text and "__float_as_uint(" in text and "__uint_as_float(" in text
