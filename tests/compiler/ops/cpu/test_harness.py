"""The cpu test harness runs a two-launch program in order and sees a wrong kernel."""

from __future__ import annotations

import numpy as np
import pytest

from compiler.ir import blockIdx, f32, kernel, lower
from compiler.ops.base import TensorSpec
from compiler.program import Launch, Program, Workspace


def _two_pass(scale: float) -> Program:
    with kernel("twice", block=1, grid=7) as k1:
        x = k1.tensor("x", f32, (7,), const=True)
        t = k1.tensor("t", f32, (7,))
        t[blockIdx.x] = x[blockIdx.x] * 2.0
    with kernel("offset", block=1, grid=7) as k2:
        t2 = k2.tensor("t", f32, (7,), const=True)
        y = k2.tensor("y", f32, (7,))
        y[blockIdx.x] = t2[blockIdx.x] * scale + 1.0
    launches = (Launch.by_name(lower(k1.kernel)), Launch.by_name(lower(k2.kernel)))
    return Program("two_pass", ("x", "y"), launches, (Workspace("t", (7,), "float32"),))


@pytest.mark.parametrize(("scale", "right"), [(1.0, True), (1.001, False)])
def test_launches_run_in_order_against_numpy(run_on_cpu, assert_matches, scale: float, right: bool) -> None:
    x = np.random.default_rng(3).standard_normal(7).astype(np.float32)
    outputs = (TensorSpec("y", (7,), "float32"),)
    got = run_on_cpu(_two_pass(scale), {"x": x}, outputs)
    expected = {"y": x.astype(np.float64) * 2.0 + 1.0}
    if right:
        assert_matches(got, expected, outputs)
    else:
        with pytest.raises(AssertionError, match="relative error"):
            assert_matches(got, expected, outputs)


def test_a_reserved_kernel_name_is_refused_before_compiling() -> None:
    from compiler.codegen.cpp import render_host
    from compiler.codegen.names import CodegenError

    with kernel("double", block=1) as k:
        x = k.tensor("x", f32, (1,))
        x[0] = 1.0
    with pytest.raises(CodegenError, match="'double' is reserved"):
        render_host(lower(k.kernel))
