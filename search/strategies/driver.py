"""The search loop every strategy runs in: one Optuna study, budgets, and no wasted measurement.

The study lives in the storage the caller gives (in memory by default), under the caller's key, and
carries the space's fingerprint: a study made by another space is refused rather than resumed. On
resume the study's evaluated trials are read back, count against the trial budget and are never
proposed again. Points that break the space's constraints, and points already evaluated or being
evaluated by another worker, are told to the study as rejected proposals: they never reach the
objective and never count against the budget. The template's default schedule is evaluated first.

Several workers may run on one study (``search.strategies.workers``): before each batch the driver
reads the study again; what other workers evaluated joins the history and counts against the trial
budget, what they are evaluating is taken (and counts against the budget until it ends), and a trial
whose worker stopped sending heartbeats is failed and its point enqueued again, once.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import optuna
from optuna.exceptions import UpdateFinishedTrialError
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
from search.strategies.workers import (
    HEARTBEAT_S,
    LOST_AFTER_S,
    Heartbeat,
    claim,
    fail_lost,
    is_evaluated,
    last_heard,
    point_of,
    standing,
    worker_id,
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
    worker: str | None = None,
    lost_after_s: float = LOST_AFTER_S,
    heartbeat_s: float = HEARTBEAT_S,
    first: Sequence[Mapping[str, Any]] = (),
) -> SearchResult:
    """Search ``space`` for the point ``objective`` rates lowest, with ``strategy``, within ``budget``.

    ``batch`` points are proposed at a time (never more than the trial budget has room for): each is
    asked of the study and held pending, in ``history.taken``, so no strategy proposes it twice; then
    ``evaluate`` (default: ``objective`` on each point in turn) evaluates them together and the study
    is told of each as its outcome comes. ``should_stop`` is asked before every proposal; when it says
    yes the search ends (``stopped`` is ``"stopped"``) after the batch in progress, so a cancelled or
    terminated tuning loses no measurement.

    On a study shared with other workers (any storage but Optuna's in-memory one), ``worker`` names this
    one (default: host, process and a random part); a trial of another worker not heard of for
    ``lost_after_s`` is failed as lost and its point enqueued again; this worker's pending trials send
    a heartbeat every ``heartbeat_s``. When the budget's remaining trials are all being evaluated by
    other workers, this one waits for them (they may be lost) instead of stopping short.

    ``first`` are points to evaluate before the strategy proposes any, after the template's default
    (schedules that were best elsewhere: a warm start), each as the nearest point of ``space``
    (``Space.restore(nearest=True)``: another device's space offers other block sizes); those that are
    still not valid points of ``space``, or were evaluated already, are passed over.
    """
    if batch < 1:
        raise ValueError(f"batch must be at least 1, got {batch}")
    if evaluate is None:
        if objective is None:
            raise ValueError("run_search needs an objective or a batch evaluator")
        evaluate = _one_by_one(objective)
    key = study_key or f"{space.template}:{space.fingerprint}"
    study = open_study(space, key, storage, strategy.sampler(space, seed))
    shared = storage is not None and not isinstance(storage, optuna.storages.InMemoryStorage)
    loop = _Loop(space, study, strategy, budget, random.Random(seed), on_trial,
                 _Sharing(worker or worker_id(), lost_after_s, heartbeat_s) if shared else None, first)
    opening = True
    while True:
        if not opening:  # what other workers did meanwhile (the first read was the loop's own)
            loop.sync()
        opening = False
        stop = loop.stop_reason()
        if not stop and should_stop is not None and should_stop():
            stop = "stopped"
        if stop:
            break
        room = batch if budget.trials is None else min(batch, budget.trials - len(loop.records) - loop.running)
        if room <= 0:  # the rest of the budget is being evaluated by other workers: wait for them
            time.sleep(min(1.0, heartbeat_s))
            continue
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


class _Sharing:
    """How this worker takes part in a shared study."""

    def __init__(self, worker: str, lost_after_s: float, heartbeat_s: float) -> None:
        if not (lost_after_s > 0 and heartbeat_s > 0):
            raise ValueError(f"lost_after_s and heartbeat_s must be positive, got {lost_after_s}, {heartbeat_s}")
        self.worker, self.lost_after_s, self.heartbeat_s = worker, lost_after_s, heartbeat_s


class _Loop:
    """The state of one search: the study, what was evaluated, what is taken, the budget's counters."""

    def __init__(self, space: Space[Any], study: optuna.Study, strategy: Strategy, budget: Budget,
                 rng: random.Random, on_trial: Callable[[TrialRecord], None] | None,
                 sharing: _Sharing | None, first: Sequence[Mapping[str, Any]] = ()) -> None:
        self.space, self.study, self.strategy, self.budget, self.on_trial = space, study, strategy, budget, on_trial
        self.sharing = sharing
        self.invalid_mode = getattr(strategy, "invalid_mode", "constraint")
        self.records: list[TrialRecord] = []
        #: What strategies must not propose: evaluated, running anywhere, or waiting in the queue.
        self.taken: set[tuple[int, ...]] = set()
        #: What must not be evaluated again: evaluated, or running anywhere (a queued point may be).
        self.blocked: set[tuple[int, ...]] = set()
        #: Trial numbers already in ``records``.
        self.known: set[int] = set()
        #: Trials other workers are evaluating now (they count against the trial budget).
        self.running = 0
        #: Points waiting in the study's queue, to be asked for before anything new is proposed.
        self.queued: set[tuple[int, ...]] = set()
        #: The template's default, then the caller's points, each evaluated before any proposal.
        given = [v for v in (space.restore(point, nearest=True) for point in first) if v is not None]
        self.first = [v for v in (space.default_values(), *given) if v is not None]
        self.history = History(space, self.records, self.taken, rng, given=frozenset(map(space.key, given)))
        self.rejected: Counter[str] = Counter()
        self.best: float | None = None
        self.since_gain = 0
        self.sync()
        self.since_gain = 0  # patience counts this call's trials and those other workers add from now on
        self.started = time.monotonic()
        self.in_a_row = 0

    def sync(self) -> None:
        """Read the study again: evaluated trials not yet known join the records (resumed, or another
        worker's), running and queued points are taken, and lost trials are failed and re-enqueued."""
        now = time.time()
        blocked: set[tuple[int, ...]] = set()
        waiting: set[tuple[int, ...]] = set()
        running = 0
        for trial in self.study.get_trials(deepcopy=False):
            if is_evaluated(trial):
                blocked.add(self.space.key(decode_params(self.space, trial.params)))
                if trial.number not in self.known:
                    self.known.add(trial.number)
                    self._add(_record(self.space, trial))
            elif trial.state is TrialState.RUNNING:
                heard = last_heard(trial)
                if self.sharing is not None and heard is not None and now - heard > self.sharing.lost_after_s:
                    if fail_lost(self.study, trial, self.sharing.worker, now):
                        waiting.add(self.space.key(decode_params(self.space, trial.params)))
                    continue
                running += 1
                point = point_of(trial)
                if point is not None:
                    blocked.add(point)
                elif trial.params:  # an older trial, without a claim: its parameters are complete
                    blocked.add(self.space.key(decode_params(self.space, trial.params)))
            elif trial.state is TrialState.WAITING and trial.system_attrs.get("fixed_params"):
                waiting.add(self.space.key(decode_params(self.space, trial.system_attrs["fixed_params"])))
        self.running = running
        self.blocked = blocked
        self.queued = waiting - blocked
        self.taken.clear()
        self.taken.update(blocked | waiting)

    def stop_reason(self) -> str:
        return _stop_reason(self.budget, len(self.records), time.monotonic() - self.started, self.since_gain)

    def _propose(self) -> dict[str, Any] | None:
        for values in self.first:
            if self.space.key(values) not in self.taken:
                return values
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
            if self.queued:
                # Points in the study's queue (a lost trial's, a proposal another worker's ask did not
                # take) go first: the study's ask takes the oldest of them. Each is counted once here,
                # so the loop ends even if other workers take them first.
                self.queued.pop()
                proposal = None
            else:
                try:
                    proposal = self._propose()
                except SpaceExhausted:
                    return pending, "space exhausted"
            if proposal is not None:
                self.study.enqueue_trial(encode_values(self.space, proposal))
            trial = self.study.ask()
            values = suggest(trial, self.space)
            point = self.space.key(values)
            if proposal is not None and point != self.space.key(proposal):
                # The ask took an older queued point (another worker's); this proposal waits its turn.
                self.queued.add(self.space.key(proposal))
                self.taken.add(self.space.key(proposal))
            reason = "invalid" if not self.space.is_valid(values) else "repeat" if point in self.blocked else None
            if reason is None and self.sharing is not None:
                claim(trial, point, self.sharing.worker)
                held, ahead = standing(self.study, trial, point, (t.number for t, _ in pending))
                over = self.budget.trials is not None and ahead >= self.budget.trials
                if held or over:
                    # This worker's view of the study is behind: another worker holds the point, or the
                    # budget is spent. Give the trial up and read the study again before proposing more
                    # (else a proposer would insist on the point).
                    if held:
                        self.taken.add(point)
                        self.blocked.add(point)
                    self.rejected["repeat" if held else "over budget"] += 1
                    _reject(self.study, trial, "repeat" if held else "over budget", self.invalid_mode)
                    return pending, ""
            if reason is not None:
                self.rejected[reason] += 1
                self.in_a_row += 1
                _reject(self.study, trial, reason, self.invalid_mode)
                continue
            self.in_a_row = 0
            self.taken.add(point)
            self.blocked.add(point)
            pending.append((trial, values))
        return pending, ""

    def evaluate(self, pending: list[tuple[optuna.Trial, dict[str, Any]]], evaluate: BatchObjective) -> None:
        """Evaluate the pending points together and tell the study of each as its outcome comes; a
        failure of the evaluator fails the trials it left untold, then propagates."""
        told = 0
        beating = (Heartbeat(self.study, [t for t, _ in pending], self.sharing.heartbeat_s)
                   if self.sharing is not None else None)
        try:
            with beating or contextlib.nullcontext():
                begun = time.monotonic()
                for (trial, values), outcome in zip(pending, evaluate([v for _, v in pending]), strict=False):
                    now = time.monotonic()
                    if beating is not None:
                        beating.done(trial)
                    record = self._tell(trial, values, outcome, now - begun)
                    begun = now
                    told += 1
                    # Told first: a failing callback (a closed progress pipe) must not leave a told trial
                    # to the failure path below, which would bury the callback's error under Optuna's.
                    if record is not None and self.on_trial is not None:
                        self.on_trial(record)
            if told < len(pending):
                raise RuntimeError(f"the evaluator gave {told} outcomes for {len(pending)} points")
        finally:
            for trial, _ in pending[told:]:
                with contextlib.suppress(UpdateFinishedTrialError):  # failed as lost by another worker
                    self.study.tell(trial, state=TrialState.FAIL)

    def _tell(self, trial: optuna.Trial, values: dict[str, Any], outcome: Outcome,
              seconds: float) -> TrialRecord | None:
        """Tell the study of the outcome and record it; None when another worker had taken the trial."""
        try:
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
        except UpdateFinishedTrialError:
            # Another worker took this trial for lost (this one was silent too long) and re-enqueued its
            # point: the study keeps that re-run, not this result.
            return None
        self.known.add(trial.number)
        record = TrialRecord(trial.number, values, outcome, seconds)
        self._add(record)
        return record

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
    if reason in ("repeat", "over budget") or mode == "fail":
        # A repeat carries no news; telling it as complete would make the sampler insist on it.
        study.tell(trial, state=TrialState.FAIL)
        return
    if mode == "constraint":
        trial.set_constraint("valid", 1.0)
    study.tell(trial, state=TrialState.PRUNED)
