"""``hybrid``: model-based search over the valid points, alternated with a trust region around the best.

Why this shape: spaces of schedules are small and discrete, mostly invalid, and their latencies vary
smoothly along ordered parameters (tile sizes, stages) with sharp cliffs (occupancy, spills). A model
over the valid points (a Gaussian process on the parameters' positions, log latencies) finds the good
regions in few measurements; every few steps a local step chooses, by the same model, among the free
points within a Hamming radius of the best measured point, which finishes what the model only gets
close to (the radius widens when that neighbourhood is used up). While the best stalls, the model
turns additive (each parameter and each pair valued from every point that shares it), which finds a
good combination far from the points measured so far, and back. The model never scores an invalid
point (see ``search.strategies.pool``). Failed evaluations count as the worst value seen, so the model
steers away from where kernels fail; points pending with another worker (taken, not yet measured)
are never proposed and enter the model as a constant liar (the mean of what was measured), so
parallel workers spread out instead of crowding one spot.
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
from search.strategies.pool import Pool, features, neighbourhood, values_of

__all__ = ["Hybrid", "features"]


#: The models a step may use: the joint Matérn kernel, the additive one (``gp_model.kernel``), or the
#: joint one switching to the additive one and back every ``switch`` evaluations without a new best.
KERNELS = ("joint", "additive", "switch")

#: The fewest points of the initial design, however small the space.
MIN_INITIAL = 5

#: The most free points a model step scores. Scoring costs time and memory in proportion to the
#: candidates times the points measured (a 118,000-point space took 1.6 s a step and a 400,000-point one
#: several GiB); past the cap a step scores a seeded sample of the free points together with every free
#: point within two changes of the best measured one, so the model still sees the best's surroundings
#: whole. Every brute-forced space of the replays (at most 17,956 points) stays under it.
MAX_SCORED = 20_000


@dataclass(frozen=True)
class Hybrid:
    """Gaussian-process expected improvement over valid points, with a trust-region step every
    ``local_every`` proposals (0: never) once ``initial`` points (the default schedule among them)
    are measured. The trust region: free points within ``radius`` Hamming steps of the ``top`` best
    measured points; ``radius`` starts at 1 and, with ``stall`` > 0, grows by one for every ``stall``
    evaluations without a new best; it widens further, up to ``max_radius``, while the region is used
    up. The model's length scales and noise are fitted by a seeded random search (``fit="random"``)
    or by gradient ascent on the marginal likelihood (``"map"``); ordered axes lie by rank
    (``scale="rank"``) or by log size (``"log"``). ``thompson=N`` makes every N-th group of steps a
    Thompson draw instead of expected improvement; ``spread_centres`` takes trust regions around the
    best points of distinct regions in turn. ``kernel`` (``KERNELS``) picks the model: the joint
    Matérn kernel over all parameters, the additive kernel (single parameters and pairs, whatever the
    others; ``gp_model.kernel``) from the ``additive_after``-th evaluation on, or the joint kernel
    switching to the additive one and back every ``switch`` evaluations without a new best. With
    ``rivals`` > 0, from the ``rivals_from``-th evaluation on and once ``rivals`` evaluations pass
    without a new best, every ``rival_every``-th local step centres on a rival instead of the best: the
    best measured point of a partition the best is not in (another value of a switch, a parameter with
    two choices or unordered ones), each in turn. A partition's good region can be narrow (the fast
    kernels without shared memory need whole-warp blocks one row high): the model, which has seen
    mostly its slow points, would not go there, a local search from its best point does. For the first
    ``rivals_from`` evaluations every local step stays next to the best, so that a short tuning is
    spent where the model leads; a warm-started search (points given by the caller, ``History.given``:
    the best schedules of other devices) has them from its ``rivals_from_warm``-th on, since the given
    points bring the exploitation a short tuning needs, and a basin that was best elsewhere can be a
    trap here (A100's convolution, warm-started from five other GPUs: docs/search-strategies.md). The
    initial design comes on top of the given points. ``min_gain`` > 0 makes a new best that is faster
    by no more than that fraction count as no gain for the stall counts (the switch, the rivals, the
    radius), as ``warpmap tune --patience`` counts a 1% gain. On a small space the initial design is at most a
    tenth of its valid points (and at least ``MIN_INITIAL``): ten spread points are a quarter of a
    40-point space.

    The defaults are the configuration that measured best on the replayed files at 10 seeds
    (README, "Search strategies"): the others were measured and kept as options, not chosen."""

    name: str = "hybrid"
    initial: int = 10
    local_every: int = 3
    top: int = 1
    stall: int = 0
    max_radius: int = 2
    scale: str = "rank"
    thompson: int = 0
    fit: str = "random"
    spread_centres: bool = False
    kernel: str = "switch"
    additive_after: int = 0
    switch: int = 30
    rivals: int = 1
    rival_every: int = 2
    rivals_from: int = 100
    rivals_from_warm: int = 20
    min_gain: float = 0.0

    def __post_init__(self) -> None:
        for field, value, known in (("kernel", self.kernel, KERNELS), ("fit", self.fit, ("random", "map")),
                                    ("scale", self.scale, ("rank", "log"))):
            if value not in known:
                raise ValueError(f"unknown {field} {value!r}; known: {', '.join(known)}")
        for field, count in (("rivals", self.rivals), ("rivals_from", self.rivals_from),
                             ("rivals_from_warm", self.rivals_from_warm)):
            if count < 0:
                raise ValueError(f"{field} must be 0 or more, not {count}")
        if not 0.0 <= self.min_gain < 1.0:
            raise ValueError(f"min_gain must be a fraction in [0, 1), not {self.min_gain}")
        if self.rival_every < 2:
            raise ValueError(f"rival_every must be at least 2 (every other local step), not {self.rival_every}")
        if self.kernel == "switch" and self.switch < 1:
            raise ValueError(f"switch must be at least 1, not {self.switch}")

    def sampler(self, space: Space[Any], seed: int) -> optuna.samplers.BaseSampler:
        return optuna.samplers.RandomSampler(seed=seed)

    def propose(self, history: History) -> dict[str, Any] | None:
        pool = history.scratch.get("pool")
        if pool is None:
            pool = Pool.of(history.space, history.rng, self.scale)
            history.scratch["pool"] = pool
        records = history.records
        if records and not history.space.enumerable:
            pool.extend(neighbourhood(history.space, dict(records[-1].values), 1))
        free = pool.free(history.taken)
        if not free.size:
            raise SpaceExhausted
        initial = self.initial_points(pool) + sum(history.space.key(r.values) in history.given for r in records)
        if len(records) < initial or not any(r.value is not None for r in records):
            return pool.values[_spread(pool, free, records, history)]
        step = len(records) - initial
        is_local = bool(self.local_every) and step % self.local_every == self.local_every - 1
        model, best = _model(history, pool, self.fit, self.additive(records))
        if is_local:
            near = self._trust_region(history, pool, free)
            if near.size:
                free = near
        free = _scored(pool, free, history)
        if not is_local and self.thompson and step % (max(self.local_every, 1) * self.thompson) == 0:
            return pool.values[_thompson(model, pool, free, best, history)]
        mean, std = model.predict(pool.x[free])
        return pool.values[int(free[int(np.argmax(gp_model.expected_improvement(mean, std, best)))])]

    def additive(self, records: list[TrialRecord]) -> bool:
        """Whether this step's model is the additive kernel (see the class docstring)."""
        if self.kernel == "switch":
            return (_since_best(records, self.min_gain) // self.switch) % 2 == 1
        return self.kernel == "additive" and len(records) >= self.additive_after

    def initial_points(self, pool: Pool) -> int:
        """How many points the initial design takes before the model leads (see the class docstring)."""
        if not pool.space.enumerable:
            return self.initial
        return min(self.initial, max(MIN_INITIAL, len(pool.values) // 10))

    def radius(self, records: list[TrialRecord]) -> int:
        """The trust region's radius: 1, plus one per ``stall`` evaluations since the last new best."""
        return min(self.max_radius, 1 + _since_best(records, self.min_gain) // self.stall) if self.stall else 1

    def _trust_region(self, history: History, pool: Pool, free: np.ndarray) -> np.ndarray:
        """Free candidates within the radius of one centre (the radius grown further while that
        region is used up). With ``spread_centres`` the centres are the best points of distinct
        regions (each more than ``max_radius`` steps from every better centre), taken in turn, so a
        fair region away from the best is searched too; else the union around the ``top`` best."""
        ranked = sorted((r for r in history.records if r.value is not None), key=lambda r: r.value or 0.0)
        rows = [pool.add(dict(r.values)) for r in ranked[: max(self.top * 20, 60)]]
        if self.spread_centres:
            centres: list[int] = []
            for row in rows:
                if all(pool.hamming(np.array([row]), c)[0] > self.max_radius for c in centres):
                    centres.append(row)
                    if len(centres) == self.top:
                        break
            turn = _next_turn(history, "turn")
            # The best point's region every other local step, the other regions in turn between.
            others = centres[1:] or centres
            centres = [centres[0]] if turn % 2 == 0 else [others[(turn // 2) % len(others)]]
        else:
            centres = rows[: self.top]
        rivals_from = self.rivals_from_warm if history.given else self.rivals_from
        if (self.rivals and len(history.records) >= rivals_from
                and _since_best(history.records, self.min_gain) >= self.rivals):
            turn = _next_turn(history, "rival_turn")
            found = _rivals(history.space, ranked)
            every = self.rival_every
            if turn % every == every - 1 and found:
                centres = [pool.add(dict(found[(turn // every) % len(found)].values))]
        if not history.space.enumerable:
            for row in centres:
                pool.extend(neighbourhood(history.space, pool.values[row], 2))
            free = pool.free(history.taken)
        distance = np.min([pool.hamming(free, row) for row in centres], axis=0)
        for radius in range(self.radius(history.records), max(self.max_radius, 1) + 1):
            near = free[distance <= radius]
            if near.size:
                return near
        return np.array([], dtype=int)


def _scored(pool: Pool, free: np.ndarray, history: History) -> np.ndarray:
    """The free points a step scores: all of them up to ``MAX_SCORED``, else the free points within two
    changes of the best measured point and a seeded sample of the others, ``MAX_SCORED`` in all."""
    if free.size <= MAX_SCORED:
        return free
    measured = [r for r in history.records if r.value is not None]
    near = np.array([], dtype=int)
    if measured:
        best = min(measured, key=lambda r: r.value or 0.0)
        near = free[pool.hamming(free, pool.add(dict(best.values))) <= 2][:MAX_SCORED // 2]
    others = np.setdiff1d(free, near, assume_unique=True)
    picks = history.rng.sample(range(others.size), MAX_SCORED - near.size)
    return np.concatenate([near, others[np.sort(np.array(picks, dtype=int))]])


def _rivals(space: Space[Any], ranked: list[TrialRecord]) -> list[TrialRecord]:
    """The best measured point of each partition the best is not in: for every switch (a parameter
    with two choices, or unordered ones), the best point with each other value of it."""
    if not ranked:
        return []
    best = ranked[0].values
    found: list[TrialRecord] = []
    for param in space.params:
        if len(param.choices) < 2 or (len(param.choices) > 2 and param.kind is not Kind.CATEGORICAL):
            continue
        for choice in param.choices:
            if choice != best[param.name]:
                rival = next((r for r in ranked if r.values[param.name] == choice), None)
                if rival is not None and rival not in found:
                    found.append(rival)
    return found


def _next_turn(history: History, counter: str) -> int:
    """This search's next turn of ``counter``: 0 at the first call, then 1, 2, ..."""
    turn = int(history.scratch.get(counter, 0))
    history.scratch[counter] = turn + 1
    return turn


def _since_best(records: list[TrialRecord], min_gain: float = 0.0) -> int:
    """How many evaluations have passed since the last new best faster than the best before it by more
    than ``min_gain`` (a fraction; a smaller gain still moves the best, not the count)."""
    best, since = math.inf, 0
    for record in records:
        if record.value is not None and record.value < best * (1.0 - min_gain):
            since = 0
        else:
            since += 1
        if record.value is not None:
            best = min(best, record.value)
    return since


def _model(history: History, pool: Pool, how: str, additive: bool = False) -> tuple[gp_model.Fit, float]:
    """The model of log latencies (failures at the worst seen; pending points at the mean) and the
    best standardised value."""
    records = history.records
    logs = [math.log(r.value) if r.value is not None and r.value > 0 else None for r in records]
    seen = [v for v in logs if v is not None]
    worst = max(seen)
    y = np.array([worst if v is None else v for v in logs])
    mu, sd = float(y.mean()), float(y.std()) or 1.0
    y = (y - mu) / sd
    rows: list[int] = history.scratch.setdefault("rows", [])
    rows.extend(pool.add(dict(r.values)) for r in records[len(rows):])
    measured = {history.space.key(r.values) for r in records}
    pending = [pool.add(values_of(history.space, key)) for key in sorted(history.taken - measured)
               if key in pool.keys or history.space.is_valid(values_of(history.space, key))]
    x = pool.x[rows + pending]
    y = np.concatenate([y, np.zeros(len(pending))])
    # A wide hyperparameter search now and then, a narrow one around the last choice otherwise.
    if how == "map":
        # The hyperparameters move little from one point more: fitted anew every fifth proposal.
        previous = history.scratch.get("fit")
        model = gp_model.fit_map(x, y, history.rng, previous, refit=previous is None or len(records) % 5 == 0)
        history.scratch["fit"] = model
        return model, float(y[: len(records)].min())
    # Each kernel keeps its own last choice: the additive one's length scales differ from the joint's.
    key = "additive" if additive else "joint"
    previous = history.scratch.get(key)
    tries = 24 if len(records) % 10 == 0 or previous is None else 8
    model = gp_model.fit(x, y, history.rng, previous.log_lengthscales if previous else None, tries=tries,
                         groups=pool.groups if additive else None,
                         previous_weights=previous.weights if previous else None)
    history.scratch[key] = model
    return model, float(y[: len(records)].min())


#: Candidates a Thompson draw is made over: the best by expected improvement and as many at random.
THOMPSON_CANDIDATES = 256


def _thompson(model: gp_model.Fit, pool: Pool, free: np.ndarray, best: float, history: History) -> int:
    """The free point lowest in one joint posterior draw over the most promising and some random ones."""
    mean, std = model.predict(pool.x[free])
    ei = gp_model.expected_improvement(mean, std, best)
    order = np.argsort(-ei)[:THOMPSON_CANDIDATES]
    others = [history.rng.randrange(free.size) for _ in range(min(THOMPSON_CANDIDATES, free.size))]
    chosen = np.unique(np.concatenate([order, np.array(others, dtype=int)]))
    draw = model.sample(pool.x[free[chosen]], history.rng)
    return int(free[chosen[int(np.argmin(draw))]])


def _spread(pool: Pool, free: np.ndarray, records: list[TrialRecord], history: History) -> int:
    """A free point far from the measured ones: the farthest of a few random free points."""
    picks = [int(free[history.rng.randrange(free.size)]) for _ in range(min(32, free.size))]
    if not records:
        return picks[0]
    measured = pool.x[[pool.add(dict(r.values)) for r in records]]
    distances = gp_model._sqdist(pool.x[picks], measured).min(axis=1)
    return picks[int(np.argmax(distances))]
