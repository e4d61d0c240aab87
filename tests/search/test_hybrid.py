"""The ``hybrid`` proposer: valid untaken points only, pending points respected, isolated optima found,
the same trials for the same seed, on enumerable spaces and on sampled ones."""

from __future__ import annotations

import itertools
import math
import random

import numpy as np
import optuna
import pytest

from compiler.space import Constraint, Param, Space
from search.strategies import Budget, History, Outcome, SpaceExhausted, TrialRecord, hybrid, search
from search.strategies.hybrid import Hybrid, _rivals, _scored
from search.strategies.pool import Pool, features, values_of
from search.trial import TrialStatus

optuna.logging.set_verbosity(optuna.logging.WARNING)

BX = (16, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240, 256)


def grid(max_size: int = 2_000_000) -> Space[tuple]:
    """A block-and-tile space like a GPU kernel's (15360 combinations, 9720 valid)."""
    return Space(
        template="grid",
        params=(Param("bx", BX), Param("by", (1, 2, 4, 8, 16)), Param("tx", (1, 2, 3, 4)),
                Param("ty", (1, 2, 3, 4)), Param("shared", (False, True)), Param("order", ("ij", "ji", "ik")),
                Param("pad", (0, 1))),
        make=lambda v: (v["bx"], v["by"], v["tx"], v["ty"], v["shared"], v["order"], v["pad"]),
        constraints=(Constraint("at most 1024 threads", lambda p: p[0] * p[1] <= 1024),
                     Constraint("tiles fit", lambda p: p[0] * p[1] * p[2] * p[3] <= 4096)),
        max_size=max_size,
    )


#: The planted optimum: far from the smooth best (four changes), on a narrow spike of its own.
PLANTED = {"bx": 48, "by": 8, "tx": 1, "ty": 3, "shared": True, "order": "ji", "pad": 1}
SMOOTH_BEST = {"bx": 128, "by": 2, "tx": 1, "ty": 3, "shared": True, "order": "ij", "pad": 0}


def landscape(values: dict) -> float:
    """A smooth bowl in log sizes around SMOOTH_BEST (1.0 there), labels as steps; and a spike at
    PLANTED (0.8) whose slopes fall away fast: its neighbours are fair (1.02, a little worse than the
    bowl's best), two steps off ordinary, so no model of the bowl predicts it and only a search that
    also looks around good points that are not the best finds it."""
    changed = sum(values[k] != PLANTED[k] for k in PLANTED)
    threads = math.log2(values["bx"] * values["by"]) - 8
    shape = math.log2(values["bx"] / values["by"]) - 6
    bowl = (1.0 + 0.08 * threads**2 + 0.03 * shape**2 + 0.05 * (values["tx"] - 1) ** 2
            + 0.04 * (values["ty"] - 3) ** 2 + (0.0 if values["shared"] else 0.3)
            + {"ij": 0.0, "ji": 0.15, "ik": 0.3}[values["order"]] + 0.05 * values["pad"])
    return min(bowl, 0.8 + 0.22 * changed)


class Recording:
    """An objective that refuses invalid and repeated points and remembers the order it measured."""

    def __init__(self, space: Space) -> None:
        self.space, self.seen = space, []

    def __call__(self, values: dict) -> Outcome:
        key = self.space.key(values)
        assert self.space.is_valid(values) and key not in self.seen, values
        self.seen.append(key)
        return Outcome.ok(landscape(dict(values)))


def test_the_planted_optimum_is_isolated_and_beats_the_smooth_best():
    space = grid()
    valid = space.valid_values()
    assert len(valid) == 9720 and space.size == 15360
    assert min(valid, key=landscape) == PLANTED and landscape(SMOOTH_BEST) == 1.0
    near = [n for n in space.neighbours(PLANTED, hamming=True) if space.is_valid(n)]
    assert near and min(landscape(n) for n in near) > 1.0  # fair points around it, none better than the bowl
    ranked = sorted(landscape(v) for v in valid)
    assert ranked[1] == 1.0 and ranked[len(ranked) // 10] > 1.3  # fair is within the best tenth
    assert sum(PLANTED[k] != SMOOTH_BEST[k] for k in PLANTED) == 4


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_finds_a_planted_isolated_optimum_within_250_of_its_9720_points(seed):
    space = grid()
    objective = Recording(space)
    result = search(space, objective, Hybrid(), Budget(trials=250), seed=seed)
    assert result.best is not None and dict(result.best.values) == PLANTED
    assert len(objective.seen) == len(set(objective.seen)) == len(result.trials) <= 250


def _history(space: Space, seed: int) -> History:
    return History(space, [], set(), random.Random(seed))


def _measure(history: History, values: dict) -> None:
    history.records.append(TrialRecord(len(history.records), values, Outcome.ok(landscape(values))))
    history.taken.add(history.space.key(values))


#: The measured alternatives (README): every option's code path proposes only valid untaken points.
OPTIONS = {"fit": "map", "stall": 5, "top": 3, "max_radius": 3, "thompson": 1, "spread_centres": True,
           "scale": "log"}
#: Rival centres from the first stall on, so that most local steps of 40 proposals take them.
RIVALS = {"rivals": 1, "rivals_from": 0}
#: The additive kernel from the 10th point, so that 40 proposals use it; switching every 3 stalls.
ADDITIVE = {"kernel": "additive", "additive_after": 10}
SWITCH = {"kernel": "switch", "switch": 3}


@pytest.mark.parametrize("options", [{}, OPTIONS, ADDITIVE, SWITCH, RIVALS],
                         ids=["default", "options", "additive", "switch", "rivals"])
@pytest.mark.parametrize("max_size", [2_000_000, 1000])  # enumerated, and sampled (over the cap)
def test_never_proposes_an_invalid_or_taken_point_and_tolerates_pending_ones(max_size, options):
    space = grid(max_size)
    assert space.enumerable == (max_size > 15360)
    history = _history(space, 3)
    rng = random.Random(7)
    valid = grid().valid_values()
    pending = {space.key(v) for v in rng.sample(valid, 40)}  # being measured by other workers
    history.taken |= pending
    hybrid = Hybrid(initial=5, **options)
    for i in range(40):
        proposal = hybrid.propose(history)
        assert proposal is not None and space.is_valid(proposal)
        key = space.key(proposal)
        assert key not in history.taken
        if i % 4 == 3:
            history.taken.add(key)  # handed to a worker, not measured yet
        else:
            _measure(history, proposal)
    assert pending <= history.taken and len(history.records) == 30


def test_a_large_space_scores_a_capped_sample_that_keeps_the_best_surroundings(monkeypatch) -> None:
    """Past ``MAX_SCORED`` free points a step scores that many: every free point within two changes of
    the best, the rest a seeded sample; below the cap, every free point."""
    space = grid()
    pool = Pool.of(space, random.Random(0))
    history = _history(space, 1)
    for values in (SMOOTH_BEST, {**SMOOTH_BEST, "bx": 64}, PLANTED):
        _measure(history, values)
    free = pool.free(history.taken)
    assert (_scored(pool, free, history) == free).all()
    monkeypatch.setattr(hybrid, "MAX_SCORED", 1000)
    scored = _scored(pool, free, history)
    near = free[pool.hamming(free, pool.add(PLANTED)) <= 2]  # the best of the three (0.8)
    assert scored.size == 1000 == np.unique(scored).size and set(scored) <= set(free.tolist())
    assert 0 < near.size < 500 and set(near.tolist()) <= set(scored.tolist())
    again = _scored(pool, free, _history(space, 1))  # a history without records: a sample alone
    assert again.size == 1000 and not np.array_equal(again, scored)
    # A whole search with the cap in force: valid, untaken points, the same for the same seed.
    runs = [[dict(t.values) for t in search(space, Recording(space), Hybrid(), Budget(trials=25), seed=4).trials]
            for _ in range(2)]
    assert runs[0] == runs[1] and len({space.key(v) for v in runs[0]}) == 25


def test_a_sampled_space_with_few_scattered_valid_points_is_pooled_nearly_whole(monkeypatch) -> None:
    """Past the enumeration cap, sampling draws until it has ``POOL_SAMPLE`` points or has spent
    ``DRAWS_PER_POINT`` draws per point of it: 60 valid points scattered among 10,000 combinations,
    sampled for 64, are nearly all found (with a tenth of the draws, 18 were)."""
    from search.strategies import pool as pool_module

    monkeypatch.setattr(pool_module, "POOL_SAMPLE", 64)
    digits = tuple(range(10))
    scattered = set(random.Random(3).sample(list(itertools.product(digits, repeat=4)), 60))
    space = Space(template="scattered", params=tuple(Param(name, digits) for name in "abcd"),
                  make=lambda v: (v["a"], v["b"], v["c"], v["d"]),
                  constraints=(Constraint("one of 60", lambda point: point in scattered),), max_size=1000)
    assert not space.enumerable
    pool = Pool.of(space, random.Random(0))
    assert 55 <= len(pool.values) <= 60 and all(space.is_valid(v) for v in pool.values)


def test_pool_rows_are_the_features_of_their_points() -> None:
    space = grid()
    for scale in ("rank", "log"):
        pool = Pool.of(space, random.Random(0), scale)
        for row in range(0, len(pool.values), 97):
            assert pool.rows[row] == pytest.approx(features(space, pool.values[row], scale))


def test_pending_points_near_the_best_are_not_proposed_and_the_model_spreads_around_them():
    space = grid()
    history = _history(space, 0)
    for values in [*grid().valid_values()[:: 400], SMOOTH_BEST]:  # the best last: the radius is 1
        _measure(history, values)
    neighbours = [n for n in space.neighbours(SMOOTH_BEST, hamming=True) if space.is_valid(n)]
    history.taken |= {space.key(n) for n in neighbours[:-1]}  # all but one neighbour pending elsewhere
    hybrid = Hybrid(initial=1, local_every=1, top=1)  # every step local, around the best alone
    proposal = hybrid.propose(history)
    assert proposal is not None and space.key(proposal) not in history.taken
    assert proposal == neighbours[-1]  # the only free point at distance 1


def test_a_space_used_up_raises_space_exhausted_and_failures_are_tolerated():
    space = Space(template="tiny", params=(Param("a", (1, 2, 4)), Param("b", (1, 2))), make=lambda v: v)
    history = _history(space, 0)
    hybrid = Hybrid(initial=2)
    for i in range(6):
        proposal = hybrid.propose(history)
        assert proposal is not None and space.key(proposal) not in history.taken
        outcome = Outcome.failed(TrialStatus.COMPILE_ERROR) if i % 2 else Outcome.ok(1.0 + proposal["a"])
        history.records.append(TrialRecord(i, proposal, outcome))
        history.taken.add(space.key(proposal))
    with pytest.raises(SpaceExhausted):
        hybrid.propose(history)


def test_the_same_seed_makes_the_same_trials_and_another_seed_others():
    space = grid()
    runs = [[dict(t.values) for t in search(space, Recording(space), Hybrid(), Budget(trials=30), seed=s).trials]
            for s in (5, 5, 6)]
    assert runs[0] == runs[1] and runs[0] != runs[2]


def test_features_place_sizes_by_rank_or_log_and_labels_one_hot():
    space = grid()
    low = features(space, {**SMOOTH_BEST, "bx": 16, "order": "ij"}, scale="log")
    mid = features(space, {**SMOOTH_BEST, "bx": 64, "order": "ji"}, scale="log")
    high = features(space, {**SMOOTH_BEST, "bx": 256, "order": "ik"}, scale="log")
    assert [low[0], mid[0], high[0]] == pytest.approx([0.0, 0.5, 1.0])  # 16, 64, 256: equal ratios
    rank = features(space, {**SMOOTH_BEST, "bx": 64})
    assert rank[0] == pytest.approx(3 / 15)  # by rank, the strategy's default
    one_hot = [round(v, 3) for v in high[-4:-1]]
    assert one_hot == [0.0, 0.0, 0.707]
    pool = Pool(space, [SMOOTH_BEST, PLANTED])
    # bx, tx and ty with their alignments, by, shared, the one-hot order, pad: the additive kernel's groups
    assert pool.groups.tolist() == [0, 0, 1, 2, 2, 3, 3, 4, 5, 5, 5, 6] and pool.x.shape[1] == 12
    assert pool.hamming(pool.free(set()), 0).tolist() == [0, 4]
    assert values_of(space, space.key(PLANTED)) == PLANTED


def test_the_switching_kernel_turns_additive_while_the_best_stalls_and_back():
    def records(values: list[float]) -> list[TrialRecord]:
        return [TrialRecord(i, {}, Outcome.ok(v)) for i, v in enumerate(values)]

    switching = Hybrid(kernel="switch", switch=3)
    improving = [5.0, 4.0, 3.0, 2.0, 1.0]
    assert not switching.additive(records(improving))
    assert not switching.additive(records([*improving, 2.0, 2.0]))  # two without a new best
    assert switching.additive(records([*improving, 2.0, 2.0, 2.0]))  # three
    assert switching.additive(records([*improving, *[2.0] * 5]))
    assert not switching.additive(records([*improving, *[2.0] * 6]))  # six: back to the joint kernel
    assert not switching.additive(records([*improving, *[2.0] * 4, 0.5]))  # a new best resets the count
    assert Hybrid(kernel="additive", additive_after=6).additive(records([*improving, 1.0]))
    assert not Hybrid(kernel="additive", additive_after=6).additive(records(improving))
    assert not Hybrid().additive(records([*improving, *[2.0] * 20]))


def test_with_min_gain_small_new_bests_do_not_reset_the_stall_count():
    def records(values: list[float]) -> list[TrialRecord]:
        return [TrialRecord(i, {}, Outcome.ok(v)) for i, v in enumerate(values)]

    creeping = [1.0, 2.0, 0.999, 2.0, 0.998]  # two new bests, each 0.1% faster
    assert Hybrid(kernel="switch", switch=4).additive(records(creeping)) is False  # each resets the count
    assert Hybrid(kernel="switch", switch=4, min_gain=0.01).additive(records(creeping))  # none counts
    assert not Hybrid(kernel="switch", switch=4, min_gain=0.01).additive(records([*creeping, 0.9]))  # 10% does


def test_rivals_are_the_best_points_of_the_partitions_the_best_is_not_in() -> None:
    """Switches are the two-choice and unordered parameters; the sizes are not, however few."""
    space = grid()
    base = dict(SMOOTH_BEST)
    points = [base, {**base, "bx": 64}, {**base, "pad": 1, "by": 4}, {**base, "pad": 1}, {**base, "shared": False},
              {**base, "order": "ik"}, {**base, "order": "ik", "tx": 2}]
    records = [TrialRecord(i, v, Outcome.ok(landscape(v))) for i, v in enumerate(points)]
    ranked = sorted(records, key=lambda r: r.value)
    rivals = _rivals(space, ranked)
    by_value = {(k, r.values[k]) for r in rivals for k in ("shared", "order", "pad") if r.values[k] != base[k]}
    assert by_value == {("shared", False), ("order", "ik"), ("pad", 1)}
    assert all(r == min((q for q in records if q.values[k] == v), key=lambda q: q.value)
               for r in rivals for k, v in by_value if r.values[k] == v)
    assert {"bx": 64} not in [{k: r.values[k]} for r in rivals for k in ("bx",)] and len(rivals) == 3
    assert _rivals(space, []) == []


def test_rival_local_steps_leave_the_best_while_it_stalls() -> None:
    """Once the best stalls, every other local step searches next to the rival, not next to the best."""
    space = grid()
    rival = {**SMOOTH_BEST, "shared": False, "bx": 32}
    pool = Pool.of(space, random.Random(0))
    rows = {"best": pool.add(SMOOTH_BEST), "rival": pool.add(rival)}
    regions = []
    for rivals in (1, 0):
        history = _history(space, 5)
        for values in (SMOOTH_BEST, rival, {**SMOOTH_BEST, "tx": 4}, {**SMOOTH_BEST, "ty": 1}):
            _measure(history, values)
        hybrid = Hybrid(rivals=rivals, rivals_from=0)
        regions.append([hybrid._trust_region(history, pool, pool.free(history.taken)) for _ in range(4)])
    with_rivals, without = regions
    for turn, near in enumerate(with_rivals):
        centre = rows["rival" if turn % 2 else "best"]
        assert near.size and (pool.hamming(near, centre) <= 1).all()
    assert all((pool.hamming(near, rows["best"]) <= 1).all() for near in without)


def test_rival_local_steps_wait_for_rivals_from_evaluations() -> None:
    """Before ``rivals_from`` evaluations every local step stays next to the best, stall or not."""
    space = grid()
    rival = {**SMOOTH_BEST, "shared": False, "bx": 32}
    pool = Pool.of(space, random.Random(0))
    best, other = pool.add(SMOOTH_BEST), pool.add(rival)
    history = _history(space, 5)
    for values in (SMOOTH_BEST, rival, {**SMOOTH_BEST, "tx": 4}, {**SMOOTH_BEST, "ty": 1}):
        _measure(history, values)
    hybrid = Hybrid(rivals=1, rivals_from=6)
    early = [hybrid._trust_region(history, pool, pool.free(history.taken)) for _ in range(4)]
    assert all(near.size and (pool.hamming(near, best) <= 1).all() for near in early)
    for values in ({**SMOOTH_BEST, "pad": 1}, {**SMOOTH_BEST, "order": "ik"}):
        _measure(history, values)
    late = [hybrid._trust_region(history, pool, pool.free(history.taken)) for _ in range(2)]
    assert (pool.hamming(late[0], best) <= 1).all() and (pool.hamming(late[1], other) <= 1).all()


def test_a_warm_started_search_has_rival_steps_from_rivals_from_warm() -> None:
    """With points given by the caller, rival local steps start at ``rivals_from_warm``, not ``rivals_from``."""
    space = grid()
    rival = {**SMOOTH_BEST, "shared": False, "bx": 32}
    pool = Pool.of(space, random.Random(0))
    best, other = pool.add(SMOOTH_BEST), pool.add(rival)
    centres = {}
    for given in (frozenset(), frozenset({space.key(SMOOTH_BEST)})):
        history = _history(space, 5)
        history.given = given
        for values in (SMOOTH_BEST, rival, {**SMOOTH_BEST, "tx": 4}, {**SMOOTH_BEST, "ty": 1}):
            _measure(history, values)
        hybrid = Hybrid(rivals=1, rivals_from=100, rivals_from_warm=4)
        steps = [hybrid._trust_region(history, pool, pool.free(history.taken)) for _ in range(2)]
        centres[bool(given)] = [other if (pool.hamming(near, other) <= 1).all() else best for near in steps]
    assert centres == {False: [best, best], True: [best, other]}


@pytest.mark.parametrize("options", [{"kernel": "gp"}, {"fit": "adam"}, {"scale": "linear"},
                                     {"kernel": "switch", "switch": 0}, {"rival_every": 1},
                                     {"rivals": -1}, {"rivals_from": -1}, {"rivals_from_warm": -1}])
def test_unknown_options_are_refused_by_name(options):
    with pytest.raises(ValueError, match=list(options)[-1]):
        Hybrid(**options)


def test_a_small_space_gets_a_small_initial_design() -> None:
    """Ten spread points would be a quarter of a 40-point space: the model leads after a tenth of the
    valid points, at least five; a large space keeps the ten."""
    small = Space(template="small", params=(Param("a", (1, 2, 4, 8)), Param("b", tuple(range(10)))),
                  make=lambda v: (v["a"], v["b"]))
    rng = random.Random(0)
    assert Hybrid().initial_points(Pool.of(small, rng)) == 5
    assert Hybrid().initial_points(Pool.of(grid(), rng)) == 10
    assert Hybrid(initial=3).initial_points(Pool.of(small, rng)) == 3
