"""The tensor-core matmul template: whole level-1 spaces on the emulator, layouts, alignment, the space."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compiler.backends import emu, get_target
from compiler.codegen import render_program
from compiler.device import DEVICES, DeviceSpec
from compiler.numeric import TOLERANCE, from_storage, poisoned, relative_error
from compiler.ops.gemm_mma import STATIC_SHARED_LIMIT, MmaSchedule, shared_bytes
from compiler.ops.matmul import OPERATOR
from compiler.ops.matmul_mma import build, copy_width, space
from compiler.ops.matmul_spec import MatmulSpec, matmul_inputs, matmul_reference
from search.trial import TrialStatus
from search.verify import CheckResult, check_schedules

H200 = DEVICES["h200"]
TARGET = get_target("emu", gpu=H200)


def check_all(spec: MatmulSpec, schedules: Sequence[MmaSchedule]) -> list[CheckResult]:
    return check_schedules(OPERATOR, spec, schedules, target=TARGET, seed=7)


def assert_none_fail(results: list[CheckResult]) -> None:
    passing = (TrialStatus.OK, TrialStatus.INVALID)
    failed = [(r.schedule, r.status, r.message) for r in results if r.status not in passing]
    assert not failed, failed
    assert sum(r.status is TrialStatus.OK for r in results) >= len(results) // 2


@pytest.mark.parametrize(("dtype", "layout_a", "layout_b"), [("float16", "row", "col"), ("bfloat16", "col", "row")])
def test_whole_level_1_space_at_an_awkward_shape(dtype: str, layout_a: str, layout_b: str) -> None:
    spec = MatmulSpec(m=67, n=45, k=83, batch=3, dtype=dtype, layout_a=layout_a, layout_b=layout_b)
    schedules = space(spec, H200, 1).candidates()
    results = check_all(spec, schedules)
    assert_none_fail(results)
    for result in results:
        if result.status is TrialStatus.OK:
            assert result.error is not None and result.error <= TOLERANCE[dtype]
            assert all(u.spill_stores == 0 and u.spill_loads == 0 for u in result.usage.values())
            assert set(result.usage) == {"sm_80", "sm_90"}


@pytest.mark.parametrize(
    ("m", "n", "k", "layout_a", "layout_b", "dtype"),
    [
        (72, 40, 96, "row", "row", "float16"),  # every row 16-byte aligned: cp.async 16
        (36, 44, 84, "col", "col", "bfloat16"),  # 8-byte copies
        (30, 46, 90, "row", "row", "bfloat16"),  # 4-byte copies
        (17, 9, 5, "col", "col", "float16"),  # element loads, K below one mma step
    ],
)
def test_layouts_and_copy_widths_on_a_seeded_sample(m: int, n: int, k: int, layout_a: str, layout_b: str,
                                                     dtype: str) -> None:
    spec = MatmulSpec(m=m, n=n, k=k, batch=2, dtype=dtype, layout_a=layout_a, layout_b=layout_b)
    results = check_all(spec, space(spec, H200, 2).sample(2, seed=m))
    assert all(r.status is TrialStatus.OK for r in results), [(r.schedule, r.message) for r in results]


def test_copy_width_follows_row_alignment() -> None:
    spec = MatmulSpec(m=72, n=40, k=96, dtype="float16", layout_a="row", layout_b="row")
    source = render_program(build(spec, MmaSchedule(64, 64, 32, 32, 32, 2)))[0].source
    assert "wm_cp_async_16(" in source and "wm_cp_async_4(" not in source
    assert "wm_ldmatrix_x4(" in source and "wm_ldmatrix_x4_trans(" in source  # row B is n-contiguous
    assert "reinterpret_cast<__half2*>(c" in source  # an even N stores C in f16 pairs
    odd = render_program(build(spec.model_copy(update={"k": 83}), MmaSchedule(64, 64, 32, 32, 32, 2)))[0].source
    assert "wm_cp_async_4(" not in odd and "wm_cp_async_16(" in odd  # A falls back to element loads; B stays wide
    assert [copy_width(e) for e in (8, 12, 6, 7)] == [8, 4, 2, 1]


@pytest.mark.parametrize(("n", "pair"), [(46, True), (45, False)])
def test_bf16_output_is_stored_in_pairs_when_rows_allow(n: int, pair: bool) -> None:
    spec = MatmulSpec(m=33, n=n, k=40, dtype="bfloat16")
    schedule = MmaSchedule(64, 64, 32, 32, 32, 2)
    source = render_program(build(spec, schedule))[0].source
    assert ("*reinterpret_cast<__nv_bfloat162*>(c" in source) is pair
    assert ("__floats2bfloat162_rn(" in source) is pair
    (result,) = check_all(spec, [schedule])
    assert result.status is TrialStatus.OK, result.message


def test_a_deep_pipeline_uses_dynamic_shared_memory() -> None:
    schedule = MmaSchedule(block_m=128, block_n=128, block_k=64, warp_m=64, warp_n=64, stages=4)
    spec = MatmulSpec(m=130, n=70, k=200, dtype="float16", layout_a="col", layout_b="col")
    kernel = render_program(build(spec, schedule))[0]
    assert kernel.shared_bytes == shared_bytes(schedule, False, True) > STATIC_SHARED_LIMIT
    inputs = matmul_inputs(spec, np.random.default_rng(3))
    c = poisoned(spec.c_shape, spec.dtype)
    emu.run(kernel, [inputs["a"], inputs["b"], c])
    error = relative_error(from_storage(c, spec.dtype), matmul_reference(spec, inputs)["c"])
    assert error <= TOLERANCE["float16"]


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    m=st.integers(1, 70), n=st.integers(1, 70), k=st.integers(1, 70), batch=st.integers(1, 2),
    dtype=st.sampled_from(["float16", "bfloat16"]), layout_a=st.sampled_from(["row", "col"]),
    layout_b=st.sampled_from(["row", "col"]), pick=st.integers(0, 10**6),
)
def test_random_specs_and_sampled_schedules(m: int, n: int, k: int, batch: int, dtype: str, layout_a: str,
                                            layout_b: str, pick: int) -> None:
    spec = MatmulSpec(m=m, n=n, k=k, batch=batch, dtype=dtype, layout_a=layout_a, layout_b=layout_b)
    candidates = [s for s in space(spec, H200, 2).candidates() if s.threads <= 256]
    result = check_all(spec, [candidates[pick % len(candidates)]])[0]
    assert result.status is TrialStatus.OK, (result.schedule, result.message)


def test_space_sizes_and_constraints() -> None:
    spec = MatmulSpec(m=67, n=45, k=83, batch=3, dtype="float16")
    level1 = space(spec, H200, 1).enumerate()
    level2 = space(spec, H200, 2).enumerate()
    assert 16 <= len(level1.valid) <= 48
    assert 300 <= len(level2.valid) <= 3000
    assert set(level2.rejected) >= {"tile divisibility", "threads <= max per block", "cp.async mappings tile the block"}
    for s in level2.valid:
        assert s.threads <= 1024 and s.register_estimate() <= 255 and s.register_estimate() * s.threads <= 65536
        assert shared_bytes(s) <= H200.max_shared_dynamic
        assert s.block_m % s.warp_m == 0 and s.block_n % s.warp_n == 0 and s.warp_m % 16 == 0 and s.warp_n % 16 == 0
        assert (s.block_m * s.block_k // 8) % s.threads == 0 and (s.block_n * s.block_k // 8) % s.threads == 0


def test_shared_memory_limit_follows_the_device() -> None:
    spec = MatmulSpec(m=64, n=64, k=64, dtype="bfloat16")
    small = DeviceSpec(name="small", arch="sm_80", sm_count=1, max_shared_dynamic=48 * 1024)
    assert space(spec, small, 2).enumerate().rejected.get("shared memory <= device limit", 0) > 0
    assert len(space(spec, small, 2).candidates()) < len(space(spec, H200, 2).candidates())


def test_bad_requests_name_the_problem() -> None:
    spec = MatmulSpec(m=8, n=8, k=8, dtype="float16")
    with pytest.raises(ValueError, match="level"):
        space(spec, H200, 3)
    with pytest.raises(ValueError, match="float32"):
        build(spec.model_copy(update={"dtype": "float32"}), MmaSchedule(64, 64, 32, 32, 32, 2))
    with pytest.raises(ValueError, match="warp tile"):
        build(spec, MmaSchedule(64, 64, 32, 24, 32, 2))
    with pytest.raises(ValueError, match="stages"):
        build(spec, MmaSchedule(64, 64, 32, 32, 32, 5))


@pytest.mark.parametrize(
    ("layout_a", "layout_b", "schedule"),
    [("row", "row", MmaSchedule(64, 64, 32, 32, 32, 2)), ("col", "col", MmaSchedule(64, 64, 16, 32, 32, 4)),
     ("row", "col", MmaSchedule(32, 64, 64, 32, 32, 3))],
)
def test_the_pipeline_has_no_shared_memory_races(layout_a: str, layout_b: str, schedule: MmaSchedule) -> None:
    """Many K tiles per stage count: a barrier or wait count off by one shows up as a race."""
    spec = MatmulSpec(m=70, n=60, k=168, dtype="float16", layout_a=layout_a, layout_b=layout_b)
    inputs = matmul_inputs(spec, np.random.default_rng(5))
    c = poisoned(spec.c_shape, spec.dtype)
    emu.run(render_program(build(spec, schedule))[0], [inputs["a"], inputs["b"], c], detect_races=True)
    assert relative_error(from_storage(c, spec.dtype), matmul_reference(spec, inputs)["c"]) <= TOLERANCE["float16"]
