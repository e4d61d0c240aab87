"""The cpu reduction template: sum, max and mean over every axis, every level-1 schedule, against float64."""

from __future__ import annotations

import numpy as np
import pytest

from compiler.cpu_device import detect_cpu
from compiler.ops.cpu import reduce as template
from compiler.ops.reduce import ReduceSpec, reduce_inputs, reduce_outputs, reduce_reference
from compiler.space import EmptySpaceError

DEVICE = detect_cpu()
L = DEVICE.f32_lanes
# Last axis: 1, shorter than a vector, primes past the unrolled width. Inner axes: inner 1 < L,
# a prime, a prime past four vectors; leading axis of a 2-D tensor.
CASES = [
    ((1,), 0), ((7,), 0), ((3, 1), 1), ((5, L + 3), 1), ((4, 4 * L * 3 + 5), 1), ((2, 3, 1021), 2),
    ((5, 37, 9), 1), ((3, 29, 4 * L + 7), 1), ((41, 2 * L + 1), 0), ((1, 13), 0), ((2, 1, 3), 1),
]
KINDS = ("sum", "max", "mean")


def _schedules(spec: ReduceSpec):
    return template.space(spec, DEVICE, 1).candidates()


def _check(spec: ReduceSpec, schedule, x: np.ndarray, run_on_cpu, assert_matches) -> np.ndarray:
    inputs = {"x": np.ascontiguousarray(x, dtype=np.float32)}
    outputs = reduce_outputs(spec)
    got = run_on_cpu(template.build(spec, schedule), inputs, outputs)
    assert_matches(got, reduce_reference(spec, inputs), outputs)
    return got["y"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("shape", "axis"), CASES, ids=str)
def test_every_level1_schedule_matches_numpy(shape, axis: int, kind: str, run_on_cpu, assert_matches) -> None:
    spec = ReduceSpec(shape=list(shape), axis=axis, kind=kind)
    x = reduce_inputs(spec, np.random.default_rng(sum(shape) * 31 + axis))["x"]
    schedules = _schedules(spec)
    assert schedules
    for schedule in schedules:
        y = _check(spec, schedule, x, run_on_cpu, assert_matches)
        assert np.all(np.isfinite(y)), schedule  # every output written: the NaN poison is gone


def test_level1_splits_a_long_axis_into_parts_and_a_final_pass(run_on_cpu, assert_matches) -> None:
    spec = ReduceSpec(shape=[3, 4099], axis=1, kind="sum")
    split = [s for s in _schedules(spec) if s.parts > 1]
    assert split
    program = template.build(spec, split[0])
    assert len(program.launches) == 2 and program.workspaces[0].shape == (4, 3)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("values", ["large", "negative", "tiny"])
def test_magnitudes(kind: str, values: str, run_on_cpu, assert_matches) -> None:
    rng = np.random.default_rng(9)
    x = {"large": rng.uniform(1e30, 3e33, (6, 53)), "negative": rng.uniform(-9e3, -1e3, (6, 53)),
         "tiny": rng.uniform(1e-30, 5e-30, (6, 53))}[values]
    for axis in (0, 1):
        spec = ReduceSpec(shape=[6, 53], axis=axis, kind=kind)
        for schedule in _schedules(spec)[:: 3]:
            _check(spec, schedule, x, run_on_cpu, assert_matches)


def test_a_long_sum_is_accurate_with_compensation(run_on_cpu, assert_matches) -> None:
    spec = ReduceSpec(shape=[1 << 21], axis=0, kind="sum")
    x = reduce_inputs(spec, np.random.default_rng(4))["x"]
    schedule = template.default_schedule(spec, DEVICE)
    assert schedule.compensated and schedule.parts > 1
    got = _check(spec, schedule, x, run_on_cpu, assert_matches)
    exact = reduce_reference(spec, {"x": x})["y"]
    assert abs(float(got.reshape(-1)[0]) - float(exact)) <= 4 * abs(float(exact)) * 2.0**-24


def test_a_sample_of_the_level2_space_matches_numpy(run_on_cpu, assert_matches) -> None:
    for shape, axis in (((37, 531), 1), ((531, 37), 0)):
        spec = ReduceSpec(shape=list(shape), axis=axis, kind="mean")
        space = template.space(spec, DEVICE, 2)
        x = reduce_inputs(spec, np.random.default_rng(2))["x"]
        for schedule in (*space.sample(4, seed=3), template.default_schedule(spec, DEVICE)):
            _check(spec, schedule, x, run_on_cpu, assert_matches)


def test_16_bit_inputs_are_refused_with_the_dtype_named() -> None:
    spec = ReduceSpec(shape=[4, 8], axis=1, kind="sum", dtype="float16")
    with pytest.raises(EmptySpaceError, match="float32 only, not float16"):
        template.space(spec, DEVICE, 1)
    with pytest.raises(ValueError, match="unknown space level 0"):
        template.space(ReduceSpec(shape=[4, 8], axis=1, kind="sum"), DEVICE, 0)


@pytest.mark.parametrize(("shape", "axis"), [((3, 4 * L + 1), 1), ((5, 33, 2 * L + 3), 1), ((L + 1,), 0)], ids=str)
def test_every_level2_schedule_builds_a_valid_program(shape, axis: int) -> None:
    spec = ReduceSpec(shape=list(shape), axis=axis, kind="sum")
    schedules = template.space(spec, DEVICE, 2).candidates()
    assert len(schedules) >= 20
    for schedule in schedules:
        program = template.build(spec, schedule)
        assert program.arguments == ("x", "y")
        assert len(program.launches) == (2 if program.workspaces else 1)
