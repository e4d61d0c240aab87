"""Loops with start and step and the prefetch hint: how each dialect spells them, and host runs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from compiler.backends import cpu
from compiler.codegen import CodegenError, render_cuda
from compiler.codegen.cpp import render_host
from compiler.ir import blockIdx, call, f32, kernel, lower, prefetch, range_, threadIdx
from compiler.ir.evaluate import run_thread

_UNAVAILABLE = cpu.unavailable_reason()


def _strided():
    with kernel("strided", block=4, grid=3) as k:
        x = k.tensor("x", f32, (3, 4, 50))
        for i in range_(50, name="i", start=threadIdx.x + 2, step=3):
            call(prefetch(x.address(blockIdx.x, threadIdx.x, i), write=True))
            x[blockIdx.x, threadIdx.x, i] = x[blockIdx.x, threadIdx.x, i] * 2.0 + 1.0
    return lower(k.kernel)


def test_the_host_spells_start_step_and_prefetch() -> None:
    text = render_host(_strided()).source
    assert "; i < 50; i += 3) {" in text and "for (int i = tid + 2;" in text
    assert "__builtin_prefetch(x + " in text and ", 1, 3);" in text


def test_cuda_renders_start_and_step_and_refuses_prefetch() -> None:
    with kernel("strided", block=4) as k:
        x = k.tensor("x", f32, (50,))
        for i in range_(50, name="i", start=threadIdx.x, step=4):
            x[i] = 0.0
    text = render_cuda(lower(k.kernel)).source
    assert "for (int i = tid; i < 50; i += 4) {" in text
    with pytest.raises(CodegenError, match="'prefetch' has no cuda spelling"):
        render_cuda(_strided())


def test_plain_loops_render_as_before() -> None:
    with kernel("plain", block=1) as k:
        x = k.tensor("x", f32, (8,))
        for i in range_(8, name="i"):
            x[i] = 0.0
    assert "for (int i = 0; i < 8; ++i) {" in render_cuda(lower(k.kernel)).source


@pytest.mark.skipif(_UNAVAILABLE is not None, reason=str(_UNAVAILABLE))
def test_the_host_build_matches_the_interpreter(tmp_path: Path) -> None:
    kern = _strided()
    x = np.random.default_rng(0).standard_normal((3, 4, 50)).astype(np.float32)
    expected = x.copy()
    for b in range(3):
        for t in range(4):
            run_thread(kern, {"x": expected}, (t, 0, 0), (b, 0, 0))
    assert not np.array_equal(expected, x)
    config = cpu.CpuConfig(cache_dir=tmp_path, workers=2)
    got = x.copy()
    cpu.run(cpu.load(cpu.compile(render_host(kern), config), config), [got])
    np.testing.assert_array_equal(got, expected)
