"""What every strategy shares: the objective's answer, budgets, trial records and the strategy shape.

A strategy proposes points of a space; the driver (``search.strategies.driver``) keeps the study,
skips invalid and repeated proposals, calls the objective and enforces the budget. The objective is
the only thing that measures: it returns a value to minimise (a latency) or a failure status, and it
knows nothing of Optuna; search knows nothing of databases or the web.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import optuna

from compiler.space import Space
from search.trial import TrialStatus


@dataclass(frozen=True)
class Outcome:
    """What the objective measured for one point: a value (lower is better) or why there is none."""

    status: TrialStatus
    value: float | None = None
    message: str = ""

    def __post_init__(self) -> None:
        if (self.status is TrialStatus.OK) != (self.value is not None):
            raise ValueError(f"an {self.status} outcome {'needs' if self.value is None else 'has no'} value")

    @classmethod
    def ok(cls, value: float) -> Outcome:
        return cls(TrialStatus.OK, float(value))

    @classmethod
    def failed(cls, status: TrialStatus, message: str = "") -> Outcome:
        return cls(status, None, message)


Objective = Callable[[dict[str, Any]], Outcome]
#: Evaluates several points at once (built together, then measured one by one): yields one outcome per
#: point, in the order given, each as soon as it is known, so the driver tells the study as they finish.
BatchObjective = Callable[[list[dict[str, Any]]], Iterator[Outcome]]


@dataclass(frozen=True)
class Budget:
    """When a search stops: after ``trials`` evaluations (the study's, resumed ones included), after
    ``seconds`` of this call, or after ``patience`` evaluations without a ``min_gain`` relative gain."""

    trials: int | None = None
    seconds: float | None = None
    patience: int | None = None
    min_gain: float = 0.01

    def __post_init__(self) -> None:
        if self.trials is None and self.seconds is None and self.patience is None:
            raise ValueError("a budget needs trials, seconds or patience")
        for name in ("trials", "seconds", "patience"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"budget {name} must be positive, got {value}")


@dataclass(frozen=True)
class TrialRecord:
    """One evaluated point: its study trial number, values, outcome and the time the objective took."""

    number: int
    values: Mapping[str, Any]
    outcome: Outcome
    seconds: float = 0.0
    resumed: bool = False

    @property
    def value(self) -> float | None:
        return self.outcome.value


@dataclass(frozen=True)
class SearchResult:
    """Every evaluation of the study in order (resumed ones first), the best, and why it stopped."""

    trials: tuple[TrialRecord, ...]
    stopped: str
    study_name: str
    rejected: Mapping[str, int] = field(default_factory=dict)

    @property
    def best(self) -> TrialRecord | None:
        ok = [(t.value, i) for i, t in enumerate(self.trials) if t.value is not None]
        return self.trials[min(ok)[1]] if ok else None


@dataclass
class History:
    """What a proposer may read: the evaluated points in order and the points not to propose again
    (evaluated, or pending: proposed in this batch, or being evaluated by another worker)."""

    space: Space[Any]
    records: list[TrialRecord]
    taken: set[tuple[int, ...]]
    rng: random.Random
    #: A proposer's own state for the length of one search (its pool, its model, its iterator).
    scratch: dict[str, Any] = field(default_factory=dict)
    #: The points the caller asked to evaluate first (a warm start; not the template's default): a
    #: strategy's own initial design comes on top of them, so a warm start never narrows its view.
    given: frozenset[tuple[int, ...]] = frozenset()


class Strategy(Protocol):
    """A way to choose the next point. ``sampler`` is the Optuna sampler asked when ``propose`` has
    no point of its own (returns None); a strategy that always proposes uses it only as a fallback."""

    @property
    def name(self) -> str: ...

    def sampler(self, space: Space[Any], seed: int) -> optuna.samplers.BaseSampler: ...

    def propose(self, history: History) -> dict[str, Any] | None: ...
