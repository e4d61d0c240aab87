"""The search loop every strategy runs in: one Optuna study, budgets, and no wasted measurement.

The study lives in the storage the caller gives (in memory by default), under the caller's key, and
carries the space's fingerprint: a study made by another space is refused rather than resumed. On
resume the study's evaluated trials are read back, count against the trial budget and are never
proposed again. Points that break the space's constraints, and points already evaluated or being
evaluated by another worker, are told to the study as rejected proposals: they never reach the
objective and never count against the budget. The template's default schedule is evaluated first.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import optuna
from optuna.trial import TrialState

from compiler.space import Space
from search.space_optuna import decode_params, encode_values, suggest
from search.strategies.base import Budget, History, Objective, Outcome, SearchResult, Strategy, TrialRecord
from search.trial import TrialStatus

#: Rejected proposals in a row after which the driver substitutes an untried valid point.
MAX_REJECTIONS = 16

#: How an Optuna sampler learns of an invalid proposal: "prune" (a pruned trial, which TPE ranks
#: below every complete one), "constraint" (pruned and marked infeasible with ``set_constraint``) or
#: "fail" (a failed trial, which samplers ignore).
INVALID_MODES = ("prune", "constraint", "fail")


class StudyMismatchError(ValueError):
    """The stored study under this key was made by a different space (another fingerprint)."""


class SpaceExhausted(Exception):  # noqa: N818 (a signal, not an error)
    """Raised by a proposer when no untried valid point is left."""


def open_study(space: Space[Any], key: str, storage: Any, sampler: optuna.samplers.BaseSampler) -> optuna.Study:
    """The study ``key`` in ``storage`` for ``space``, created if absent; refused if another space made it."""
    study = optuna.create_study(study_name=key, storage=storage, sampler=sampler, direction="minimize",
                                load_if_exists=True)
    stored = study.user_attrs.get("space_fingerprint")
    if stored is None:
        study.set_user_attr("space_fingerprint", space.fingerprint)
        study.set_user_attr("template", space.template)
    elif stored != space.fingerprint:
        raise StudyMismatchError(
            f"study {key!r} belongs to a space with fingerprint {stored}, not {space.fingerprint}"
        )
    return study


def _record(space: Space[Any], trial: optuna.trial.FrozenTrial) -> TrialRecord:
    status = TrialStatus(trial.user_attrs["status"])
    outcome = Outcome(status, trial.value if status is TrialStatus.OK else None, trial.user_attrs.get("message", ""))
    return TrialRecord(trial.number, decode_params(space, trial.params), outcome,
                       trial.user_attrs.get("seconds", 0.0), resumed=True)


def untried_point(history: History, tries: int = 10_000) -> dict[str, Any] | None:
    """A valid point not yet taken, drawn with the history's generator (None if none is left)."""
    space = history.space
    if space.enumerable:
        free = [v for v in space.valid_values() if space.key(v) not in history.taken]
        return history.rng.choice(free) if free else None
    for _ in range(tries):
        values = space.random_values(history.rng)
        if space.key(values) not in history.taken and space.is_valid(values):
            return values
    return None


def run_search(
    space: Space[Any],
    objective: Objective,
    strategy: Strategy,
    budget: Budget,
    *,
    storage: Any = None,
    study_key: str | None = None,
    seed: int = 0,
    on_trial: Callable[[TrialRecord], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> SearchResult:
    """Search ``space`` for the point ``objective`` rates lowest, with ``strategy``, within ``budget``.

    ``should_stop`` is asked before every proposal; when it says yes the search ends (``stopped`` is
    ``"stopped"``) after the trial in progress, so a cancelled or terminated tuning loses no measurement.
    """
    key = study_key or f"{space.template}:{space.fingerprint}"
    study = open_study(space, key, storage, strategy.sampler(space, seed))
    invalid_mode = getattr(strategy, "invalid_mode", "constraint")
    records: list[TrialRecord] = []
    taken: set[tuple[int, ...]] = set()
    for trial in study.get_trials(deepcopy=False):
        if trial.user_attrs.get("evaluated") and trial.state in (TrialState.COMPLETE, TrialState.PRUNED):
            records.append(_record(space, trial))
        if trial.user_attrs.get("evaluated") or trial.state is TrialState.RUNNING:
            taken.add(space.key(decode_params(space, trial.params)))
    history = History(space, records, taken, random.Random(seed))
    rejected: Counter[str] = Counter()
    started = time.monotonic()
    best = min((r.value for r in records if r.value is not None), default=None)
    since_gain = 0
    in_a_row = 0
    default = space.default_values()
    while True:
        stop = _stop_reason(budget, len(records), time.monotonic() - started, since_gain)
        if not stop and should_stop is not None and should_stop():
            stop = "stopped"
        if stop:
            break
        try:
            if default is not None and space.key(default) not in taken:
                proposal = default
            elif in_a_row >= MAX_REJECTIONS:
                proposal = untried_point(history)
                if proposal is None:
                    raise SpaceExhausted
            else:
                proposal = strategy.propose(history)
        except SpaceExhausted:
            stop = "space exhausted"
            break
        if proposal is not None:
            study.enqueue_trial(encode_values(space, proposal))
        trial = study.ask()
        values = suggest(trial, space)
        point = space.key(values)
        reason = "invalid" if not space.is_valid(values) else "repeat" if point in taken else None
        if reason is not None:
            rejected[reason] += 1
            in_a_row += 1
            _reject(study, trial, reason, invalid_mode)
            continue
        in_a_row = 0
        taken.add(point)
        begun = time.monotonic()
        try:
            outcome = objective(values)
        except BaseException:
            study.tell(trial, state=TrialState.FAIL)
            raise
        seconds = time.monotonic() - begun
        trial.set_user_attr("evaluated", True)
        trial.set_user_attr("status", outcome.status.value)
        trial.set_user_attr("seconds", seconds)
        if outcome.message:
            trial.set_user_attr("message", outcome.message[:2000])
        if outcome.value is not None:
            study.tell(trial, outcome.value)
        else:
            trial.set_constraint("feasible", 1.0)
            study.tell(trial, state=TrialState.PRUNED)
        record = TrialRecord(trial.number, values, outcome, seconds)
        records.append(record)
        if outcome.value is not None and (best is None or outcome.value < best * (1 - budget.min_gain)):
            since_gain = 0
        else:
            since_gain += 1
        if outcome.value is not None and (best is None or outcome.value < best):
            best = outcome.value
        if on_trial is not None:
            on_trial(record)
    return SearchResult(tuple(records), stop, key, dict(rejected))


def _stop_reason(budget: Budget, evaluated: int, elapsed: float, since_gain: int) -> str:
    if budget.trials is not None and evaluated >= budget.trials:
        return "trials"
    if budget.seconds is not None and elapsed >= budget.seconds:
        return "seconds"
    if budget.patience is not None and since_gain >= budget.patience:
        return "patience"
    return ""


def _reject(study: optuna.Study, trial: optuna.Trial, reason: str, mode: str) -> None:
    trial.set_user_attr("rejected", reason)
    if reason == "repeat" or mode == "fail":
        # A repeat carries no news; telling it as complete would make the sampler insist on it.
        study.tell(trial, state=TrialState.FAIL)
        return
    if mode == "constraint":
        trial.set_constraint("valid", 1.0)
    study.tell(trial, state=TrialState.PRUNED)
