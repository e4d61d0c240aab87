"""The candidate points of a model-based search: valid points only, their features, their distances.

A model never scores an invalid point, so the candidates are the space's valid points: all of them
when the space is enumerable, else a large seeded sample that grows with the neighbours of the points
measured. Each candidate keeps its choice indices (for Hamming distances, the trust region of the
local steps) and its feature row (the model's coordinates).
"""

from __future__ import annotations

import math
import random
from typing import Any

import numpy as np

from compiler.space import Kind, Param, Space

#: Valid points sampled as candidates when a space is too large to enumerate.
POOL_SAMPLE = 4096
#: Random draws per point of ``POOL_SAMPLE`` the sampling may spend before it settles for fewer. A space
#: whose valid points are few and scattered needs many: at a tenth of this, a synthetic space of
#: 2,359,296 combinations with 4,734 valid ones scattered at random yielded 410 candidates and the search
#: ended at 0.59-0.80 of the optimum; at this, 1.000 (``bench/large_space.py --sizes ... --keep 0.002``).
#: The sampling stops as soon as it has ``POOL_SAMPLE`` points, so only such sparse spaces pay for it.
DRAWS_PER_POINT = 500


def _alignment(value: int) -> int:
    """The exponent of the largest power of two dividing ``value`` (0 for odd values and zero)."""
    return (value & -value).bit_length() - 1 if value > 0 else 0


def _aligned_axis(choices: tuple[Any, ...]) -> int:
    """The largest alignment among integer choices, if alignment varies along the axis otherwise than
    the rank does (multiples of 16 up to 256 do; powers of two do not); 0 when it tells nothing new."""
    if not all(isinstance(c, int) and not isinstance(c, bool) for c in choices):
        return 0
    exponents = [_alignment(c) for c in choices]
    if len(set(exponents)) < 2 or exponents == sorted(exponents):
        return 0
    return max(exponents)


def _log_axis(param: Param) -> tuple[float, float] | None:
    """(log of the smallest, log span) for an ordered axis of positive numbers, else None."""
    choices = param.choices
    if param.kind is Kind.CATEGORICAL or not all(isinstance(c, int | float) and not isinstance(c, bool)
                                                 for c in choices):
        return None
    low, high = min(choices), max(choices)
    if low <= 0 or high <= low:
        return None
    return math.log(low), math.log(high) - math.log(low)


def features(space: Space[Any], values: dict[str, Any], scale: str = "rank") -> list[float]:
    """A point's coordinates for the model, each axis in [0, 1]; constants dropped.

    Ordered parameters lie by rank (``scale="rank"``) or, numeric ones, by the log of their value
    (``"log"``: sizes act by ratios, so 16 and 32 lie as far apart as 128 and 256; measured worse on
    the replayed spaces at 50 and 100 evaluations, README). Categorical parameters
    are one-hot, scaled so that changing one is as far as the ends of an ordered axis. An ordinal
    integer parameter whose choices are not all powers of two also gets its alignment (the power of
    two it is a multiple of): whole warps, coalesced rows and vector widths make 128 and 144 differ by
    more than their sizes say, and the model may learn it when it matters.
    """
    return [f for param in space.params for f in _param_features(param, values[param.name], scale)]


def _param_features(param: Param, value: Any, scale: str) -> list[float]:
    """One parameter's columns of ``features`` (none for a constant; as many for every value)."""
    if len(param.choices) == 1:
        return []
    index = param.index(value)
    if param.kind is Kind.CATEGORICAL and len(param.choices) > 2:
        return [math.sqrt(0.5) if j == index else 0.0 for j in range(len(param.choices))]
    axis = _log_axis(param) if scale == "log" else None
    out = [(math.log(value) - axis[0]) / axis[1] if axis else param.position(value)]
    top = _aligned_axis(param.choices) if param.kind is Kind.ORDINAL else 0
    if top:
        out.append(_alignment(value) / top)
    return out


def feature_groups(space: Space[Any], scale: str = "rank") -> np.ndarray:
    """For each column of ``features``, the index of the parameter it describes among those that vary
    (an additive model's groups: a one-hot label or a size with its alignment is one parameter)."""
    varying = [p for p in space.params if len(p.choices) > 1]
    return np.array([g for g, p in enumerate(varying) for _ in _param_features(p, p.choices[0], scale)], dtype=int)


def values_of(space: Space[Any], key: tuple[int, ...]) -> dict[str, Any]:
    """The parameter values a point key (``Space.key``) stands for."""
    return {p.name: p.choices[i] for p, i in zip(space.params, key, strict=True)}


class Pool:
    """The candidate points of one search, their features and choice indices, indexed by point key;
    ``groups`` names the parameter of each feature column (``feature_groups``)."""

    def __init__(self, space: Space[Any], values: list[dict[str, Any]], scale: str = "rank") -> None:
        self.space = space
        self.scale = scale
        self.values: list[dict[str, Any]] = []
        self.rows: list[list[float]] = []
        self.keys: dict[tuple[int, ...], int] = {}
        self._x: np.ndarray | None = None
        self._k: np.ndarray | None = None
        self.groups = feature_groups(space, scale)
        # A point's features are its parameters' columns side by side, and each column depends on one
        # value only: computed once per choice here, a point's row is a concatenation (a 400,000-point
        # space is pooled in seconds).
        self._columns = [[_param_features(p, c, scale) for c in p.choices] for p in space.params]
        for v in values:
            self.add(v)

    @classmethod
    def of(cls, space: Space[Any], rng: random.Random, scale: str = "rank") -> Pool:
        """Every valid point of an enumerable space, else a seeded sample of ``POOL_SAMPLE`` of them (fewer
        when ``DRAWS_PER_POINT`` draws for each do not find that many)."""
        if space.enumerable:
            return cls(space, space.valid_values(), scale)
        sample: list[dict[str, Any]] = []
        seen: set[tuple[int, ...]] = set()
        for _ in range(POOL_SAMPLE * DRAWS_PER_POINT):
            values = space.random_values(rng)
            key = space.key(values)
            if key not in seen and space.is_valid(values):
                seen.add(key)
                sample.append(space.canonical(values))
                if len(sample) == POOL_SAMPLE:
                    break
        return cls(space, sample, scale)

    def add(self, values: dict[str, Any]) -> int:
        """The row of ``values``, added if new (the caller has checked that it is valid)."""
        key = self.space.key(values)
        if key not in self.keys:
            self.keys[key] = len(self.values)
            self.values.append(self.space.canonical(values))
            self.rows.append([f for columns, i in zip(self._columns, key, strict=True) for f in columns[i]])
            self._x = self._k = None
        return self.keys[key]

    def extend(self, points: list[dict[str, Any]]) -> None:
        """Add the valid points among ``points`` (neighbours of measured points, unchecked)."""
        for values in points:
            if self.space.key(values) not in self.keys and self.space.is_valid(values):
                self.add(values)

    @property
    def x(self) -> np.ndarray:
        """The feature rows, one per candidate."""
        if self._x is None:
            self._x = np.array(self.rows, dtype=float).reshape(len(self.rows), -1)
        return self._x

    @property
    def k(self) -> np.ndarray:
        """The choice indices, one row per candidate (for Hamming distances)."""
        if self._k is None:
            self._k = np.array(list(self.keys), dtype=np.int32).reshape(len(self.keys), -1)
        return self._k

    def free(self, taken: set[tuple[int, ...]]) -> np.ndarray:
        """The rows of the candidates not taken (measured, or pending with another worker)."""
        return np.array([i for key, i in self.keys.items() if key not in taken], dtype=int)

    def hamming(self, rows: np.ndarray, centre: int) -> np.ndarray:
        """How many parameters of each of ``rows`` differ from those of row ``centre``."""
        k = self.k
        return (k[rows] != k[centre]).sum(axis=1)


def neighbourhood(space: Space[Any], values: dict[str, Any], steps: int) -> list[dict[str, Any]]:
    """Points up to ``steps`` Hamming steps from ``values`` (unchecked; for spaces not enumerated)."""
    frontier = [dict(values)]
    found: list[dict[str, Any]] = []
    for _ in range(steps):
        frontier = [n for v in frontier for n in space.neighbours(v, hamming=True)]
        found.extend(frontier)
    return found
