"""Only a template's deliberate refusal prunes a schedule; any other exception from ``build`` fails the check."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pytest

from compiler.backends import get_target
from compiler.codegen.names import CodegenError
from compiler.device import device_preset
from compiler.ops.base import TensorSpec
from compiler.program import Program
from compiler.space import EmptySpaceError, ScheduleDoesNotFitError
from search.trial import TrialStatus
from search.verify import CheckResult, check_schedule, check_schedules, summarize


@dataclass(frozen=True)
class Raising:
    """A schedule whose build raises ``error``."""

    error: str


def _helper_with_a_bug(index: int) -> int:
    return [1, 2, 3][index]


class Refuser:
    """An operator whose build never gets as far as a kernel."""

    name = "refuser"

    def build(self, spec: object, schedule: Raising, target: str) -> Program:
        if schedule.error == "value":
            raise ValueError("a template bug that happens to be a ValueError")
        if schedule.error == "codegen":
            raise CodegenError("identifier 'x' declared twice")
        if schedule.error == "index":
            _helper_with_a_bug(7)
        if schedule.error == "fit":
            raise ScheduleDoesNotFitError("tile 64 x 64 does not divide among 96 threads")
        raise EmptySpaceError("A has more elements than 32-bit indices reach")

    def inputs(self, spec: object, rng: np.random.Generator) -> dict[str, np.ndarray]:
        return {}

    def outputs(self, spec: object) -> tuple[TensorSpec, ...]:
        return (TensorSpec("y", (4,), "float32"),)

    def reference(self, spec: object, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {"y": np.zeros(4)}


def check(error: str) -> CheckResult:
    return check_schedule(Refuser(), None, Raising(error), target=get_target("emu", gpu=device_preset("h200")))


@pytest.mark.parametrize(("error", "named"), [
    ("value", "ValueError: a template bug that happens to be a ValueError"),
    ("codegen", "CodegenError: identifier 'x' declared twice"),
    ("index", "IndexError: list index out of range"),
])
def test_a_build_that_crashes_is_a_failure_with_its_traceback(error: str, named: str) -> None:
    result = check(error)
    assert result.status is TrialStatus.COMPILE_ERROR and result.status.is_failure
    assert result.message.startswith(f"build raised {named}")
    assert "Traceback (most recent call last)" in result.message
    assert "in build" in result.message  # the frame that raised is named
    if error == "index":
        assert "_helper_with_a_bug" in result.message


@pytest.mark.parametrize(("error", "reason"), [
    ("fit", "tile 64 x 64 does not divide among 96 threads"),
    ("empty", "A has more elements than 32-bit indices reach"),
])
def test_a_deliberate_refusal_prunes_the_schedule(error: str, reason: str) -> None:
    result = check(error)
    assert result.status is TrialStatus.INVALID and not result.status.is_failure
    assert result.message == f"build: {reason}"


def test_a_check_whose_every_schedule_was_pruned_does_not_pass() -> None:
    results = check_schedules(Refuser(), None, [Raising("fit")] * 3 + [Raising("empty")],
                              target=get_target("emu", gpu=device_preset("h200")))
    summary = summarize(results)
    assert (summary.passed, summary.failed, summary.pruned) == (0, 0, 4)
    assert not summary.ok
    assert summary.problem() == (
        "no schedule can serve this spec: all 4 checked were pruned "
        "(3 x build: tile 64 x 64 does not divide among 96 threads; "
        "1 x build: A has more elements than 32-bit indices reach)"
    )


def test_summary_counts_failures_and_passes() -> None:
    def result(status: TrialStatus, message: str = "") -> CheckResult:
        return CheckResult(schedule=None, status=status, message=message)

    mixed = summarize([result(TrialStatus.OK), result(TrialStatus.INVALID, "sm_90: spills"),
                       result(TrialStatus.WRONG_RESULT)])
    assert (mixed.line, mixed.ok, mixed.problem()) == ("1 passed, 1 failed, 1 pruned", False, "1 of 3 schedules failed")
    passing = summarize([result(TrialStatus.OK), result(TrialStatus.INVALID, "sm_90: spills")])
    assert (passing.ok, passing.problem()) == (True, None)
    assert summarize([]).problem() == "no schedule was checked"
