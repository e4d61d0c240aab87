"""Strategies over a space: valid points only, budgets, the default first, resume, and they find optima."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import optuna
import pytest

from compiler.space import Condition, Constraint, Param, Space
from search.strategies import (
    DEFAULT,
    STRATEGIES,
    Budget,
    Outcome,
    StudyMismatchError,
    get_strategy,
    search,
)
from search.trial import TrialStatus

optuna.logging.set_verbosity(optuna.logging.WARNING)


@dataclass(frozen=True)
class Point:
    bx: int
    by: int
    layout: tuple[int, int]
    flag: bool
    unroll: int


def synthetic(default: dict | None = None, version: str = "1") -> Space[Point]:
    """240 combinations (conditions counted), about half of them invalid, one optimum."""
    return Space(
        template="synthetic",
        params=(
            Param("bx", (8, 16, 24, 32, 40, 48, 56, 64)),
            Param("by", (1, 2, 4, 8, 16)),
            Param("layout", ((1, 0), (0, 1), (1, 1))),
            Param("flag", (False, True)),
            Param("unroll", (1, 2, 4), when=Condition("flag", (True,))),
        ),
        make=lambda v: Point(**v),
        constraints=(Constraint("bx * by <= 128", lambda p: p.bx * p.by <= 128),),
        version=version,
        default=default,
    )


OPTIMUM = {"bx": 32, "by": 4, "layout": (0, 1), "flag": True, "unroll": 2}


def cost(values: dict) -> float:
    """Smooth along the ordered axes, a step for the labels; 1.0 at OPTIMUM only."""
    return (1.0 + 0.02 * (values["bx"] - 32) ** 2 / 8 + 0.3 * (math.log2(values["by"]) - 2) ** 2
            + (0.0 if values["layout"] == (0, 1) else 0.4) + (0.0 if values["flag"] else 0.25)
            + (0.1 * abs(math.log2(values["unroll"]) - 1) if values["flag"] else 0.0))


class Counting:
    """An objective that refuses invalid points outright and counts what it measured."""

    def __init__(self, space: Space, delay: float = 0.0, fail: set | None = None) -> None:
        self.space, self.delay, self.fail, self.seen = space, delay, fail or set(), []

    def __call__(self, values: dict) -> Outcome:
        assert self.space.is_valid(values), f"an invalid point reached the objective: {values}"
        self.seen.append(self.space.key(values))
        if self.delay:
            time.sleep(self.delay)
        if self.space.key(values) in self.fail:
            return Outcome.failed(TrialStatus.COMPILE_ERROR, "refused")
        return Outcome.ok(cost(values))


def test_the_synthetic_optimum_is_where_the_test_says():
    space = synthetic()
    valid = space.valid_values()
    assert 60 < len(valid) < space.size == 8 * 5 * 3 * (1 + 3)
    assert min(valid, key=cost) == OPTIMUM and cost(OPTIMUM) == 1.0


#: Budgets within which each strategy finds the optimum with seed 0 (random and exhaustive: all points).
FIND_BUDGET = {"hybrid": 40, "tpe": 60, "random": None, "exhaustive": None}


@pytest.mark.parametrize("name", sorted(FIND_BUDGET))
def test_each_strategy_finds_the_optimum_within_its_budget_and_measures_only_valid_new_points(name):
    space = synthetic()
    objective = Counting(space)
    budget = FIND_BUDGET[name] or len(space.valid_values())  # no repeats: all points within that many
    result = search(space, objective, name, Budget(trials=budget), seed=0)
    assert result.best is not None and dict(result.best.values) == OPTIMUM
    assert len(objective.seen) == len(set(objective.seen)) == len(result.trials) <= budget
    assert [t.outcome.value for t in result.trials] == [cost(t.values) for t in result.trials]
    runs = [search(space, Counting(space), name, Budget(trials=20), seed=0) for _ in range(2)]
    assert [dict(t.values) for t in runs[0].trials] == [dict(t.values) for t in runs[1].trials]  # seeded


def test_invalid_proposals_are_told_to_the_sampler_and_not_counted():
    space = synthetic()
    result = search(space, Counting(space), "random", Budget(trials=40), seed=3)
    assert len(result.trials) == 40
    assert result.rejected.get("invalid", 0) > 0  # about half the combinations are invalid


def test_the_default_schedule_is_measured_first_by_every_strategy():
    default = {"bx": 16, "by": 2, "layout": (1, 1), "flag": False}
    for name in sorted(set(STRATEGIES) - {"gp"}):
        result = search(synthetic(default), Counting(synthetic()), name, Budget(trials=3), seed=1)
        assert dict(result.trials[0].values) == {**default, "unroll": 1}, name


def test_a_warm_start_is_measured_after_the_default_and_what_does_not_fit_is_passed_over():
    default = {"bx": 16, "by": 2, "layout": (1, 1), "flag": False}
    # As the cache gives schedules back from JSON: a tuple choice as a list, extra keys of another template.
    hints = [{"bx": 64, "by": 2, "layout": [0, 1], "flag": True, "unroll": 4},
             {"bx": 64, "by": 4, "layout": [0, 1], "flag": False},  # 256 threads: invalid here
             {"bx": 8, "by": 1, "layout": [1, 0], "flag": False, "unroll": 2, "tile": 3},  # unroll inactive
             {"bx": 12, "by": 1, "layout": [1, 0], "flag": False},  # not a choice: the nearest, bx=16
             {"bx": 64, "by": 2, "layout": [2, 2], "flag": False},  # a layout is not near another
             {"bx": 16, "by": 2, "layout": [1, 1], "flag": False},  # the default again
             {"bx": 64, "by": 2, "layout": [0, 1], "flag": True, "unroll": 4}]  # a repeat
    for name in sorted(set(STRATEGIES) - {"gp"}):
        space = synthetic(default)
        result = search(space, Counting(space), name, Budget(trials=6), seed=1, first=hints)
        measured = [dict(t.values) for t in result.trials]
        assert measured[:4] == [{**default, "unroll": 1}, {"bx": 64, "by": 2, "layout": (0, 1), "flag": True,
                                "unroll": 4}, {"bx": 8, "by": 1, "layout": (1, 0), "flag": False, "unroll": 1},
                                {"bx": 16, "by": 1, "layout": (1, 0), "flag": False, "unroll": 1}], name
        assert len({space.key(v) for v in measured}) == 6, name


def test_a_warm_start_does_not_shorten_the_hybrids_initial_design(monkeypatch: pytest.MonkeyPatch) -> None:
    from search.strategies import hybrid

    fitted_at: list[int] = []
    fit = hybrid._model

    def model(history, *args, **kwargs):  # a spy on the model's first fit
        fitted_at.append(len(history.records))
        return fit(history, *args, **kwargs)

    monkeypatch.setattr(hybrid, "_model", model)
    space = synthetic()
    search(space, Counting(space), "hybrid", Budget(trials=14), seed=2)
    cold = fitted_at[0]
    fitted_at.clear()
    hints = [{"bx": b, "by": 1, "layout": [0, 1], "flag": False} for b in (8, 16, 24)]
    search(space, Counting(space), "hybrid", Budget(trials=14), seed=2, first=hints)
    assert fitted_at[0] == cold + len(hints)  # the model leads only after its whole design, on top of them


def test_budgets_stop_on_trials_seconds_and_patience():
    space = synthetic()
    assert len(search(space, Counting(space), "tpe", Budget(trials=7)).trials) == 7
    started = time.monotonic()
    timed = search(space, Counting(space, delay=0.02), "random", Budget(seconds=0.2))
    assert timed.stopped == "seconds" and 3 <= len(timed.trials) < 20 and time.monotonic() - started < 2
    flat = search(space, lambda v: Outcome.ok(1.0), "random", Budget(patience=5, trials=100))
    assert flat.stopped == "patience" and len(flat.trials) == 6  # the first sets the best, 5 bring no gain
    everything = search(space, Counting(space), "exhaustive", Budget(trials=10_000))
    assert everything.stopped == "space exhausted" and len(everything.trials) == len(space.valid_values())
    with pytest.raises(ValueError, match="needs trials, seconds or patience"):
        Budget()


def test_should_stop_ends_the_search_after_the_trial_in_progress():
    space = synthetic()
    counting = Counting(space)

    def stop_after_three() -> bool:
        return len(counting.seen) >= 3

    result = search(space, counting, "random", Budget(trials=50), should_stop=stop_after_three)
    assert result.stopped == "stopped" and len(result.trials) == 3 == len(counting.seen)


def test_failures_count_against_the_budget_and_are_never_best():
    space = synthetic()
    fail = {space.key(OPTIMUM)}
    result = search(space, Counting(space, fail=fail), "exhaustive", Budget(trials=10_000))
    failed = [t for t in result.trials if t.outcome.status is TrialStatus.COMPILE_ERROR]
    assert len(failed) == 1 and failed[0].outcome.message == "refused"
    assert result.best is not None and dict(result.best.values) != OPTIMUM


@pytest.mark.parametrize("name", ["hybrid", "tpe"])
def test_a_resumed_study_continues_without_repeating_finished_trials(tmp_path, name):
    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 'studies.db'}")
    space = synthetic()
    first = Counting(space)
    done = search(space, first, name, Budget(trials=12), storage=storage, study_key="w1", seed=0)
    again = Counting(space)
    resumed = search(space, again, name, Budget(trials=20), storage=storage, study_key="w1", seed=0)
    assert len(done.trials) == 12 and len(resumed.trials) == 20 and len(again.seen) == 8
    assert not set(first.seen) & set(again.seen)
    assert all(t.resumed for t in resumed.trials[:12]) and not any(t.resumed for t in resumed.trials[12:])
    assert [dict(t.values) for t in resumed.trials[:12]] == [dict(t.values) for t in done.trials]
    other = search(space, Counting(space), name, Budget(trials=3), storage=storage, study_key="w2")
    assert len(other.trials) == 3  # another key is another study
    with pytest.raises(StudyMismatchError, match="fingerprint"):
        search(synthetic(version="2"), Counting(space), name, Budget(trials=3), storage=storage, study_key="w1")
    storage.engine.dispose()


def test_trials_store_only_storable_params():
    space = synthetic()
    storage = optuna.storages.InMemoryStorage()
    search(space, Counting(space), "tpe", Budget(trials=15), storage=storage, study_key="k")
    study = optuna.load_study(study_name="k", storage=storage)
    for trial in study.trials:
        assert isinstance(trial.params["layout"], str)
        assert ("unroll" in trial.params) == trial.params["flag"]  # inactive parameters are not suggested


def test_strategy_names_and_how_samplers_hear_of_invalid_points():
    assert get_strategy("default").name == DEFAULT
    assert get_strategy("tpe:fail").invalid_mode == "fail"
    assert get_strategy("hybrid").kernel == "switch" and get_strategy("hybrid:joint").kernel == "joint"
    with pytest.raises(ValueError, match="unknown strategy 'nope'"):
        get_strategy("nope")
    with pytest.raises(ValueError, match="unknown invalid mode 'x'"):
        get_strategy("tpe:x")
    space = synthetic()
    for mode, state, infeasible in (("constraint", "PRUNED", True), ("prune", "PRUNED", False),
                                    ("fail", "FAIL", False)):
        storage = optuna.storages.InMemoryStorage()
        search(space, Counting(space), f"random:{mode}", Budget(trials=10), storage=storage, study_key="k")
        rejected = [t for t in optuna.load_study(study_name="k", storage=storage).trials
                    if t.user_attrs.get("rejected") == "invalid"]
        assert rejected and all(t.state.name == state for t in rejected)
        assert all(("constraints:valid" in t.system_attrs) == infeasible for t in rejected), mode


def test_gp_needs_its_optional_dependencies_or_runs():
    space = synthetic()
    try:
        import scipy  # noqa: F401
        import torch  # noqa: F401
    except ImportError:
        with pytest.raises(RuntimeError, match="needs torch and scipy"):
            search(space, Counting(space), "gp", Budget(trials=3))
        return
    assert len(search(space, Counting(space), "gp", Budget(trials=12)).trials) == 12


def test_a_failing_trial_callback_surfaces_as_itself_and_the_trial_stays_told() -> None:
    space = synthetic()

    def on_trial(record: object) -> None:
        raise RuntimeError("the progress display broke")

    storage = optuna.storages.InMemoryStorage()
    with pytest.raises(RuntimeError, match="the progress display broke"):
        search(space, Counting(space), "random", Budget(trials=4), storage=storage, study_key="callback",
               on_trial=on_trial)
    states = [t.state for t in optuna.load_study(study_name="callback", storage=storage).get_trials()]
    # The measured point is complete, not failed by the clean-up that used to bury the callback's error.
    assert states.count(optuna.trial.TrialState.COMPLETE) == 1 and optuna.trial.TrialState.FAIL not in states
