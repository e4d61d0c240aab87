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
from collections.abc import Callable, Iterator
from typing import Any

import optuna
from optuna.trial import TrialState

from compiler.space import Space
from search.space_optuna import decode_params, encode_values, suggest
from search.strategies.base import (
    BatchObjective,
    Budget,
    History,
    Objective,
    Outcome,
    SearchResult,
    Strategy,
    TrialRecord,
)
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
    objective: Objective | None,
    strategy: Strategy,
    budget: Budget,
    *,
    storage: Any = None,
    study_key: str | None = None,
    seed: int = 0,
    on_trial: Callable[[TrialRecord], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    evaluate: BatchObjective | None = None,
    batch: int = 1,
) -> SearchResult:
    """Search ``space`` for the point ``objective`` rates lowest, with ``strategy``, within ``budget``.

    ``batch`` points are proposed at a time (never more than the trial budget has room for): each is
    asked of the study and held pending, in ``history.taken``, so no strategy proposes it twice; then
    ``evaluate`` (default: ``objective`` on each point in turn) evaluates them together and the study
    is told of each as its outcome comes. ``should_stop`` is asked before every proposal; when it says
    yes the search ends (``stopped`` is ``"stopped"``) after the batch in progress, so a cancelled or
    terminated tuning loses no measurement.
    """
    if batch < 1:
        raise ValueError(f"batch must be at least 1, got {batch}")
    if evaluate is None:
        if objective is None:
            raise ValueError("run_search needs an objective or a batch evaluator")
        evaluate = _one_by_one(objective)
    key = study_key or f"{space.template}:{space.fingerprint}"
    study = open_study(space, key, storage, strategy.sampler(space, seed))
    loop = _Loop(space, study, strategy, budget, random.Random(seed), on_trial)
    while True:
        stop = loop.stop_reason()
        if not stop and should_stop is not None and should_stop():
            stop = "stopped"
        if stop:
            break
        room = batch if budget.trials is None else min(batch, budget.trials - len(loop.records))
        pending, stop = loop.collect(room)
        if pending:
            loop.evaluate(pending, evaluate)
        if stop:
            break
    return SearchResult(tuple(loop.records), stop, key, dict(loop.rejected))


def _one_by_one(objective: Objective) -> BatchObjective:
    def evaluate(points: list[dict[str, Any]]) -> Iterator[Outcome]:
        for values in points:
            yield objective(values)

    return evaluate


class _Loop:
    """The state of one search: the study, what was evaluated, what is taken, the budget's counters."""

    def __init__(self, space: Space[Any], study: optuna.Study, strategy: Strategy, budget: Budget,
                 rng: random.Random, on_trial: Callable[[TrialRecord], None] | None) -> None:
        self.space, self.study, self.strategy, self.budget, self.on_trial = space, study, strategy, budget, on_trial
        self.invalid_mode = getattr(strategy, "invalid_mode", "constraint")
        self.records: list[TrialRecord] = []
        self.taken: set[tuple[int, ...]] = set()
        for trial in study.get_trials(deepcopy=False):
            if trial.user_attrs.get("evaluated") and trial.state in (TrialState.COMPLETE, TrialState.PRUNED):
                self.records.append(_record(space, trial))
            if trial.user_attrs.get("evaluated") or trial.state is TrialState.RUNNING:
                self.taken.add(space.key(decode_params(space, trial.params)))
        self.history = History(space, self.records, self.taken, rng)
        self.rejected: Counter[str] = Counter()
        self.started = time.monotonic()
        self.best = min((r.value for r in self.records if r.value is not None), default=None)
        self.since_gain = 0
        self.in_a_row = 0
        self.default = space.default_values()

    def stop_reason(self) -> str:
        return _stop_reason(self.budget, len(self.records), time.monotonic() - self.started, self.since_gain)

    def _propose(self) -> dict[str, Any] | None:
        if self.default is not None and self.space.key(self.default) not in self.taken:
            return self.default
        if self.in_a_row >= MAX_REJECTIONS:
            proposal = untried_point(self.history)
            if proposal is None:
                raise SpaceExhausted
            return proposal
        return self.strategy.propose(self.history)

    def collect(self, room: int) -> tuple[list[tuple[optuna.Trial, dict[str, Any]]], str]:
        """Up to ``room`` new valid points, each asked of the study and taken; and "space exhausted" when
        the proposer ran out before."""
        pending: list[tuple[optuna.Trial, dict[str, Any]]] = []
        while len(pending) < room:
            try:
                proposal = self._propose()
            except SpaceExhausted:
                return pending, "space exhausted"
            if proposal is not None:
                self.study.enqueue_trial(encode_values(self.space, proposal))
            trial = self.study.ask()
            values = suggest(trial, self.space)
            point = self.space.key(values)
            reason = "invalid" if not self.space.is_valid(values) else "repeat" if point in self.taken else None
            if reason is not None:
                self.rejected[reason] += 1
                self.in_a_row += 1
                _reject(self.study, trial, reason, self.invalid_mode)
                continue
            self.in_a_row = 0
            self.taken.add(point)
            pending.append((trial, values))
        return pending, ""

    def evaluate(self, pending: list[tuple[optuna.Trial, dict[str, Any]]], evaluate: BatchObjective) -> None:
        """Evaluate the pending points together and tell the study of each as its outcome comes; a
        failure of the evaluator fails the trials it left untold, then propagates."""
        told = 0
        try:
            begun = time.monotonic()
            for (trial, values), outcome in zip(pending, evaluate([v for _, v in pending]), strict=False):
                now = time.monotonic()
                self._tell(trial, values, outcome, now - begun)
                begun = now
                told += 1
            if told < len(pending):
                raise RuntimeError(f"the evaluator gave {told} outcomes for {len(pending)} points")
        finally:
            for trial, _ in pending[told:]:
                self.study.tell(trial, state=TrialState.FAIL)

    def _tell(self, trial: optuna.Trial, values: dict[str, Any], outcome: Outcome, seconds: float) -> None:
        trial.set_user_attr("evaluated", True)
        trial.set_user_attr("status", outcome.status.value)
        trial.set_user_attr("seconds", seconds)
        if outcome.message:
            trial.set_user_attr("message", outcome.message[:2000])
        if outcome.value is not None:
            self.study.tell(trial, outcome.value)
        else:
            trial.set_constraint("feasible", 1.0)
            self.study.tell(trial, state=TrialState.PRUNED)
        record = TrialRecord(trial.number, values, outcome, seconds)
        self._add(record)
        if self.on_trial is not None:
            self.on_trial(record)

    def _add(self, record: TrialRecord) -> None:
        self.records.append(record)
        value = record.value
        if value is not None and (self.best is None or value < self.best * (1 - self.budget.min_gain)):
            self.since_gain = 0
        else:
            self.since_gain += 1
        if value is not None and (self.best is None or value < self.best):
            self.best = value


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
