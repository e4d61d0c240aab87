"""Reductions split over several blocks per output: a partial pass into a workspace, then a final pass."""

from __future__ import annotations

import json

import numpy as np
import pytest

from compiler.backends import get_target
from compiler.device import device_preset
from compiler.ops.reduce import OPERATOR, ReduceSchedule, ReduceSpec
from compiler.program import launch_arguments
from search.trial import TrialStatus
from search.verify import Oracle, check_schedule
from service.cli import main as cli_main

H200 = device_preset("h200")

#: Primes, 1 and non-multiples of every tile and step; a last, a middle and a first axis.
AWKWARD = [
    ([3, 1009], 1), ([1], 0), ([2, 997, 3], 1), ([1, 4100], 1), ([613, 1], 0), ([7, 5, 2], 0),
]


def _schedule(spec: ReduceSpec, parts: int, vector: int = 1) -> ReduceSchedule:
    if spec.inner == 1:
        return ReduceSchedule(split=32, tile=1, items=2, vector=vector, tree="shuffle", parts=parts)
    return ReduceSchedule(split=4, tile=8, items=1, vector=1, tree="shared", parts=parts)


@pytest.mark.parametrize("kind", ["sum", "max", "mean"])
@pytest.mark.parametrize(("shape", "axis"), AWKWARD)
@pytest.mark.parametrize("parts", [2, 7])
def test_split_schedules_match_numpy(kind: str, shape: list[int], axis: int, parts: int) -> None:
    spec = ReduceSpec(shape=shape, axis=axis, kind=kind)
    result = check_schedule(OPERATOR, spec, _schedule(spec, parts), target=get_target("emu", gpu=H200))
    assert result.status is TrialStatus.OK, result.message
    assert [k.entry for k in result.kernels] == [f"reduce_{kind}_float32_partial", f"reduce_{kind}_float32_final"]


@pytest.mark.parametrize(("dtype", "kind", "vector"), [("float16", "mean", 2), ("bfloat16", "max", 1),
                                                       ("float32", "sum", 4)])
def test_split_schedules_with_vector_loads_and_16_bit_outputs(dtype: str, kind: str, vector: int) -> None:
    spec = ReduceSpec(shape=[2, 1500], axis=1, kind=kind, dtype=dtype)
    result = check_schedule(OPERATOR, spec, _schedule(spec, 5, vector), target=get_target("emu", gpu=H200))
    assert result.status is TrialStatus.OK, result.message


def test_the_workspace_is_poisoned_and_shared_by_both_launches() -> None:
    spec = ReduceSpec(shape=[3, 1009], axis=1, kind="sum")
    program = OPERATOR.build(spec, _schedule(spec, 4), "cuda")
    (workspace,) = program.workspaces
    assert (workspace.shape, workspace.dtype) == ((4, 3), "float32")
    buffers, outputs = Oracle(OPERATOR, spec).arguments(program)
    target = get_target("emu", gpu=H200)
    loaded = target.load(target.compile(program))
    (_, partials), (partials_again, y) = launch_arguments(program, {**loaded.workspaces, **buffers})
    assert partials is partials_again is loaded.workspaces[workspace.name]
    assert y is outputs["y"]
    assert np.isnan(partials).all() and np.isnan(y).all()  # a partial or output never written fails


def test_the_space_splits_only_few_outputs_over_a_long_axis() -> None:
    few = OPERATOR.space(ReduceSpec(shape=[3, 2053], axis=1, kind="sum"), H200, 1).candidates()
    assert {s.parts for s in few} == {1, 8}
    assert all(s.parts * s.step <= 2053 for s in few if s.parts > 1)
    many = OPERATOR.space(ReduceSpec(shape=[4096, 2053], axis=1, kind="sum"), H200, 1).candidates()
    assert {s.parts for s in many} == {1}
    short = OPERATOR.space(ReduceSpec(shape=[3, 40], axis=1, kind="sum"), H200, 2).candidates()
    assert all(s.parts * s.step <= 40 for s in short if s.parts > 1)


def test_warpmap_check_runs_two_launch_programs_end_to_end(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("WARPMAP_CACHE_DIR", str(tmp_path))
    spec = {"op": "reduce", "shape": [3, 2053], "axis": 1, "kind": "sum"}
    space = OPERATOR.space(ReduceSpec.model_validate(spec), H200, 1)
    assert all(s.parts == 8 for s in space.sample(3, 4))  # the sample below is all split schedules
    code = cli_main(["check", "--spec", json.dumps(spec), "--sample", "3", "--seed", "4"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "3 passed, 0 failed" in out and "parts" in out
