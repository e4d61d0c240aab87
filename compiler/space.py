"""Schedule spaces: named parameters with finite choices, filtered by named constraints.

A template declares its space next to its kernel (``space(spec, device, level)``): the parameters a
schedule is made of, the choices at each tuning level, and the constraints that rule a combination
out before anything is compiled. The search engine only sees this generic shape.

>>> from dataclasses import dataclass
>>> @dataclass(frozen=True)
... class Tile:
...     rows: int
...     cols: int
>>> space = Space(
...     template="demo",
...     params=(Param("rows", (1, 2, 4)), Param("cols", (32, 64))),
...     make=lambda p: Tile(**p),
...     constraints=(Constraint("rows * cols <= 128", lambda t: t.rows * t.cols <= 128),),
... )
>>> space.size, len(space.candidates())
(6, 5)
>>> space.enumerate().rejected
{'rows * cols <= 128': 1}
"""

from __future__ import annotations

import itertools
import random
from collections import Counter
from collections.abc import Callable, Hashable, Iterator, Mapping
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any, Generic, TypeVar

S = TypeVar("S", bound=Hashable)


class ScheduleDoesNotFitError(ValueError):
    """A template refuses one schedule for one spec on purpose: the schedule cannot serve it.

    The one exception verification may count as a pruned candidate. Any other exception from a
    template's ``build`` is a bug in the template (or the code it calls) and fails the check.
    """


class EmptySpaceError(ScheduleDoesNotFitError):
    """No schedule of a template can serve the spec (on this device): the space is empty, for a reason.

    Raised by ``space`` where the reason is known before any schedule is built (a tensor too large for
    the template's indices, a device without the units the template needs), and by ``build`` for the
    same reason when it is called directly.
    """


@dataclass(frozen=True)
class Param:
    """One tunable parameter and its allowed values (hashable, JSON-friendly: ints, strings, tuples)."""

    name: str
    choices: tuple[Any, ...]

    def __post_init__(self) -> None:
        if not self.choices:
            raise ValueError(f"parameter {self.name!r} has no choices")
        if len(set(self.choices)) != len(self.choices):
            raise ValueError(f"parameter {self.name!r} has repeated choices: {self.choices}")


@dataclass(frozen=True)
class Constraint(Generic[S]):
    """A named condition every runnable schedule meets; the name is what a rejection reports."""

    name: str
    holds: Callable[[S], bool]


@dataclass(frozen=True)
class Enumeration(Generic[S]):
    """The valid schedules of a space, and how many combinations each constraint ruled out."""

    valid: tuple[S, ...]
    rejected: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return len(self.valid) + sum(self.rejected.values())


@dataclass(frozen=True)
class Space(Generic[S]):
    """The product of the parameters' choices, keeping the schedules that satisfy every constraint."""

    template: str
    params: tuple[Param, ...]
    make: Callable[[Mapping[str, Any]], S]
    constraints: tuple[Constraint[S], ...] = ()

    @property
    def size(self) -> int:
        """Number of combinations before constraints."""
        count = 1
        for param in self.params:
            count *= len(param.choices)
        return count

    def combinations(self) -> Iterator[dict[str, Any]]:
        names = [p.name for p in self.params]
        for values in itertools.product(*(p.choices for p in self.params)):
            yield dict(zip(names, values, strict=True))

    def violation(self, schedule: S) -> str | None:
        """The name of the first constraint ``schedule`` breaks, or None if it is valid."""
        for constraint in self.constraints:
            if not constraint.holds(schedule):
                return constraint.name
        return None

    def enumerate(self) -> Enumeration[S]:
        valid: list[S] = []
        rejected: Counter[str] = Counter()
        for combination in self.combinations():
            schedule = self.make(combination)
            reason = self.violation(schedule)
            if reason is None:
                valid.append(schedule)
            else:
                rejected[reason] += 1
        return Enumeration(valid=tuple(valid), rejected=dict(rejected))

    def candidates(self) -> tuple[S, ...]:
        return self.enumerate().valid

    def sample(self, count: int, seed: int = 0) -> tuple[S, ...]:
        """``count`` distinct valid schedules chosen with a seeded generator (all if fewer exist)."""
        valid = list(self.candidates())
        if count >= len(valid):
            return tuple(valid)
        return tuple(random.Random(seed).sample(valid, count))

    def schedule(self, values: Mapping[str, Any]) -> S:
        """The schedule for explicit parameter values, checked against choices and constraints."""
        expected = {p.name for p in self.params}
        if set(values) != expected:
            missing = sorted(expected - set(values))
            extra = sorted(set(values) - expected)
            raise ValueError(f"{self.template}: schedule parameters missing {missing}, unexpected {extra}")
        for param in self.params:
            if values[param.name] not in param.choices:
                raise ValueError(
                    f"{self.template}: {param.name}={values[param.name]!r} is not one of {param.choices}"
                )
        schedule = self.make(values)
        reason = self.violation(schedule)
        if reason is not None:
            raise ValueError(f"{self.template}: schedule {values} violates {reason!r}")
        return schedule


def schedule_values(schedule: object) -> dict[str, Any]:
    """A schedule dataclass's fields as a plain dict, in declaration order (for tables and storage)."""
    if not is_dataclass(schedule) or isinstance(schedule, type):
        raise TypeError(f"a schedule is a dataclass instance, got {type(schedule).__name__}")
    return {f.name: getattr(schedule, f.name) for f in fields(schedule)}
