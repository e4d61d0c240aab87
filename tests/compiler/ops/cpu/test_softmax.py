"""The cpu softmax template: every level-1 schedule at awkward shapes and magnitudes, against float64."""

from __future__ import annotations

import numpy as np
import pytest

from compiler.cpu_device import detect_cpu
from compiler.ops.cpu import softmax as template
from compiler.ops.softmax import SoftmaxSpec, softmax_inputs, softmax_outputs, softmax_reference
from compiler.space import EmptySpaceError

DEVICE = detect_cpu()
LEVEL1 = template.space(SoftmaxSpec(rows=7, cols=37), DEVICE, 1).candidates()
# 1 column, fewer columns than a vector, exactly one vector, primes around and past the unrolled width.
SHAPES = [(1, 1), (5, 1), (3, 7), (4, DEVICE.f32_lanes), (7, 37), (2, 4 * DEVICE.f32_lanes + 3), (3, 1021),
          (1, 4099)]


def _check(spec: SoftmaxSpec, schedule, x: np.ndarray, run_on_cpu, assert_matches) -> np.ndarray:
    inputs = {"x": x.astype(np.float32)}
    outputs = softmax_outputs(spec)
    got = run_on_cpu(template.build(spec, schedule), inputs, outputs)
    assert_matches(got, softmax_reference(spec, inputs), outputs)
    return got["y"]


@pytest.mark.parametrize("schedule", LEVEL1, ids=str)
@pytest.mark.parametrize(("rows", "cols"), SHAPES)
def test_every_level1_schedule_matches_numpy(rows: int, cols: int, schedule, run_on_cpu, assert_matches) -> None:
    spec = SoftmaxSpec(rows=rows, cols=cols)
    x = softmax_inputs(spec, np.random.default_rng(rows * 7919 + cols))["x"]
    y = _check(spec, schedule, x, run_on_cpu, assert_matches)
    assert np.all(np.isfinite(y))  # every element written: the poison (NaN) is gone
    np.testing.assert_allclose(y.sum(axis=1), 1.0, rtol=1e-5)


MAGNITUDES = {
    "tiny spread": lambda g, s: g.normal(0.0, 1e-3, s),
    "large spread": lambda g, s: g.normal(0.0, 60.0, s),  # most exps underflow to 0
    "large negative": lambda g, s: g.normal(-80.0, 3.0, s),  # exp without the max would be subnormal
    "huge negative": lambda g, s: g.normal(-1e30, 1e29, s),
    "large positive": lambda g, s: g.normal(500.0, 2.0, s),  # exp without the max overflows
}


@pytest.mark.parametrize("magnitude", MAGNITUDES)
@pytest.mark.parametrize("schedule", [LEVEL1[0], LEVEL1[-1]], ids=str)
def test_magnitudes_are_handled_by_the_max_subtraction(magnitude: str, schedule, run_on_cpu,
                                                       assert_matches) -> None:
    spec = SoftmaxSpec(rows=5, cols=2 * DEVICE.f32_lanes + 5)
    x = MAGNITUDES[magnitude](np.random.default_rng(5), (spec.rows, spec.cols))
    _check(spec, schedule, x, run_on_cpu, assert_matches)


def test_a_sample_of_the_level2_space_matches_numpy(run_on_cpu, assert_matches) -> None:
    spec = SoftmaxSpec(rows=37, cols=531)
    space = template.space(spec, DEVICE, 2)
    assert len(space.candidates()) >= 30
    x = softmax_inputs(spec, np.random.default_rng(2))["x"]
    for schedule in (*space.sample(4, seed=1), template.default_schedule(DEVICE)):
        _check(spec, schedule, x, run_on_cpu, assert_matches)


def test_16_bit_inputs_are_refused_with_the_dtype_named() -> None:
    with pytest.raises(EmptySpaceError, match="float32 only, not float16"):
        template.space(SoftmaxSpec(rows=2, cols=8, dtype="float16"), DEVICE, 1)
    with pytest.raises(EmptySpaceError, match="bfloat16"):
        template.build(SoftmaxSpec(rows=2, cols=8, dtype="bfloat16"), LEVEL1[0])


def test_level1_is_small_and_a_bad_level_is_an_error() -> None:
    assert 2 <= len(LEVEL1) <= 30
    with pytest.raises(ValueError, match="unknown space level 3"):
        template.space(SoftmaxSpec(rows=2, cols=8), DEVICE, 3)


def test_every_level2_schedule_builds_a_valid_program() -> None:
    spec = SoftmaxSpec(rows=9, cols=3 * DEVICE.f32_lanes + 1)
    for schedule in template.space(spec, DEVICE, 2).candidates():
        program = template.build(spec, schedule)
        assert program.arguments == ("x", "y") and len(program.launches) == 1
