"""``hybrid``: model-based search over the valid points, alternated with local search around the best.

Why this shape: spaces of schedules are small and discrete, mostly invalid, and their latencies vary
smoothly along ordered parameters (tile sizes, stages) with sharp cliffs (occupancy, spills). A model
over the valid points (a Gaussian process on the parameters' positions, log latencies) finds the good
regions in few measurements; a step of local search over ordinal neighbours of the best points, every
few steps, finishes what the model only gets close to. The model never scores an invalid point: the
candidates are the space's valid points (all of them when the space is enumerable, a large seeded
sample plus the best points' neighbours when it is not). Failed evaluations count as the worst value
seen, so the model steers away from where kernels fail.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import optuna

from compiler.space import Kind, Space
from search.strategies import gp_model
from search.strategies.base import History, TrialRecord
from search.strategies.driver import SpaceExhausted

#: Valid points sampled as candidates when a space is too large to enumerate.
POOL_SAMPLE = 4096


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


def features(space: Space[Any], values: dict[str, Any]) -> list[float]:
    """A point's coordinates for the model: ordered parameters by rank in [0, 1], categorical ones
    one-hot (scaled so that changing one is as far as the ends of an ordered axis); constants dropped.

    An ordinal integer parameter whose choices are not all powers of two also gets its alignment
    (the power of two it is a multiple of): on a GPU a block of 128 threads and one of 144 differ by
    more than their ranks say (whole warps, coalesced rows, bank conflicts), on a cpu a tile that is
    a multiple of the vector width likewise, so the model may learn it when it matters.
    """
    out: list[float] = []
    for param in space.params:
        if len(param.choices) == 1:
            continue
        value = values[param.name]
        index = param.index(value)
        if param.kind is Kind.CATEGORICAL and len(param.choices) > 2:
            out.extend(math.sqrt(0.5) if j == index else 0.0 for j in range(len(param.choices)))
            continue
        out.append(param.position(value))
        top = _aligned_axis(param.choices) if param.kind is Kind.ORDINAL else 0
        if top:
            out.append(_alignment(value) / top)
    return out


@dataclass(frozen=True)
class Hybrid:
    """Gaussian-process expected improvement over valid points, with a local step every ``local_every``
    proposals (0: never) once ``initial`` points (the default schedule among them) are measured."""

    name: str = "hybrid"
    initial: int = 10
    local_every: int = 3
    hamming: bool = True
    radius: int = 1

    def sampler(self, space: Space[Any], seed: int) -> optuna.samplers.BaseSampler:
        return optuna.samplers.RandomSampler(seed=seed)

    def propose(self, history: History) -> dict[str, Any] | None:
        pool = history.scratch.get("pool")
        if pool is None:
            pool = _Pool.of(history)
            history.scratch["pool"] = pool
        records = history.records
        pool.extend(history, _neighbourhood(history, records[-1:], steps=1) if records else [])
        free = pool.free(history.taken)
        if not free.size:
            raise SpaceExhausted
        if len(records) < self.initial or not any(r.value is not None for r in records):
            return pool.values[_spread(pool, free, records, history)]
        model, best = self._model(history, pool)
        step = len(records) - self.initial
        if self.local_every and step % self.local_every == self.local_every - 1:
            local = _local_candidates(history, pool, self.hamming, self.radius)
            if local.size:
                free = local
        mean, std = model.predict(pool.x[free])
        return pool.values[int(free[int(np.argmax(gp_model.expected_improvement(mean, std, best)))])]

    def _model(self, history: History, pool: _Pool) -> tuple[gp_model.Fit, float]:
        records = history.records
        logs = [math.log(r.value) if r.value is not None and r.value > 0 else None for r in records]
        seen = [v for v in logs if v is not None]
        worst = max(seen)
        y = np.array([worst if v is None else v for v in logs])
        mu, sd = float(y.mean()), float(y.std()) or 1.0
        y = (y - mu) / sd
        rows: list[int] = history.scratch.setdefault("rows", [])
        rows.extend(pool.index_of(history, r.values) for r in records[len(rows):])
        x = pool.x[rows]
        # A wide hyperparameter search now and then, a narrow one around the last choice otherwise.
        tries = 24 if len(records) % 10 == 0 or "log_ls" not in history.scratch else 8
        model = gp_model.fit(x, y, history.rng, history.scratch.get("log_ls"), tries=tries)
        history.scratch["log_ls"] = np.log(model.lengthscales)
        return model, float(y.min())


class _Pool:
    """The candidate points of one search, their features, and an index by point key."""

    def __init__(self, space: Space[Any], values: list[dict[str, Any]]) -> None:
        self.space = space
        self.values: list[dict[str, Any]] = []
        self.rows: list[list[float]] = []
        self.keys: dict[tuple[int, ...], int] = {}
        self._x: np.ndarray | None = None
        for v in values:
            self.add(v)

    @classmethod
    def of(cls, history: History) -> _Pool:
        space = history.space
        if space.enumerable:
            return cls(space, space.valid_values())
        sample: list[dict[str, Any]] = []
        seen: set[tuple[int, ...]] = set()
        for _ in range(POOL_SAMPLE * 50):
            values = space.random_values(history.rng)
            key = space.key(values)
            if key not in seen and space.is_valid(values):
                seen.add(key)
                sample.append(space.canonical(values))
                if len(sample) == POOL_SAMPLE:
                    break
        return cls(space, sample)

    def add(self, values: dict[str, Any]) -> int:
        key = self.space.key(values)
        if key not in self.keys:
            self.keys[key] = len(self.values)
            self.values.append(self.space.canonical(values))
            self.rows.append(features(self.space, self.values[-1]))
            self._x = None
        return self.keys[key]

    def extend(self, history: History, points: list[dict[str, Any]]) -> None:
        for values in points:
            if self.space.key(values) not in self.keys and self.space.is_valid(values):
                self.add(values)

    def index_of(self, history: History, values: Any) -> int:
        return self.add(dict(values))

    @property
    def x(self) -> np.ndarray:
        if self._x is None:
            self._x = np.array(self.rows, dtype=float).reshape(len(self.rows), -1)
        return self._x

    def free(self, taken: set[tuple[int, ...]]) -> np.ndarray:
        return np.array([i for key, i in self.keys.items() if key not in taken], dtype=int)


def _spread(pool: _Pool, free: np.ndarray, records: list[TrialRecord], history: History) -> int:
    """A free point far from the measured ones: the farthest of a few random free points."""
    picks = [int(free[history.rng.randrange(free.size)]) for _ in range(min(32, free.size))]
    if not records:
        return picks[0]
    measured = pool.x[[pool.index_of(history, r.values) for r in records]]
    distances = gp_model._sqdist(pool.x[picks], measured).min(axis=1)
    return picks[int(np.argmax(distances))]


def _neighbourhood(history: History, records: list[TrialRecord], steps: int, hamming: bool = False
                   ) -> list[dict[str, Any]]:
    space = history.space
    frontier = [dict(r.values) for r in records]
    found: list[dict[str, Any]] = []
    for _ in range(steps):
        frontier = [n for v in frontier for n in space.neighbours(v, hamming=hamming)]
        found.extend(frontier)
    return found


def _local_candidates(history: History, pool: _Pool, hamming: bool, radius: int) -> np.ndarray:
    """Free valid points within ``radius`` steps (else one more) of the best measured point that
    still has any."""
    ranked = sorted((r for r in history.records if r.value is not None), key=lambda r: r.value or 0.0)
    for record in ranked[:5]:
        for steps in (radius, radius + 1):
            near = _neighbourhood(history, [record], steps, hamming)
            pool.extend(history, near)
            found = {pool.keys[k] for k in (history.space.key(v) for v in near)
                     if k in pool.keys and k not in history.taken}
            if found:
                return np.array(sorted(found), dtype=int)
    return np.array([], dtype=int)
