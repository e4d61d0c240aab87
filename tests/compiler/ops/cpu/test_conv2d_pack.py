"""The conv2d packers alone: each packed workspace, read back, is the numpy im2col (or weight) in the
packed-panel layout of the GEMM contract, zeros past the edge included."""

from __future__ import annotations

import numpy as np
import pytest

from compiler.ops.base import TensorSpec
from compiler.ops.conv2d_spec import Conv2dSpec
from compiler.ops.cpu import conv_pack
from compiler.program import Launch, Program

SPECS: dict[str, dict[str, object]] = {
    "1x1": {"n": 1, "c": 5, "h": 7, "w": 9, "k": 3, "r": 1, "s": 1},
    "3x3 pad 1": {"n": 2, "c": 3, "h": 11, "w": 13, "k": 7, "r": 3, "s": 3, "padding": (1, 1)},
    "7x7 stride 2 pad 3": {"n": 1, "c": 2, "h": 19, "w": 17, "k": 5, "r": 7, "s": 7, "stride": (2, 2),
                           "padding": (3, 3)},
    "dilation 2": {"n": 2, "c": 1, "h": 13, "w": 12, "k": 2, "r": 3, "s": 2, "dilation": (2, 2),
                   "padding": (2, 1)},
    "uneven": {"n": 1, "c": 7, "h": 10, "w": 23, "k": 11, "r": 2, "s": 3, "stride": (1, 3), "padding": (0, 2),
               "dilation": (1, 2)},
}


def _spec(name: str, layout: str) -> Conv2dSpec:
    return Conv2dSpec.model_validate({**SPECS[name], "layout": layout})


def _run(run_on_cpu, kernel, inputs: dict[str, np.ndarray], out: str, shape: tuple[int, ...]) -> np.ndarray:
    launch = Launch.by_name(kernel)
    program = Program(kernel.name, tuple(b for _, b, _ in launch.buffer_bindings()), (launch,))
    return run_on_cpu(program, inputs, (TensorSpec(out, shape, "float32"),))[out]


def test_the_numpy_im2col_times_the_weight_is_the_convolution() -> None:
    from compiler.ops.conv2d_spec import conv2d_inputs, conv2d_reference

    for name in SPECS:
        for layout in ("NCHW", "NHWC"):
            spec = _spec(name, layout)
            inputs = conv2d_inputs(spec, np.random.default_rng(1))
            cols = conv_pack.im2col(spec, inputs["x"].astype(np.float64))
            weight = inputs["weight"].reshape(spec.k, -1).astype(np.float64)
            y = weight @ cols if layout == "NCHW" else cols @ weight.T
            expected = conv2d_reference(spec, inputs)["y"]
            np.testing.assert_allclose(y.reshape(spec.y_shape), expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", SPECS)
@pytest.mark.parametrize("mode", conv_pack.PACK_MODES)
@pytest.mark.parametrize(("lanes", "panels"), [(16, 1), (32, 3), (5, 2)])
def test_nchw_patches_pack_as_b(run_on_cpu, name: str, mode: str, lanes: int, panels: int) -> None:
    spec = _spec(name, "NCHW")
    x = np.random.default_rng(2).uniform(-1, 1, spec.x_shape).astype(np.float32)
    kernel = conv_pack.pack_nchw_patches_kernel("pack_patches", spec, lanes, panels, mode)
    expected = np.stack([conv_pack.pack_columns(cols, lanes) for cols in conv_pack.im2col(spec, x)])
    got = _run(run_on_cpu, kernel, {"x": x}, "bp", expected.shape)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("name", SPECS)
@pytest.mark.parametrize(("lanes", "panels"), [(6, 1), (8, 4), (3, 2)])
def test_nhwc_patches_pack_as_a(run_on_cpu, name: str, lanes: int, panels: int) -> None:
    spec = _spec(name, "NHWC")
    x = np.random.default_rng(3).uniform(-1, 1, spec.x_shape).astype(np.float32)
    kernel = conv_pack.pack_nhwc_patches_kernel("pack_patches", spec, lanes, panels)
    expected = conv_pack.pack_rows(conv_pack.im2col(spec, x), lanes)
    got = _run(run_on_cpu, kernel, {"x": x}, "ap", expected.shape)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize(("lanes", "panels"), [(16, 1), (6, 2), (4, 5)])
def test_the_weight_packs_as_channel_panels(run_on_cpu, layout: str, lanes: int, panels: int) -> None:
    spec = _spec("uneven", layout)
    weight = np.random.default_rng(4).uniform(-1, 1, spec.weight_shape).astype(np.float32)
    kernel = conv_pack.pack_weight_kernel("pack_weight", spec, lanes, panels)
    expected = conv_pack.pack_rows(weight.reshape(spec.k, -1), lanes)
    got = _run(run_on_cpu, kernel, {"weight": weight}, "wp", expected.shape)
    np.testing.assert_array_equal(got, expected)


def test_the_packed_reference_layout_matches_the_contract() -> None:
    a = np.arange(5 * 3, dtype=np.float32).reshape(5, 3)
    packed = conv_pack.pack_rows(a, 2)
    assert packed.shape == (3, 3, 2)
    # [p, kk, r] = A[p*MR + r, kk]; zero past M.
    assert packed[1, 2, 1] == a[3, 2] and packed[2, 0, 0] == a[4, 0] and packed[2, 1, 1] == 0.0
    b = a.T.copy()  # [K=3, N=5]
    assert conv_pack.pack_columns(b, 4)[1, 2, 0] == b[2, 4]


def test_offsets_computed_by_hand_widen_past_32_bits() -> None:
    """A flat offset the packer forms itself is 64-bit once its tensor passes 2^31 - 1 elements (rendered
    only: such tensors do not fit a test)."""
    from compiler.codegen.cpp import render_host

    big = Conv2dSpec(n=3, c=1031, h=1024, w=1000, k=257, r=3, s=3, padding=(1, 1), layout="NHWC")
    assert big.n * big.h * big.w * big.c > 2**31
    source = render_host(conv_pack.pack_nhwc_patches_kernel("pack", big, 8, 4)).source
    assert "const long long at0 = " in source
    small = Conv2dSpec(n=1, c=64, h=56, w=56, k=64, r=3, s=3, padding=(1, 1), layout="NHWC")
    assert "const int at0 = " in render_host(conv_pack.pack_nhwc_patches_kernel("pack", small, 8, 4)).source
    wide = Conv2dSpec(n=1, c=30011, h=3, w=3, k=8000, r=3, s=3, padding=(1, 1))
    assert "const long long row0 = " in render_host(conv_pack.pack_weight_kernel("pack", wide, 8, 4)).source
