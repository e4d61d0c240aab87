"""Proposals in batches: k points held pending at once, never proposed twice, told as they finish,
within the trial budget; and the compile pool's size."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import optuna
import pytest

from compiler.space import Constraint, Param, Space
from search.measure import compile_workers
from search.strategies import Budget, Outcome, search
from search.trial import TrialStatus

optuna.logging.set_verbosity(optuna.logging.WARNING)


@dataclass(frozen=True)
class Tile:
    x: int
    y: int


def tiles(default: dict[str, Any] | None = None) -> Space[Tile]:
    """49 combinations, those with x * y > 24 invalid."""
    return Space(template="tiles", params=(Param("x", (1, 2, 3, 4, 5, 6, 7)), Param("y", (1, 2, 3, 4, 5, 6, 7))),
                 make=lambda v: Tile(**v), constraints=(Constraint("x * y <= 24", lambda t: t.x * t.y <= 24),),
                 default=default)


class Batches:
    """A batch evaluator that records each batch it was given and answers a smooth cost."""

    def __init__(self, space: Space[Tile]) -> None:
        self.space = space
        self.batches: list[list[tuple[int, ...]]] = []

    def __call__(self, points: list[dict[str, Any]]) -> Iterator[Outcome]:
        assert all(self.space.is_valid(p) for p in points)
        self.batches.append([self.space.key(p) for p in points])
        for values in points:
            yield Outcome.ok(1.0 + abs(values["x"] - 3) + abs(values["y"] - 5))


@pytest.mark.parametrize("strategy", ["hybrid", "tpe", "random", "exhaustive"])
def test_batches_hold_distinct_new_points_and_stop_at_the_budget(strategy: str) -> None:
    space = tiles(default={"x": 1, "y": 1})
    evaluate = Batches(space)
    result = search(space, None, strategy, Budget(trials=10), evaluate=evaluate, batch=3, seed=2)
    assert [len(b) for b in evaluate.batches] == [3, 3, 3, 1]
    measured = [key for batch in evaluate.batches for key in batch]
    assert len(measured) == len(set(measured)) == len(result.trials) == 10
    assert measured[0] == space.key({"x": 1, "y": 1})  # the default first
    assert [space.key(t.values) for t in result.trials] == measured  # told in the order measured


def test_each_outcome_is_told_before_the_next_is_asked_for() -> None:
    space = tiles()
    storage = optuna.storages.InMemoryStorage()
    states: list[list[str]] = []

    def evaluate(points: list[dict[str, Any]]) -> Iterator[Outcome]:
        for values in points:
            study = optuna.load_study(study_name="s", storage=storage)
            states.append(sorted(t.state.name for t in study.trials if t.user_attrs.get("rejected") is None))
            yield Outcome.ok(float(values["x"]))

    search(space, None, "random", Budget(trials=4), evaluate=evaluate, batch=4, storage=storage, study_key="s")
    assert states == [["RUNNING"] * 4, ["COMPLETE", *["RUNNING"] * 3], ["COMPLETE"] * 2 + ["RUNNING"] * 2,
                      ["COMPLETE"] * 3 + ["RUNNING"]]


def test_an_evaluator_that_fails_leaves_no_trial_running() -> None:
    space = tiles()
    storage = optuna.storages.InMemoryStorage()

    def evaluate(points: list[dict[str, Any]]) -> Iterator[Outcome]:
        yield Outcome.failed(TrialStatus.COMPILE_ERROR, "first")
        raise RuntimeError("the measuring machine went away")

    with pytest.raises(RuntimeError, match="went away"):
        search(space, None, "random", Budget(trials=5), evaluate=evaluate, batch=3, storage=storage, study_key="s")
    trials = optuna.load_study(study_name="s", storage=storage).trials
    assert not [t for t in trials if t.state.name == "RUNNING"]
    assert sum(t.state.name == "PRUNED" and t.user_attrs.get("status") == "compile_error" for t in trials) == 1


def test_a_batch_needs_one_point_at_least() -> None:
    with pytest.raises(ValueError, match="batch must be at least 1"):
        search(tiles(), lambda v: Outcome.ok(1.0), "random", Budget(trials=2), batch=0)


def test_the_pool_is_bounded_by_cores_and_memory() -> None:
    gib = 2**30
    assert compile_workers(cores=16, available_bytes=64 * gib) == 16
    assert compile_workers(cores=16, available_bytes=4 * gib) == 2  # 1.5 GiB a build
    assert compile_workers(cores=4, available_bytes=gib) == 1  # never none
    assert compile_workers(5, cores=1, available_bytes=0) == 5  # asked for: as asked
    assert compile_workers() >= 1
    with pytest.raises(ValueError, match="at least 1"):
        compile_workers(0)
