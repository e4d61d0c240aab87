"""``warpmap check``'s verdict: a crashing template fails, an all-pruned check fails, an empty space is refused."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pytest

from compiler.device import DeviceSpec
from compiler.ops import operators
from compiler.ops.base import TensorSpec
from compiler.ops.spec import OpSpec
from compiler.program import Program
from compiler.space import EmptySpaceError, Param, ScheduleDoesNotFitError, Space
from service.cli import main

Capture = pytest.CaptureFixture[str]


class RefuserSpec(OpSpec):
    op: Literal["refuser"] = "refuser"
    error: Literal["value", "fit", "empty"]
    dtype: Literal["float32"] = "float32"


@dataclass(frozen=True)
class Pick:
    index: int


class Refuser:
    name = "refuser"
    spec_model = RefuserSpec

    def space(self, spec: RefuserSpec, device: DeviceSpec, level: int) -> Space[Pick]:
        if spec.error == "empty":
            raise EmptySpaceError("refuser: x has more elements than 32-bit indices reach")
        return Space("refuser", (Param("index", (0, 1, 2)),), lambda p: Pick(**p))

    def build(self, spec: RefuserSpec, schedule: Pick, target: str) -> Program:
        if spec.error == "value":
            raise ValueError(f"template bug in schedule {schedule.index}")
        raise ScheduleDoesNotFitError("block tile does not divide the rows")

    def inputs(self, spec: Any, rng: np.random.Generator) -> dict[str, np.ndarray]:
        return {}

    def outputs(self, spec: Any) -> tuple[TensorSpec, ...]:
        return (TensorSpec("y", (4,), "float32"),)

    def reference(self, spec: Any, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {"y": np.zeros(4)}

    def flops(self, spec: Any) -> int:
        return 0

    def min_bytes(self, spec: Any) -> int:
        return 16


@pytest.fixture(autouse=True)
def _refuser(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("WARPMAP_CACHE_DIR", str(tmp_path))
    monkeypatch.setitem(operators(), "refuser", Refuser())


def test_a_template_bug_fails_the_check_with_its_traceback(capsys: Capture) -> None:
    assert main(["check", "--spec", '{"op":"refuser","error":"value"}']) == 1
    captured = capsys.readouterr()
    assert "build raised ValueError: template bug in schedule 0" in captured.out
    assert "Traceback (most recent call last)" in captured.out
    assert "0 passed, 3 failed, 0 pruned" in captured.out
    assert "warpmap check: 3 of 3 schedules failed" in captured.err


def test_a_check_whose_every_schedule_is_pruned_fails_naming_why(capsys: Capture) -> None:
    assert main(["check", "--spec", '{"op":"refuser","error":"fit"}']) == 1
    captured = capsys.readouterr()
    assert captured.out.splitlines()[-1] == "0 passed, 0 failed, 3 pruned"
    assert ("no schedule can serve this spec: all 3 checked were pruned "
            "(3 x build: block tile does not divide the rows)") in captured.err


def test_a_spec_no_schedule_can_serve_is_refused_before_checking(capsys: Capture) -> None:
    assert main(["check", "--spec", '{"op":"refuser","error":"empty"}', "--gpu", "h200"]) == 2
    captured = capsys.readouterr()
    assert captured.err == ("warpmap check: error: no schedule can serve this spec on NVIDIA H200: "
                            "refuser: x has more elements than 32-bit indices reach\n")
    assert "Traceback" not in captured.out + captured.err
