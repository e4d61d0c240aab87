from dataclasses import dataclass

import pytest

from compiler.space import Condition, Constraint, Param, Space


@dataclass(frozen=True)
class Tile:
    rows: int
    cols: int


def tile_space() -> Space[Tile]:
    return Space(
        template="tile",
        params=(Param("rows", (1, 2, 3, 8)), Param("cols", (16, 32, 64))),
        make=lambda values: Tile(**values),
        constraints=(
            Constraint("threads <= 256", lambda t: t.rows * t.cols <= 256),
            Constraint("rows divides cols", lambda t: t.cols % t.rows == 0),
        ),
    )


def test_enumeration_counts_each_rejection_once_by_first_broken_constraint():
    result = tile_space().enumerate()
    assert {(t.rows, t.cols) for t in result.valid} == {
        (r, c) for r in (1, 2, 8) for c in (16, 32, 64) if r * c <= 256
    }
    assert result.rejected == {"threads <= 256": 1, "rows divides cols": 3}
    assert result.total == tile_space().size == 12


def test_sample_is_seeded_distinct_and_valid():
    space = tile_space()
    first = space.sample(5, seed=3)
    assert first == space.sample(5, seed=3)
    assert len(set(first)) == 5
    assert all(space.violation(s) is None for s in first)
    assert space.sample(100) == space.candidates()


def test_schedule_from_values_is_checked():
    space = tile_space()
    assert space.schedule({"rows": 2, "cols": 32}) == Tile(2, 32)
    with pytest.raises(ValueError, match="rows=4 is not one of"):
        space.schedule({"rows": 4, "cols": 32})
    with pytest.raises(ValueError, match="missing \\['cols'\\]"):
        space.schedule({"rows": 2})
    with pytest.raises(ValueError, match="threads <= 256"):
        space.schedule({"rows": 8, "cols": 64})


def test_param_rejects_empty_and_repeated_choices():
    with pytest.raises(ValueError, match="no choices"):
        Param("x", ())
    with pytest.raises(ValueError, match="repeated"):
        Param("x", (1, 1))


def test_restore_reads_a_schedule_back_from_json_or_refuses_it() -> None:
    space = Space(
        template="t",
        params=(Param("warps", ((2, 2), (4, 1))), Param("flag", (False, True)),
                Param("unroll", (1, 2), when=Condition("flag", (True,)))),
        make=lambda v: v,
        constraints=(Constraint("no 4x1 with flag", lambda v: not (v["warps"] == (4, 1) and v["flag"])),),
    )
    assert space.restore({"warps": [2, 2], "flag": True, "unroll": 2, "other": 7}) == {
        "warps": (2, 2), "flag": True, "unroll": 2}
    assert space.restore({"warps": [4, 1], "flag": False, "unroll": 2}) == {"warps": (4, 1), "flag": False,
                                                                           "unroll": 1}
    assert space.restore({"warps": [4, 1], "flag": True, "unroll": 1}) is None  # breaks the constraint
    assert space.restore({"warps": [3, 1], "flag": False}) is None  # not a choice
    assert space.restore({"warps": [2, 2], "flag": 1}) is None  # 1 is not the flag True
    assert space.restore({"flag": False}) is None  # a parameter missing


def test_restore_nearest_takes_the_closest_number_and_nothing_else() -> None:
    space = Space(
        template="t",
        params=(Param("mc", (48, 96, 192)), Param("order", ("ij", "ji")), Param("unroll", (1, 2, 4))),
        make=lambda v: v,
        constraints=(Constraint("mc 192 only unrolled", lambda v: v["mc"] != 192 or v["unroll"] > 1),),
    )
    assert space.restore({"mc": 100, "order": "ji", "unroll": 3}) is None  # not choices
    assert space.restore({"mc": 100, "order": "ji", "unroll": 3}, nearest=True) == {
        "mc": 96, "order": "ji", "unroll": 4}  # 3 is nearer 4 than 2 by ratio
    assert space.restore({"mc": 60, "order": "ij", "unroll": 1}, nearest=True)["mc"] == 48
    assert space.restore({"mc": 400, "order": "ij", "unroll": 1}, nearest=True) is None  # 192 breaks the rule
    assert space.restore({"mc": 96, "order": "kj", "unroll": 1}, nearest=True) is None  # a name is not near
    assert space.restore({"mc": True, "order": "ij", "unroll": 1}, nearest=True) is None  # nor a flag
    labels = Space(template="u", params=(Param("variant", (4, 1, 2)),), make=lambda v: v)  # numbers, no order
    assert labels.restore({"variant": 3}, nearest=True) is None and labels.restore({"variant": 2}) == {"variant": 2}
