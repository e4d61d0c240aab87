"""conv2d kernels on the emulator: whole level-1 spaces at an awkward shape for every dtype and layout,
wide loads where the im2col view allows them, dilation, random specs, and ``warpmap check``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, assume, given, settings
from hypothesis import strategies as st

from compiler.backends import get_target
from compiler.codegen import render_program
from compiler.device import DEVICES
from compiler.numeric import TOLERANCE
from compiler.ops.conv2d import OPERATOR
from compiler.ops.conv2d_spec import Conv2dSpec
from compiler.ops.gemm_mma import MmaSchedule
from compiler.ops.matmul_simt import SimtSchedule
from search.trial import TrialStatus
from search.verify import CheckResult, check_schedules
from service.cli import main

H200 = DEVICES["h200"]
TARGET = get_target("emu", gpu=H200)
#: Padding 1, stride 2, odd channels and odd image sides: every edge of the im2col view is ragged.
AWKWARD: dict[str, Any] = {"n": 2, "c": 3, "h": 17, "w": 19, "k": 5, "r": 3, "s": 3, "stride": (2, 2),
                           "padding": (1, 1)}


def check_all(spec: Conv2dSpec, schedules: Sequence[Any]) -> list[CheckResult]:
    return check_schedules(OPERATOR, spec, schedules, target=TARGET, seed=5)


def assert_all_pass(spec: Conv2dSpec, results: list[CheckResult]) -> None:
    failed = [(r.schedule, r.status, r.message) for r in results if r.status is not TrialStatus.OK]
    assert not failed, failed
    for result in results:
        assert result.error is not None and result.error <= TOLERANCE[spec.dtype]
        assert all(u.spill_stores == 0 and u.spill_loads == 0 for u in result.usage.values())


@pytest.mark.parametrize(
    ("dtype", "layout"),
    [("float32", "NCHW"), ("float32", "NHWC"), ("float16", "NCHW"), ("bfloat16", "NHWC")],
)
def test_whole_level_1_space_at_an_awkward_shape(dtype: str, layout: str) -> None:
    spec = Conv2dSpec(**AWKWARD, dtype=dtype, layout=layout)
    schedules = OPERATOR.space(spec, H200, 1).candidates()
    assert len(schedules) >= 8
    assert_all_pass(spec, check_all(spec, schedules))


@pytest.mark.parametrize(("dtype", "layout"), [("float16", "NHWC"), ("bfloat16", "NCHW")])
def test_tensor_cores_at_the_other_layout_on_a_sample(dtype: str, layout: str) -> None:
    spec = Conv2dSpec(**AWKWARD, dtype=dtype, layout=layout)
    assert_all_pass(spec, check_all(spec, OPERATOR.space(spec, H200, 1).sample(3, seed=1)))


@pytest.mark.parametrize(
    ("dtype", "layout"), [("float32", "NCHW"), ("float32", "NHWC"), ("float16", "NHWC"), ("bfloat16", "NCHW")]
)
def test_dilation_2_on_a_sample(dtype: str, layout: str) -> None:
    spec = Conv2dSpec(n=2, c=5, h=13, w=12, k=6, r=3, s=2, stride=(1, 2), padding=(2, 1), dilation=(2, 2),
                      dtype=dtype, layout=layout)
    assert (spec.p, spec.q) == (13, 6)
    assert_all_pass(spec, check_all(spec, OPERATOR.space(spec, H200, 1).sample(2, seed=3)))


SIMT = SimtSchedule(warps_m=2, warps_n=1, repeat_m=2, repeat_n=1, lanes_m=8, thread_m=4, thread_n=4, block_k=8,
                    vector=4)
MMA = MmaSchedule(block_m=64, block_n=64, block_k=32, warp_m=32, warp_n=32, stages=3)


@pytest.mark.parametrize(
    ("fields", "schedule", "needles"),
    [
        # NHWC channel runs of 4 floats: A and B both load float4
        ({"layout": "NHWC", "c": 8, "padding": (1, 1), "stride": (2, 1)}, SIMT, ("float4",)),
        # pointwise NCHW with rows of 8 output columns: A loads 4 consecutive pixels
        ({"c": 6, "r": 1, "s": 1, "h": 5, "w": 8}, SIMT, ("float4",)),
        # f16 NHWC, 8 channels: 16-byte copies of both operands, even k stored as __half2 pairs
        ({"layout": "NHWC", "c": 8, "k": 6, "padding": (1, 1), "dtype": "float16"}, MMA,
         ("wm_cp_async_16(", "__half2")),
        # pointwise NCHW, rows of 6 columns: 4-byte copies of output-column pairs
        ({"c": 12, "r": 1, "s": 1, "h": 7, "w": 6, "dtype": "bfloat16"}, MMA, ("wm_cp_async_4(", "wm_cp_async_8(")),
        # pointwise NCHW, rows of 16 columns: 16-byte copies along the pixels
        ({"c": 16, "r": 1, "s": 1, "h": 3, "w": 16, "dtype": "float16"}, MMA, ("wm_cp_async_16(",)),
        # NCHW with padding 2 and dilation 2: pixel pairs lie wholly inside or wholly in the padding
        ({"c": 3, "w": 10, "padding": (1, 2), "dilation": (1, 2), "dtype": "float16"}, MMA, ("wm_cp_async_4(",)),
        # the same with 4-pixel vectors on CUDA cores: padding 4, dilation 4
        ({"c": 3, "w": 12, "padding": (0, 4), "dilation": (2, 4)}, SIMT, ("float4",)),
    ],
)
def test_wide_loads_where_the_view_allows(fields: dict[str, Any], schedule: Any, needles: tuple[str, ...]) -> None:
    spec = Conv2dSpec(**{"n": 2, "h": 9, "w": 10, "k": 7, "r": 3, "s": 3, **fields})
    (result,) = check_all(spec, [schedule])
    assert_all_pass(spec, [result])
    assert len(result.kernels) == 1
    for needle in needles:
        assert needle in result.kernels[0].source, needle


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_nhwc_channel_runs_under_padding_and_stride_on_a_sample(dtype: str) -> None:
    spec = Conv2dSpec(n=2, c=8, h=9, w=11, k=6, r=3, s=3, stride=(2, 1), padding=(1, 1), layout="NHWC", dtype=dtype)
    assert_all_pass(spec, check_all(spec, OPERATOR.space(spec, H200, 1).sample(3, seed=2)))


def test_narrow_views_load_element_by_element() -> None:
    spec = Conv2dSpec(**AWKWARD, dtype="float16")
    source = render_program(OPERATOR.build(spec, MMA, "cuda"))[0].source  # c * r * s = 27 and strided columns
    assert not any(f"wm_cp_async_{size}(" in source for size in (4, 8, 16))
    simt = OPERATOR.build(spec.model_copy(update={"dtype": "float32"}), SIMT, "cuda")
    assert "float4" not in render_program(simt)[0].source


# No shrinking: every example runs kernels on the emulator; a failure is reported as found.
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow],
          phases=(Phase.explicit, Phase.reuse, Phase.generate))
@given(
    n=st.integers(1, 2), c=st.integers(1, 9), h=st.integers(1, 12), w=st.integers(1, 12), k=st.integers(1, 20),
    r=st.integers(1, 3), s=st.integers(1, 3), stride=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    padding=st.tuples(st.integers(0, 2), st.integers(0, 2)), dilation=st.tuples(st.integers(1, 2), st.integers(1, 2)),
    layout=st.sampled_from(["NCHW", "NHWC"]), dtype=st.sampled_from(["float32", "float16", "bfloat16"]),
    pick=st.integers(0, 10**6),
)
def test_random_specs_and_sampled_schedules(n: int, c: int, h: int, w: int, k: int, r: int, s: int,
                                            stride: tuple[int, int], padding: tuple[int, int],
                                            dilation: tuple[int, int], layout: str, dtype: str, pick: int) -> None:
    assume(h + 2 * padding[0] >= dilation[0] * (r - 1) + 1 and w + 2 * padding[1] >= dilation[1] * (s - 1) + 1)
    spec = Conv2dSpec(n=n, c=c, h=h, w=w, k=k, r=r, s=s, stride=stride, padding=padding, dilation=dilation,
                      layout=layout, dtype=dtype)
    candidates = [sch for sch in OPERATOR.space(spec, H200, 2).candidates() if sch.threads <= 256]
    (result,) = check_all(spec, [candidates[pick % len(candidates)]])
    if result.status is TrialStatus.INVALID:  # ptxas reported spills: pruned, as the contract says
        assert "spills" in result.message, result.message
        return
    assert_all_pass(spec, [result])


def test_warpmap_check_passes_the_whole_space(capsys: pytest.CaptureFixture[str]) -> None:
    spec = ('{"op":"conv2d","n":2,"c":3,"h":17,"w":19,"k":5,"r":3,"s":3,'
            '"stride":[2,2],"padding":[1,1]}')
    assert main(["check", "--spec", spec]) == 0
    out = capsys.readouterr().out
    assert "space conv2d_simt level 1" in out and " 0 failed" in out and "FAIL" not in out


def test_warpmap_check_names_a_bad_field(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--spec", '{"op":"conv2d","n":1,"c":3,"h":2,"w":8,"k":4,"r":3,"s":3}']) == 2
    assert "output p = 0" in capsys.readouterr().err
