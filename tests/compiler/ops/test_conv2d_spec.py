"""The conv2d workload without kernels: spec validation, the reference against a naive loop, counts,
the registry and dispatch, and which chunks of the im2col view may move as one load."""

from __future__ import annotations

from itertools import product

import numpy as np
import pytest
from pydantic import ValidationError

from compiler.device import DEVICES
from compiler.ops import conv2d_mma, conv2d_simt, get_operator, parse_spec
from compiler.ops.conv2d import OPERATOR
from compiler.ops.conv2d_gemm import a_chunk, b_chunk
from compiler.ops.conv2d_spec import Conv2dSpec, conv2d_nchw
from compiler.space import schedule_values

H200 = DEVICES["h200"]


def naive_conv(x: np.ndarray, weight: np.ndarray, stride: tuple[int, int], padding: tuple[int, int],
               dilation: tuple[int, int]) -> np.ndarray:
    """The definition, one output element and one tap at a time (NCHW)."""
    n, c, h, w = x.shape
    k, _, r, s = weight.shape
    p = (h + 2 * padding[0] - dilation[0] * (r - 1) - 1) // stride[0] + 1
    q = (w + 2 * padding[1] - dilation[1] * (s - 1) - 1) // stride[1] + 1
    y = np.zeros((n, k, p, q))
    for b, o, i, j, ci, ri, si in product(range(n), range(k), range(p), range(q), range(c), range(r), range(s)):
        hi = i * stride[0] - padding[0] + ri * dilation[0]
        wi = j * stride[1] - padding[1] + si * dilation[1]
        if 0 <= hi < h and 0 <= wi < w:
            y[b, o, i, j] += x[b, ci, hi, wi] * weight[o, ci, ri, si]
    return y


@pytest.mark.parametrize(
    ("shape", "filt", "stride", "padding", "dilation"),
    [
        ((2, 3, 7, 6), (4, 3, 3, 3), (1, 1), (0, 0), (1, 1)),
        ((1, 2, 9, 8), (3, 2, 3, 2), (2, 3), (1, 2), (1, 1)),
        ((2, 1, 9, 10), (2, 1, 2, 3), (1, 2), (2, 1), (2, 3)),
        ((1, 3, 5, 5), (2, 3, 1, 1), (2, 2), (0, 0), (1, 1)),
    ],
)
def test_reference_matches_a_naive_loop(shape: tuple[int, ...], filt: tuple[int, ...], stride: tuple[int, int],
                                        padding: tuple[int, int], dilation: tuple[int, int]) -> None:
    rng = np.random.default_rng(1)
    x, weight = rng.uniform(-1, 1, shape), rng.uniform(-1, 1, filt)
    expected = naive_conv(x, weight, stride, padding, dilation)
    np.testing.assert_allclose(conv2d_nchw(x, weight, stride, padding, dilation), expected, rtol=1e-12, atol=1e-12)


def test_nhwc_reference_is_the_nchw_one_transposed() -> None:
    fields = {"n": 2, "c": 3, "h": 9, "w": 7, "k": 4, "r": 3, "s": 2, "stride": (2, 1), "padding": (1, 1),
              "dilation": (1, 2)}
    nchw, nhwc = Conv2dSpec(**fields), Conv2dSpec(**fields, layout="NHWC")
    inputs = OPERATOR.inputs(nchw, np.random.default_rng(2))
    assert np.unique(inputs["x"]).size > 100 and inputs["x"].dtype == np.float32
    expected = OPERATOR.reference(nchw, inputs)["y"]
    transposed = {"x": inputs["x"].transpose(0, 2, 3, 1), "weight": inputs["weight"].transpose(0, 2, 3, 1)}
    assert nhwc.x_shape == (2, 9, 7, 3) and nhwc.weight_shape == (4, 3, 2, 3) and nhwc.y_shape == (2, 5, 7, 4)
    np.testing.assert_allclose(OPERATOR.reference(nhwc, transposed)["y"], expected.transpose(0, 2, 3, 1))


def test_shapes_counts_and_the_client_json() -> None:
    spec = parse_spec({"op": "conv2d", "n": 2, "c": 3, "h": 17, "w": 19, "k": 5, "r": 3, "s": 3,
                       "stride": [2, 2], "padding": [1, 1]})
    assert spec == Conv2dSpec(n=2, c=3, h=17, w=19, k=5, r=3, s=3, stride=(2, 2), padding=(1, 1))
    assert (spec.p, spec.q, spec.gemm_shape) == (9, 10, (180, 5, 27))
    assert spec.x_shape == (2, 3, 17, 19) and spec.weight_shape == (5, 3, 3, 3) and spec.y_shape == (2, 5, 9, 10)
    assert OPERATOR.flops(spec) == 2 * 2 * 5 * 9 * 10 * 3 * 3 * 3
    assert OPERATOR.min_bytes(spec) == 4 * (2 * 3 * 17 * 19 + 5 * 27 + 2 * 5 * 9 * 10)
    assert '"dilation":[1,1]' in spec.canonical_json() and '"layout":"NCHW"' in spec.canonical_json()
    (out,) = OPERATOR.outputs(spec.model_copy(update={"dtype": "bfloat16"}))
    assert (out.name, out.shape, out.dtype) == ("y", (2, 5, 9, 10), "bfloat16")


#: A field error names the field on its own line; a cross-field error starts with what is wrong.
@pytest.mark.parametrize(
    ("change", "pattern"),
    [
        ({"c": 0}, r"\nc\n"),
        ({"h": -3}, r"\nh\n"),
        ({"k": 1 << 30}, r"\nk\n"),
        ({"stride": [0, 1]}, r"Value error, stride \[0, 1\]"),
        ({"padding": [1, -1]}, r"Value error, padding \[1, -1\]"),
        ({"dilation": [1, 0]}, r"Value error, dilation \[1, 0\]"),
        ({"stride": [1, 1, 1]}, r"\nstride\n"),
        ({"padding": -1}, r"Value error, padding \[-1, -1\]"),
        ({"padding": True}, r"\npadding\n"),
        ({"stride": 1.5}, r"\nstride\n"),
        ({"dilation": "2"}, r"\ndilation\n"),
        ({"r": 9}, r"Value error, output p = 0: the dilated filter does not fit in h=8"),
        ({"s": 4, "dilation": [1, 5]}, r"Value error, output q = -7"),
        ({"layout": "NCWH"}, r"\nlayout\n"),
        ({"dtype": "float64"}, r"\ndtype\n"),
        ({"groups": 2}, r"\ngroups\n"),
        ({"n": 65, "c": 256, "h": 1024, "w": 1024}, r"Value error, x would take 65.0 GiB"),
        ({"n": 64, "c": 1, "h": 8192, "w": 8192, "dtype": "float16"}, r"implicit GEMM of 4292870400 x 9"),
    ],
)
def test_bad_specs_name_the_field(change: dict[str, object], pattern: str) -> None:
    data = {"op": "conv2d", "n": 1, "c": 3, "h": 8, "w": 8, "k": 4, "r": 3, "s": 3, **change}
    with pytest.raises(ValidationError, match=pattern):
        parse_spec(data)


def test_one_int_stands_for_both_axes_and_is_the_same_workload_as_the_pair() -> None:
    base = {"op": "conv2d", "n": 1, "c": 3, "h": 9, "w": 11, "k": 4, "r": 3, "s": 3}
    short = parse_spec({**base, "stride": 2, "padding": 1, "dilation": 2})
    pair = parse_spec({**base, "stride": [2, 2], "padding": [1, 1], "dilation": [2, 2]})
    assert (short.stride, short.padding, short.dilation) == ((2, 2), (1, 1), (2, 2))
    assert short.canonical_json() == pair.canonical_json() and short.workload_hash() == pair.workload_hash()
    assert (short.p, short.q) == (4, 5)
    mixed = parse_spec({**base, "stride": [1, 2], "padding": 0})
    assert (mixed.stride, mixed.padding, (mixed.p, mixed.q)) == ((1, 2), (0, 0), (7, 5))


def test_dispatch_by_dtype_and_schedules_rebuild_from_values() -> None:
    assert get_operator("conv2d") is OPERATOR
    spec = Conv2dSpec(n=1, c=4, h=6, w=6, k=8, r=3, s=3)
    for dtype, module, template in (("float32", conv2d_simt, "conv2d_simt"), ("float16", conv2d_mma, "conv2d_mma"),
                                    ("bfloat16", conv2d_mma, "conv2d_mma")):
        typed = spec.model_copy(update={"dtype": dtype})
        assert OPERATOR.template_for(typed, "cuda") is module
        space = OPERATOR.space(typed, H200, 1)
        assert space.template == template
        assert all(space.schedule(schedule_values(s)) == s for s in space.candidates())
    with pytest.raises(ValueError, match="float32"):
        conv2d_mma.space(spec, H200, 1)
    schedule = conv2d_simt.space(spec, H200, 1).candidates()[0]
    with pytest.raises(ValueError, match="bfloat16"):
        conv2d_simt.build(spec.model_copy(update={"dtype": "bfloat16"}), schedule)


def test_level_1_spaces_are_small_and_level_2_large() -> None:
    for dtype in ("float32", "float16"):
        for layout in ("NCHW", "NHWC"):
            spec = Conv2dSpec(n=2, c=3, h=17, w=19, k=5, r=3, s=3, stride=(2, 2), padding=(1, 1), layout=layout,
                              dtype=dtype)
            level1 = OPERATOR.space(spec, H200, 1).enumerate()
            assert 8 <= len(level1.valid) <= 40, (dtype, layout, len(level1.valid))
            wide = spec.model_copy(update={"k": 256, "c": 64})
            assert len(OPERATOR.space(wide, H200, 2).candidates()) >= 300


@pytest.mark.parametrize(
    ("fields", "a", "b"),
    [
        ({"layout": "NHWC", "c": 64, "padding": (1, 1)}, 8, 8),  # channel runs: any padding or stride
        ({"layout": "NHWC", "c": 6, "stride": (2, 2)}, 2, 2),
        ({"layout": "NHWC", "c": 3}, 1, 1),
        ({"c": 64, "r": 1, "s": 1, "h": 56, "w": 56}, 8, 8),  # pointwise NCHW: rows of 56 output columns
        ({"c": 64, "r": 1, "s": 1, "h": 56, "w": 56, "stride": (2, 2)}, 1, 8),  # strided columns
        ({"c": 64, "r": 1, "s": 1, "h": 7, "w": 7}, 1, 8),  # odd row length
        ({"c": 16, "r": 1, "s": 1, "h": 20, "w": 18}, 2, 8),  # q = 18: pairs stay inside each row
        ({"c": 16, "r": 3, "s": 3, "h": 20, "w": 20}, 1, 8),  # taps one column apart: odd starts
        ({"c": 16, "r": 1, "s": 1, "h": 20, "w": 20, "padding": (1, 1)}, 1, 8),  # padding 1 splits pairs
        ({"c": 16, "r": 3, "s": 3, "h": 20, "w": 24, "padding": (2, 4), "dilation": (1, 4)}, 4, 8),
    ],
)
def test_wide_chunks_only_where_whole_and_aligned(fields: dict[str, object], a: int, b: int) -> None:
    spec = Conv2dSpec(**{"n": 2, "c": 8, "h": 12, "w": 12, "k": 8, "r": 3, "s": 3, **fields})  # type: ignore[arg-type]
    assert (a_chunk(spec, 8), b_chunk(spec, 8)) == (a, b)
