"""The SIMT matmul template: its whole level-1 space and samples of level 2 on the emulator against numpy,
the spaces' sizes and constraints, and the shape of the generated code."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compiler.backends import emu, get_target
from compiler.codegen import render_program
from compiler.device import DEVICES, DeviceSpec
from compiler.ops import matmul_simt
from compiler.ops.gemm_simt import SimtTile, load_mapping
from compiler.ops.matmul import OPERATOR
from compiler.ops.matmul_simt import SimtSchedule, build, operand_vectors, space
from compiler.ops.matmul_spec import MatmulSpec
from compiler.program import launch_arguments
from search.trial import TrialStatus
from search.verify import CheckResult, Oracle, check_schedule

H200 = DEVICES["h200"]
AWKWARD = {"m": 67, "n": 45, "k": 83, "batch": 3}
#: Every contiguous extent a multiple of 4 (16-byte loads for both operands), none a multiple of a tile.
ALIGNED = {"m": 68, "n": 44, "k": 84, "batch": 2}
LAYOUTS = [("row", "row"), ("row", "col"), ("col", "row"), ("col", "col")]


def check(spec: MatmulSpec, schedule: SimtSchedule, seed: int = 0) -> CheckResult:
    return check_schedule(OPERATOR, spec, schedule, target=get_target("emu", gpu=H200), seed=seed)


def assert_passes(result: CheckResult) -> None:
    """A schedule either computes the right answer or is pruned for its real resources; nothing else."""
    assert result.status in (TrialStatus.OK, TrialStatus.INVALID), f"{result.schedule}: {result.message}"
    if result.status is TrialStatus.OK:
        assert set(result.usage) == {"sm_80", "sm_90"}, result.message  # compiled for both archs
        assert result.error is not None and result.error <= 1e-5
    else:  # pruned at the first arch whose report rules it out: later archs are not compiled
        assert "spills" in result.message or ">" in result.message


MIXED = MatmulSpec(**AWKWARD, layout_a="col", layout_b="row")
LEVEL1_MIXED = space(MIXED, H200, 1).candidates()


@pytest.mark.parametrize("schedule", LEVEL1_MIXED, ids=lambda s: "-".join(map(str, vars(s).values())))
def test_whole_level1_space_at_an_awkward_batched_shape(schedule: SimtSchedule) -> None:
    assert_passes(check(MIXED, schedule))


@pytest.mark.parametrize(("layout_a", "layout_b"), [lay for lay in LAYOUTS if lay != ("col", "row")])
def test_level1_sample_in_the_other_layouts(layout_a: str, layout_b: str) -> None:
    spec = MatmulSpec(**AWKWARD, layout_a=layout_a, layout_b=layout_b)
    for schedule in space(spec, H200, 1).sample(3, seed=len(layout_a + layout_b)):
        assert_passes(check(spec, schedule))


@pytest.mark.parametrize(("layout_a", "layout_b"), LAYOUTS)
def test_vector_loads_at_aligned_ragged_shapes(layout_a: str, layout_b: str) -> None:
    spec = MatmulSpec(**ALIGNED, layout_a=layout_a, layout_b=layout_b)
    candidates = space(spec, H200, 2).candidates()
    vectored = [s for s in candidates if s.vector == 4]
    scalar = [s for s in candidates if s.vector == 1]
    picks = (vectored[len(vectored) // 3], scalar[len(scalar) // 2])
    for schedule in picks:
        result = check(spec, schedule, seed=7)
        assert_passes(result)
        assert len(result.kernels) == 1
        assert ("float4" in result.kernels[0].source) == (schedule.vector == 4)


@pytest.mark.parametrize(("layout_a", "schedule"), [
    ("row", SimtSchedule(2, 1, 2, 1, 8, 4, 4, 8, 4)),  # k-contiguous A: transposing scalar stores
    ("col", SimtSchedule(1, 2, 1, 2, 4, 4, 4, 16, 4)),  # m-contiguous A: 16-byte shared stores
])
def test_double_buffering_is_race_free(layout_a: str, schedule: SimtSchedule) -> None:
    spec = MatmulSpec(**ALIGNED, layout_a=layout_a)
    program = build(spec, schedule)
    (kernel,) = render_program(program)
    oracle = Oracle(OPERATOR, spec, seed=3)
    buffers, outputs = oracle.arguments(program)
    (args,) = launch_arguments(program, buffers)
    emu.run(kernel, args, detect_races=True)  # raises SharedMemoryRaceError on a missing barrier
    error, _ = oracle.worst_error(outputs)
    assert error <= 1e-5


@st.composite
def spec_and_schedule(draw: st.DrawFn) -> tuple[MatmulSpec, SimtSchedule]:
    dims = st.integers(1, 70)
    layout = st.sampled_from(["row", "col"])
    spec = MatmulSpec(m=draw(dims), n=draw(dims), k=draw(dims), batch=draw(st.integers(1, 3)),
                      layout_a=draw(layout), layout_b=draw(layout))
    level = draw(st.sampled_from([1, 2]))
    return spec, draw(st.sampled_from(space(spec, H200, level).candidates()))


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec_and_schedule())
def test_random_specs_and_schedules_match_numpy(case: tuple[MatmulSpec, SimtSchedule]) -> None:
    spec, schedule = case
    assert_passes(check(spec, schedule))


# --- spaces ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dims", [(1, 1, 1, 1), (67, 45, 83, 3), (1, 4096, 512, 1), (4096, 1, 7, 2),
                                  (2048, 2048, 2048, 1)])
@pytest.mark.parametrize(("layout_a", "layout_b"), LAYOUTS)
def test_level1_is_small_and_never_empty(dims: tuple[int, int, int, int], layout_a: str, layout_b: str) -> None:
    m, n, k, batch = dims
    spec = MatmulSpec(m=m, n=n, k=k, batch=batch, layout_a=layout_a, layout_b=layout_b)
    found = space(spec, H200, 1).enumerate()
    assert 1 <= len(found.valid) <= 32
    assert found.total == 32


def test_level2_has_hundreds_to_thousands_of_valid_schedules() -> None:
    big = space(MatmulSpec(m=4096, n=4096, k=4096), H200, 2).enumerate()
    assert 1000 <= len(big.valid) <= 5000
    assert len(set(big.valid)) == len(big.valid)
    small = space(MatmulSpec(**AWKWARD), H200, 2).enumerate()
    assert 100 <= len(small.valid) < len(big.valid)
    for rule in ("shared memory <= 49152 B", "estimated registers per thread <= 255",
                 "at least 2 FMAs per shared-memory load"):
        assert big.rejected[rule] > 0, rule


def test_tiny_problems_reject_big_tiles_but_keep_small_ones() -> None:
    found = space(MatmulSpec(m=1, n=1, k=1), H200, 2).enumerate()
    assert found.valid and all(s.block_m <= 32 and s.block_n <= 32 for s in found.valid)
    assert found.rejected["block tile within 32 x 32 (2x the padded problem)"] > 1000


def test_vector_4_without_an_aligned_operand_is_a_duplicate_at_level2_only() -> None:
    spec = MatmulSpec(**AWKWARD)  # m, n, k all odd: nothing is 16-byte aligned
    level2 = space(spec, H200, 2).enumerate()
    assert all(s.vector == 1 for s in level2.valid)
    assert level2.rejected["vector=4 with no operand divisible by 4 duplicates vector=1"] > 0
    level1 = space(spec, H200, 1).candidates()
    assert level1 and all(s.vector == 4 for s in level1)  # asks for 16 bytes, falls back to scalar loads
    assert "float4" not in render_program(build(spec, level1[0]))[0].source


def test_operand_vectors_follow_the_contiguous_extent() -> None:
    spec = MatmulSpec(m=8, n=6, k=12)
    assert operand_vectors(spec, 4) == (4, 1)  # A row-major: k=12 contiguous; B row-major: n=6
    assert operand_vectors(spec.model_copy(update={"layout_a": "col", "layout_b": "col"}), 4) == (4, 4)
    assert operand_vectors(spec.model_copy(update={"layout_a": "col"}), 4) == (4, 1)
    assert operand_vectors(spec, 1) == (1, 1)


def test_device_limits_reject_schedules() -> None:
    spec = MatmulSpec(m=4096, n=4096, k=4096)
    small = DeviceSpec(name="small", arch="sm_80", sm_count=1, max_threads_per_block=128,
                       max_shared_static=8 * 1024)
    found = space(spec, small, 2).enumerate()
    assert found.valid
    assert all(s.threads <= 128 and s.shared_bytes() <= 8 * 1024 for s in found.valid)
    assert found.rejected["threads per block <= 128"] > 0
    assert found.rejected["shared memory <= 8192 B"] > 0
    few_registers = DeviceSpec(name="few registers", arch="sm_80", sm_count=1, max_registers_per_block=8 * 1024)
    found = space(spec, few_registers, 2).enumerate()
    assert found.valid and found.rejected["estimated registers per block <= 8192"] > 0
    assert all(matmul_simt.estimated_registers(s, spec) * s.threads <= 8 * 1024 for s in found.valid)


def test_load_divisibility_rule_names_the_schedule_it_rejects() -> None:
    spec = MatmulSpec(m=256, n=256, k=256)
    valid = SimtSchedule(warps_m=1, warps_n=2, repeat_m=1, repeat_n=1, lanes_m=4, thread_m=4, thread_n=4,
                         block_k=8, vector=1)
    odd = replace(valid, thread_m=3)  # a 12 x 8 A tile: 96 loads for 64 threads
    assert load_mapping(odd.block_m, odd.block_k, True, 1, odd.threads) is None
    rules = space(spec, H200, 2)
    assert rules.violation(valid) is None
    assert rules.violation(odd) == "tile loads divide among the threads"
    with pytest.raises(ValueError, match="does not divide among 64 threads"):
        build(spec, odd)


def test_schedules_are_validated_values() -> None:
    schedule = SimtSchedule(1, 1, 1, 1, 4, 4, 4, 8, 4)
    assert schedule == SimtSchedule(1, 1, 1, 1, 4, 4, 4, 8, 4) and hash(schedule)
    assert isinstance(schedule, SimtTile) and schedule.lanes_n == 8
    with pytest.raises(ValueError, match="lanes_m=5"):
        SimtSchedule(1, 1, 1, 1, 5, 4, 4, 8, 1)
    with pytest.raises(ValueError, match="vector must be 1 or 4"):
        SimtSchedule(1, 1, 1, 1, 4, 4, 4, 8, 2)
    with pytest.raises(ValueError, match="block_k must be a positive int"):
        SimtSchedule(1, 1, 1, 1, 4, 4, 4, 0, 1)


def test_other_dtypes_and_levels_are_refused() -> None:
    with pytest.raises(ValueError, match="float16"):
        space(MatmulSpec(m=8, n=8, k=8, dtype="float16"), H200, 1)
    with pytest.raises(ValueError, match="level 3"):
        space(MatmulSpec(m=8, n=8, k=8), H200, 3)
    with pytest.raises(ValueError, match="bfloat16"):
        build(MatmulSpec(m=8, n=8, k=8, dtype="bfloat16"), SimtSchedule(1, 1, 1, 1, 4, 4, 4, 8, 1))


# --- generated code ----------------------------------------------------------------------------------


def test_kernel_launch_and_structure() -> None:
    spec = MatmulSpec(m=100, n=70, k=50, batch=3, layout_b="col")
    schedule = SimtSchedule(2, 2, 2, 1, 4, 4, 4, 16, 1)  # a 64 x 64 block tile of 128 threads
    kernel = render_program(build(spec, schedule))[0]
    assert kernel.grid == (2 * 2, 1, 3) and kernel.block == (128, 1, 1) and kernel.shared_bytes == 0
    assert [p.name for p in kernel.params] == ["a", "b", "c"]
    text = kernel.source
    assert "__shared__ __align__(16) float smem_a[2][16][68];" in text  # rows padded against bank conflicts
    assert "__shared__ __align__(16) float smem_b[2][16][68];" in text
    assert schedule.shared_bytes() == 2 * 16 * 2 * 68 * 4
    assert "float acc[8][4];" in text
    assert text.count("__syncthreads();") == 2  # after the prologue, and once per k step
    assert "for (int k_tile = 0; k_tile < 4; ++k_tile)" in text
