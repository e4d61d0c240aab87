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

import dataclasses
import functools
import hashlib
import itertools
import json
import math
import random
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, fields, is_dataclass
from enum import StrEnum
from typing import Any, Generic, TypeVar

S = TypeVar("S", bound=Hashable)
#: A constraint only reads its schedule, so one written for a base schedule type serves a subclass's.
S_in = TypeVar("S_in", bound=Hashable, contravariant=True)


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


#: Combinations a space may have before ``enumerate`` refuses it (a search samples such a space instead).
DEFAULT_MAX_SIZE = 2_000_000

#: Values an Optuna storage holds as a categorical choice as they are.
_STORABLE = (str, int, float, bool, type(None))


class SpaceTooLargeError(ValueError):
    """A space has more combinations than its size cap allows to enumerate."""


class Kind(StrEnum):
    """What the order of a parameter's choices means to a sampler."""

    #: No order: choices are labels (layouts, flags, tuples).
    CATEGORICAL = "categorical"
    #: Ordered as listed: a neighbour is the next choice up or down (tile sizes, stages).
    ORDINAL = "ordinal"
    #: Ordered powers of two: a step is a doubling, so the log is the natural axis.
    LOG2 = "log2"


@dataclass(frozen=True)
class Condition:
    """A parameter is active only when an earlier parameter ``param`` takes one of ``values``."""

    param: str
    values: tuple[Any, ...]

    def holds(self, values: Mapping[str, Any]) -> bool:
        return values.get(self.param) in self.values


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _infer_kind(choices: tuple[Any, ...]) -> Kind:
    """Numbers listed in increasing order are ordinal (log2 if all are powers of two); the rest labels."""
    if not all(map(_is_number, choices)) or len(choices) < 2 or list(choices) != sorted(choices):
        return Kind.CATEGORICAL
    if all(isinstance(c, int) and c > 0 and c & (c - 1) == 0 for c in choices):
        return Kind.LOG2
    return Kind.ORDINAL


def _same(a: Any, b: Any) -> bool:
    """Equal and both or neither a bool (``True == 1`` must not make a flag a number)."""
    return bool(a == b) and isinstance(a, bool) == isinstance(b, bool)


def _nearest_number(choices: tuple[Any, ...], wanted: Any) -> list[Any]:
    """The numeric choice nearest ``wanted`` (by ratio when both are positive), or none."""
    numbers = [c for c in choices if _is_number(c)]
    if not _is_number(wanted) or not numbers:
        return []

    def distance(choice: float) -> float:
        if choice > 0 and wanted > 0:
            return abs(math.log(choice / wanted))
        return abs(choice - wanted)

    return [min(numbers, key=distance)]


def _as_json(choice: Any) -> Any:
    """A choice as JSON gives it back: tuples as lists."""
    return [_as_json(c) for c in choice] if isinstance(choice, tuple) else choice


def _encode_choice(choice: Any) -> str:
    """A canonical JSON text for a choice Optuna cannot store (tuples and nested tuples)."""
    return json.dumps(choice, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class Param:
    """One tunable parameter and its allowed values (hashable, JSON-friendly: ints, strings, tuples).

    ``kind`` says whether the order of ``choices`` means something (inferred when omitted: increasing
    numbers are ordinal, powers of two log2, anything else categorical). ``when`` makes the parameter
    conditional: while it does not hold, the parameter is inactive and takes its first choice.
    """

    name: str
    choices: tuple[Any, ...]
    kind: Kind | None = None
    when: Condition | None = None

    def __post_init__(self) -> None:
        if not self.choices:
            raise ValueError(f"parameter {self.name!r} has no choices")
        if len(set(self.choices)) != len(self.choices):
            raise ValueError(f"parameter {self.name!r} has repeated choices: {self.choices}")
        kind = _infer_kind(self.choices) if self.kind is None else Kind(self.kind)
        if kind is Kind.LOG2 and _infer_kind(self.choices) is not Kind.LOG2:
            raise ValueError(f"parameter {self.name!r} is log2 but {self.choices} are not increasing powers of two")
        object.__setattr__(self, "kind", kind)

    @property
    def storable(self) -> tuple[Any, ...]:
        """The choices as an Optuna storage holds them: scalars as they are, anything else as JSON text."""
        if all(isinstance(c, _STORABLE) for c in self.choices):
            return self.choices
        return tuple(_encode_choice(c) for c in self.choices)

    def encode(self, value: Any) -> Any:
        """The storable form of one choice (raises ValueError for a value that is not a choice)."""
        return self.storable[self.index(value)]

    def decode(self, stored: Any) -> Any:
        """The choice a storable value stands for (the inverse of ``encode``)."""
        storable = self.storable
        for i, candidate in enumerate(storable):
            if _same(candidate, stored):
                return self.choices[i]
        raise ValueError(f"parameter {self.name!r}: stored value {stored!r} is not one of {storable}")

    def index(self, value: Any) -> int:
        for i, choice in enumerate(self.choices):
            if _same(choice, value):
                return i
        raise ValueError(f"parameter {self.name!r}: {value!r} is not one of {self.choices}")

    def position(self, value: Any) -> float:
        """Where ``value`` lies on the parameter's axis, in [0, 1] (ordinal and log2: by rank)."""
        n = len(self.choices)
        return self.index(value) / (n - 1) if n > 1 else 0.0

    def describe(self) -> dict[str, Any]:
        """A JSON-friendly description (what the space's fingerprint is made of)."""
        return {
            "name": self.name,
            "kind": str(self.kind),
            "choices": [_encode_choice(c) for c in self.choices],
            "when": None if self.when is None else [self.when.param, [_encode_choice(v) for v in self.when.values]],
        }


@dataclass(frozen=True)
class Constraint(Generic[S_in]):
    """A named condition every runnable schedule meets; the name is what a rejection reports."""

    name: str
    holds: Callable[[S_in], bool]


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
    """The product of the parameters' choices, keeping the schedules that satisfy every constraint.

    ``version`` is the template's version of the space (bump it when ``make`` or a constraint changes
    meaning); with the parameters and constraint names it makes the ``fingerprint`` a stored study is
    checked against. ``default`` is the template's default schedule (what a search tries first);
    ``max_size`` caps the combinations ``enumerate`` walks through.
    """

    template: str
    params: tuple[Param, ...]
    make: Callable[[Mapping[str, Any]], S]
    constraints: tuple[Constraint[S], ...] = ()
    version: str = "1"
    default: Mapping[str, Any] | None = field(default=None, compare=False)
    max_size: int = DEFAULT_MAX_SIZE

    def __post_init__(self) -> None:
        seen: set[str] = set()
        for param in self.params:
            if param.name in seen:
                raise ValueError(f"{self.template}: parameter {param.name!r} is declared twice")
            if param.when is not None and param.when.param not in seen:
                raise ValueError(
                    f"{self.template}: {param.name!r} depends on {param.when.param!r}, which must be declared before it"
                )
            seen.add(param.name)

    @property
    def size(self) -> int:
        """Number of combinations before constraints (an inactive parameter counts once)."""
        if all(p.when is None for p in self.params):
            return math.prod(len(p.choices) for p in self.params)
        return self._count(0, {})

    def _count(self, start: int, values: dict[str, Any]) -> int:
        # Walks only the parameters some condition reads; the others multiply in.
        controlling = {p.when.param for p in self.params if p.when is not None}
        count = 1
        for i in range(start, len(self.params)):
            param = self.params[i]
            active = param.when is None or param.when.holds(values)
            if param.name in controlling:
                options = param.choices if active else param.choices[:1]
                return count * sum(self._count(i + 1, {**values, param.name: c}) for c in options)
            count *= len(param.choices) if active else 1
        return count

    @property
    def enumerable(self) -> bool:
        """Whether ``enumerate`` may walk every combination (the size is within the cap)."""
        return self.size <= self.max_size

    @property
    def fingerprint(self) -> str:
        """A digest of the template, its version, the parameters and the constraint names.

        A stored study is resumed only by a space with the same fingerprint: any change of choices,
        kinds, conditions, constraints or version makes earlier trials mean something else.
        """
        description = {
            "template": self.template,
            "version": self.version,
            "params": [p.describe() for p in self.params],
            "constraints": [c.name for c in self.constraints],
        }
        text = json.dumps(description, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:20]

    def active(self, values: Mapping[str, Any]) -> tuple[Param, ...]:
        """The parameters that are active for ``values`` (conditions read earlier parameters)."""
        return tuple(p for p in self.params if p.when is None or p.when.holds(values))

    def canonical(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """``values`` with every inactive parameter at its first choice, in declaration order."""
        result: dict[str, Any] = {}
        for param in self.params:
            active = param.when is None or param.when.holds(result)
            result[param.name] = values[param.name] if active and param.name in values else param.choices[0]
        return result

    def key(self, values: Mapping[str, Any]) -> tuple[int, ...]:
        """A hashable identity of a point (choice indices of the canonical values)."""
        canonical = self.canonical(values)
        return tuple(p.index(canonical[p.name]) for p in self.params)

    def combinations(self) -> Iterator[dict[str, Any]]:
        if all(p.when is None for p in self.params):
            names = [p.name for p in self.params]
            for values in itertools.product(*(p.choices for p in self.params)):
                yield dict(zip(names, values, strict=True))
            return
        yield from self._combinations(0, {})

    def _combinations(self, start: int, values: dict[str, Any]) -> Iterator[dict[str, Any]]:
        if start == len(self.params):
            yield dict(values)
            return
        param = self.params[start]
        active = param.when is None or param.when.holds(values)
        for choice in param.choices if active else param.choices[:1]:
            values[param.name] = choice
            yield from self._combinations(start + 1, values)
        del values[param.name]

    def random_values(self, rng: random.Random) -> dict[str, Any]:
        """One combination drawn uniformly per parameter (conditions respected, constraints not)."""
        values: dict[str, Any] = {}
        for param in self.params:
            active = param.when is None or param.when.holds(values)
            values[param.name] = rng.choice(param.choices) if active else param.choices[0]
        return values

    def neighbours(self, values: Mapping[str, Any], *, hamming: bool = False) -> list[dict[str, Any]]:
        """Points one step away: an ordinal or log2 parameter one choice up or down, a categorical one
        changed to any other choice; with ``hamming``, any one parameter changed to any other choice
        (constraints not checked)."""
        base = self.canonical(values)
        result: list[dict[str, Any]] = []
        for param in self.active(base):
            i = param.index(base[param.name])
            if hamming or param.kind is Kind.CATEGORICAL:
                others = [j for j in range(len(param.choices)) if j != i]
            else:
                others = [j for j in (i - 1, i + 1) if 0 <= j < len(param.choices)]
            result.extend(self.canonical({**base, param.name: param.choices[j]}) for j in others)
        return result

    def violation(self, schedule: S) -> str | None:
        """The name of the first constraint ``schedule`` breaks, or None if it is valid."""
        for constraint in self.constraints:
            if not constraint.holds(schedule):
                return constraint.name
        return None

    def values_violation(self, values: Mapping[str, Any]) -> str | None:
        """Why ``values`` is not a valid point (a wrong choice, or the first broken constraint), or None."""
        for param in self.active(values):
            if param.name not in values:
                return f"{param.name} missing"
            if not any(_same(c, values[param.name]) for c in param.choices):
                return f"{param.name}={values[param.name]!r} is not a choice"
        try:
            schedule = self.make(self.canonical(values))
        except ScheduleDoesNotFitError as error:
            return str(error)
        return self.violation(schedule)

    def is_valid(self, values: Mapping[str, Any]) -> bool:
        return self.values_violation(values) is None

    def valid_values(self) -> list[dict[str, Any]]:
        """Every valid point as parameter values (the space must be enumerable); fresh dicts each call."""
        return [dict(v) for v in self._valid]

    @functools.cached_property
    def _valid(self) -> tuple[dict[str, Any], ...]:
        # Walked once per space: a search asks again for every substituted proposal, and a level-2
        # matmul space builds and checks 10^5 schedules (about a second) to keep 10^3.
        self._check_cap()
        return tuple(v for v in self.combinations() if self.violation(self.make(v)) is None)

    def default_values(self) -> dict[str, Any] | None:
        """The template's default schedule as canonical values, if it has one and it is valid here."""
        if self.default is None or not self.is_valid(self.default):
            return None
        return self.canonical(self.default)

    def restore(self, stored: Mapping[str, Any], nearest: bool = False) -> dict[str, Any] | None:
        """The point ``stored`` names after a trip through JSON (a tuple choice comes back as a list) as
        canonical values, or None when it is not a valid point of this space (another space's schedule).

        With ``nearest``, a number that is not a choice of an ordered parameter is replaced by the nearest
        choice (by ratio): a schedule tuned on another device, whose space offers other block sizes (the
        limits and caches shape a space), becomes the point of this space most like it. Labels must still
        match."""
        values: dict[str, Any] = {}
        for param in self.params:
            if param.name not in stored:
                continue
            wanted = stored[param.name]
            found = [c for c in param.choices if _same(c, wanted) or _same(_as_json(c), wanted)]
            if not found and nearest and param.kind is not Kind.CATEGORICAL:
                found = _nearest_number(param.choices, wanted)
            if not found:
                return None
            values[param.name] = found[0]
        if not self.is_valid(values):
            return None
        return self.canonical(values)

    def _check_cap(self) -> None:
        if not self.enumerable:
            raise SpaceTooLargeError(
                f"{self.template}: {self.size} combinations exceed the cap of {self.max_size}; sample it instead"
            )

    def enumerate(self) -> Enumeration[S]:
        self._check_cap()
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
        required = {p.name for p in self.active(values)}
        if not required <= set(values) <= expected:
            missing = sorted(required - set(values))
            extra = sorted(set(values) - expected)
            raise ValueError(f"{self.template}: schedule parameters missing {missing}, unexpected {extra}")
        for param in self.active(values):
            if not any(_same(c, values[param.name]) for c in param.choices):
                raise ValueError(
                    f"{self.template}: {param.name}={values[param.name]!r} is not one of {param.choices}"
                )
        schedule = self.make(self.canonical(values))
        reason = self.violation(schedule)
        if reason is not None:
            raise ValueError(f"{self.template}: schedule {values} violates {reason!r}")
        return schedule


def schedule_values(schedule: object) -> dict[str, Any]:
    """A schedule dataclass's fields as a plain dict, in declaration order (for tables and storage)."""
    if not is_dataclass(schedule) or isinstance(schedule, type):
        raise TypeError(f"a schedule is a dataclass instance, got {type(schedule).__name__}")
    return {f.name: getattr(schedule, f.name) for f in fields(schedule)}


def with_preferred_default(space: Space[S], preferred: Iterable[Mapping[str, Any]]) -> Space[S]:
    """``space`` whose default is the first of ``preferred`` (a template's usual schedules, best first:
    its big tiles before the small ones a small problem or a small device leaves) that is valid in it;
    ``space`` unchanged where none is (a level whose choices hold none of them)."""
    for values in preferred:
        if space.is_valid(values):
            return dataclasses.replace(space, default=dict(values))
    return space
