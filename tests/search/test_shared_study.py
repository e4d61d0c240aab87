"""Several workers on one study: other workers' trials join the history and the budget, a point is
never evaluated twice, and a trial lost with its worker is failed and its point evaluated once more."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.trial import TrialState

from compiler.space import Param, Space
from search.space_optuna import distribution, encode_values
from search.strategies import Budget, Outcome, search

optuna.logging.set_verbosity(optuna.logging.WARNING)


def grid() -> Space[tuple[int, int]]:
    """64 points, every one valid; the default is (0, 0)."""
    return Space(template="grid", params=(Param("a", tuple(range(8))), Param("b", tuple(range(8)))),
                 make=lambda v: (v["a"], v["b"]), default={"a": 0, "b": 0})


class Counting:
    def __init__(self) -> None:
        self.seen: list[tuple[int, int]] = []

    def __call__(self, values: dict[str, Any]) -> Outcome:
        self.seen.append((values["a"], values["b"]))
        return Outcome.ok(1.0 + (values["a"] - 5) ** 2 + (values["b"] - 2) ** 2)


def _storage(url: str) -> optuna.storages.RDBStorage:
    return optuna.storages.RDBStorage(url)


def test_trials_another_worker_evaluated_join_the_history_and_the_budget(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    storage = _storage(url)
    first = Counting()
    search(grid(), first, "random", Budget(trials=5), storage=storage, study_key="s", seed=1)
    seen_before: list[int] = []

    def objective(values: dict[str, Any]) -> Outcome:
        if not seen_before:  # meanwhile another worker evaluates what the budget leaves it: 8 - 5 - this one
            seen_before.append(1)
            other = search(grid(), first, "random", Budget(trials=8, seconds=2), storage=_storage(url),
                           study_key="s", seed=2)
            assert other.stopped == "seconds" and len(other.trials) == 7  # it waited for this one, in vain
        return Counting()(values)

    result = search(grid(), objective, "random", Budget(trials=12), storage=storage, study_key="s", seed=3)
    points = [(t.values["a"], t.values["b"]) for t in result.trials]
    assert len(result.trials) == 12 and len(set(points)) == 12  # 5 resumed + 1 + 2 of the other + 4 more
    assert sum(t.resumed for t in result.trials) == 7
    assert len(first.seen) == 7
    study = optuna.load_study(study_name="s", storage=storage)
    assert sum(t.user_attrs.get("evaluated", False) for t in study.trials) == 12


def _ghost(storage: optuna.storages.BaseStorage, space: Space[Any], values: dict[str, Any], beat: float,
           **attrs: Any) -> int:
    """A trial left running by a worker that died: created through the storage, its heartbeat old."""
    study_id = storage.get_study_id_from_name("s")
    params = encode_values(space, values)
    frozen = optuna.trial.FrozenTrial(
        number=0, state=TrialState.RUNNING, value=None, datetime_start=None, datetime_complete=None,
        params=params, distributions={p.name: distribution(p) for p in space.params if p.name in params},
        user_attrs={"claim": {"point": list(space.key(values)), "worker": "ghost"}, "heartbeat": beat, **attrs},
        system_attrs={}, intermediate_values={}, trial_id=0)
    trial_id = storage.create_new_trial(study_id, template_trial=frozen)
    return storage.get_trial(trial_id).number


def test_a_trial_lost_with_its_worker_is_failed_and_its_point_evaluated_once_more(tmp_path: Path) -> None:
    storage = _storage(f"sqlite:///{tmp_path / 'lost.db'}")
    space = grid()
    search(space, Counting(), "exhaustive", Budget(trials=1), storage=storage, study_key="s")  # the default
    lost = _ghost(storage, space, {"a": 5, "b": 2}, time.time() - 600)
    rerun_lost = _ghost(storage, space, {"a": 6, "b": 6}, time.time() - 600, requeued_from=99)
    alive = _ghost(storage, space, {"a": 7, "b": 7}, time.time() + 3600)  # heard of "later": never lost
    counting = Counting()
    # The live trial holds a point and a place in the budget until it ends: the search waits for it
    # once every other point is evaluated, until told to stop.
    result = search(space, counting, "exhaustive", Budget(trials=64), storage=storage, study_key="s",
                    lost_after_s=30, should_stop=lambda: len(counting.seen) >= 62)
    assert counting.seen.count((5, 2)) == 1  # re-enqueued once, evaluated once
    assert counting.seen.count((6, 6)) == 1  # not re-enqueued, but free again: the strategy reached it
    assert (7, 7) not in counting.seen and result.stopped == "stopped"  # the live one holds its point
    trials = {t.number: t for t in optuna.load_study(study_name="s", storage=storage).trials}
    assert trials[lost].state is TrialState.FAIL and "no heartbeat from ghost" in trials[lost].user_attrs["lost"]
    assert trials[rerun_lost].state is TrialState.FAIL and "lost" in trials[rerun_lost].user_attrs
    assert trials[alive].state is TrialState.RUNNING
    requeued = [t for t in trials.values() if t.user_attrs.get("requeued_from") is not None and t.number != rerun_lost]
    assert [t.user_attrs["requeued_from"] for t in requeued] == [lost]
    assert requeued[0].state is TrialState.COMPLETE and requeued[0].params == trials[lost].params
    assert len(counting.seen) == len(set(counting.seen)) == 62  # 64 less the default and the live one


WORKER = textwrap.dedent("""
    import json, sys, time
    import optuna
    from compiler.space import Param, Space
    from search.strategies import Budget, Outcome, search

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    url, out, seed, strategy = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    space = Space(template="grid", params=(Param("a", tuple(range(8))), Param("b", tuple(range(8)))),
                  make=lambda v: (v["a"], v["b"]), default={"a": 0, "b": 0})
    seen = []

    def objective(values):
        seen.append([values["a"], values["b"]])
        time.sleep(0.05)
        return Outcome.ok(1.0 + (values["a"] - 5) ** 2 + (values["b"] - 2) ** 2)

    storage = optuna.storages.RDBStorage(url)
    result = search(space, objective, strategy, Budget(trials=30), storage=storage, study_key="s", seed=seed,
                    batch=2)
    with open(out, "w") as f:
        json.dump({"seen": seen, "trials": len(result.trials), "stopped": result.stopped}, f)
""")


@pytest.mark.postgres
@pytest.mark.parametrize("strategy", ["tpe", "hybrid"])
def test_two_processes_on_one_study_never_evaluate_a_point_twice_and_share_the_budget(
        postgres_server: Any, tmp_path: Path, strategy: str) -> None:
    url = postgres_server.url(postgres_server.create_database())
    optuna.create_study(study_name="s", storage=url)  # both workers find it: neither races to create it
    outs = [tmp_path / f"worker{i}.json" for i in range(2)]
    workers = [subprocess.Popen([sys.executable, "-c", WORKER, url, str(out), str(i), strategy])
               for i, out in enumerate(outs)]
    for worker in workers:
        assert worker.wait(timeout=300) == 0
    reports = [json.loads(out.read_text()) for out in outs]
    seen = [tuple(p) for report in reports for p in report["seen"]]
    assert len(seen) == len(set(seen)) == 30, reports  # the shared budget, no point twice
    assert all(report["trials"] == 30 and report["stopped"] == "trials" for report in reports)
    assert all(report["seen"] for report in reports)  # both took part
    study = optuna.load_study(study_name="s", storage=url)
    evaluated = [t for t in study.trials if t.user_attrs.get("evaluated")]
    assert len(evaluated) == 30 and not [t for t in study.trials if t.state is TrialState.RUNNING]
    assert len({t.user_attrs["claim"]["worker"] for t in evaluated}) == 2
