"""Several workers on one study: who evaluates what, heartbeats, and trials lost with their worker.

Each worker is one process running the driver on the same study (an Optuna RDB storage; PostgreSQL when
the workers are several processes, as Optuna's FAQ says SQLite locks). What they share lives in the
trials' user attributes:

- ``claim``: the space key of a trial's values (``point``), the worker evaluating it (``worker``) and
  when it claimed it (``since``), written once the trial's parameters are all suggested; a worker then
  reads the study and gives its trial up (a ``repeat``) if another trial holds the same point running
  or evaluated. Both workers write before they read, so of two that raced for a point at least one
  sees the other: a point is never evaluated twice (in the rare case both see each other, both give
  it up, and it stays free);
- the trial budget: a claimed trial with as many running or evaluated trials numbered before it as the
  budget allows is given up (``over budget``), so workers that read the study at the same time still
  stop at the shared budget;
- ``heartbeat``: when the worker last said it is alive (seconds since the epoch; until the first beat,
  the claim's time), refreshed by a small thread every few seconds while the trial is pending;
- ``lost``: set on a running trial whose heartbeat is older than the grace period, by whichever worker
  notices first; the trial is failed (the storage's state change is atomic: one worker wins) and its
  point enqueued again with ``requeued_from`` naming it. A re-run that is lost in turn is not
  re-enqueued: a point is re-run at most once.

Optuna's own heartbeat (``heartbeat_interval``) works only inside ``study.optimize``; the driver uses
ask and tell, so it keeps its own.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections.abc import Iterable
from types import TracebackType
from typing import Any

import optuna
from optuna.exceptions import UpdateFinishedTrialError
from optuna.trial import FrozenTrial, TrialState

#: Seconds between two heartbeats of a pending trial.
HEARTBEAT_S = 5.0
#: Seconds without a heartbeat after which a running trial is taken for lost (the caller adds the
#: candidate's time-out to it: ``search.tune``).
LOST_AFTER_S = 60.0


def worker_id() -> str:
    """A name for this worker that no other process shares: host, process id and a random part."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def point_of(trial: FrozenTrial) -> tuple[int, ...] | None:
    """The point a trial holds, if it has claimed one."""
    claimed = trial.user_attrs.get("claim")
    return tuple(claimed["point"]) if isinstance(claimed, dict) and "point" in claimed else None


def worker_of(trial: FrozenTrial) -> str | None:
    """The worker that claimed a trial, if one did."""
    claimed = trial.user_attrs.get("claim")
    return str(claimed.get("worker")) if isinstance(claimed, dict) else None


def is_evaluated(trial: FrozenTrial) -> bool:
    return bool(trial.user_attrs.get("evaluated")) and trial.state in (TrialState.COMPLETE, TrialState.PRUNED)


def last_heard(trial: FrozenTrial) -> float | None:
    """When a running trial last showed it was alive: its heartbeat, else its claim, else its start."""
    beat = trial.user_attrs.get("heartbeat")
    if isinstance(beat, int | float):
        return float(beat)
    claimed = trial.user_attrs.get("claim")
    if isinstance(claimed, dict) and isinstance(claimed.get("since"), int | float):
        return float(claimed["since"])
    return trial.datetime_start.timestamp() if trial.datetime_start is not None else None


def claim(trial: optuna.Trial, point: tuple[int, ...], worker: str) -> None:
    """Mark ``trial`` as this worker's evaluation of ``point``, alive now (one write)."""
    trial.set_user_attr("claim", {"point": list(point), "worker": worker, "since": time.time()})


def standing(study: optuna.Study, trial: optuna.Trial, point: tuple[int, ...], mine: Iterable[int]
             ) -> tuple[bool, int]:
    """Where a just-claimed trial stands: whether another trial (not one of ``mine``) holds ``point``
    running or evaluated, and how many trials numbered before it are running or evaluated.

    The second is how workers share a trial budget exactly: trial numbers are given out in order, so a
    trial with ``budget`` trials ahead of it is over the budget, whatever any worker read before."""
    skip = {trial.number, *mine}
    held, ahead = False, 0
    for other in study.get_trials(deepcopy=False, states=(TrialState.RUNNING, TrialState.COMPLETE,
                                                          TrialState.PRUNED)):
        live = other.state is TrialState.RUNNING or is_evaluated(other)
        if other.number < trial.number and live:
            ahead += 1
        if other.number not in skip and live and point_of(other) == point:
            held = True
    return held, ahead


def fail_lost(study: optuna.Study, trial: FrozenTrial, worker: str, now: float) -> bool:
    """Fail a running trial whose worker went silent and enqueue its point again (once per point).

    Returns whether this worker re-enqueued it: when several notice, the storage lets one change its
    state, and only that one re-enqueues (unless the trial was a re-run already)."""
    storage = study._storage  # the trial is another worker's: only the storage can reach it
    heard = last_heard(trial)
    silent = f"{now - heard:.0f} s" if heard is not None else "ever"
    note = f"no heartbeat from {worker_of(trial) or 'an unknown worker'} for {silent}; failed by {worker}"
    try:
        storage.set_trial_user_attr(trial._trial_id, "lost", note)
        storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)
    except UpdateFinishedTrialError:  # another worker was first, or its worker came back and finished
        return False
    if point_of(trial) is None or "requeued_from" in trial.user_attrs:
        return False
    study.enqueue_trial(dict(trial.params), user_attrs={"requeued_from": trial.number})
    return True


class Heartbeat:
    """A thread that refreshes the ``heartbeat`` of the given trials every ``every_s`` seconds until
    closed; a trial may be dropped (``done``) once it is told. Used as a context manager."""

    def __init__(self, study: optuna.Study, trials: Iterable[optuna.Trial], every_s: float = HEARTBEAT_S) -> None:
        self._storage: Any = study._storage
        self._ids = {t._trial_id for t in trials}
        self._every_s = every_s
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="warpmap-heartbeat", daemon=True)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join()

    def done(self, trial: optuna.Trial) -> None:
        with self._lock:
            self._ids.discard(trial._trial_id)

    def _beat(self) -> None:
        while not self._stop.wait(self._every_s):
            with self._lock:
                ids = list(self._ids)
            for trial_id in ids:
                try:
                    self._storage.set_trial_user_attr(trial_id, "heartbeat", time.time())
                except UpdateFinishedTrialError:  # told meanwhile, or failed as lost by another worker
                    with self._lock:
                        self._ids.discard(trial_id)
                except Exception:  # a dropped beat is retried; the trial must not die of it
                    continue
