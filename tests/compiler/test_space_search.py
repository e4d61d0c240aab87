"""What a sampler needs of a space: kinds, storable encodings, conditions, a size cap, a fingerprint."""

from dataclasses import dataclass

import pytest

from compiler.space import Condition, Constraint, Kind, Param, Space, SpaceTooLargeError


@dataclass(frozen=True)
class Sched:
    tile: tuple[int, int]
    block: int
    unroll: int
    stream: bool


def sched_space(**overrides) -> Space[Sched]:
    options = {
        "template": "demo",
        "params": (
            Param("tile", ((1, 4), (2, 2), (4, 1))),
            Param("block", (32, 48, 64, 96, 128)),
            Param("stream", (False, True)),
            Param("unroll", (1, 2, 4, 8), when=Condition("stream", (True,))),
        ),
        "make": lambda v: Sched(**v),
        "constraints": (Constraint("tile[0] * block <= 256", lambda s: s.tile[0] * s.block <= 256),),
    }
    options.update(overrides)
    return Space(**options)


def test_kinds_are_inferred_from_the_order_of_the_choices():
    assert Param("b", (1, 2, 4, 8)).kind is Kind.LOG2
    assert Param("b", (16, 48, 64)).kind is Kind.ORDINAL
    assert Param("b", (8, 4, 1)).kind is Kind.CATEGORICAL
    assert Param("b", ("row", "col")).kind is Kind.CATEGORICAL
    assert Param("b", (False, True)).kind is Kind.CATEGORICAL
    assert Param("b", ((1, 2), (2, 1))).kind is Kind.CATEGORICAL
    assert Param("b", (1, 2, 3), kind=Kind.CATEGORICAL).kind is Kind.CATEGORICAL
    with pytest.raises(ValueError, match="not increasing powers of two"):
        Param("b", (1, 3), kind=Kind.LOG2)


def test_tuple_choices_encode_to_storable_text_and_back():
    param = Param("tile", ((1, 4), (2, (2, 1)), (4, 1)))
    assert all(isinstance(s, str) for s in param.storable)
    assert len(set(param.storable)) == 3
    for choice in param.choices:
        assert param.decode(param.encode(choice)) == choice
    with pytest.raises(ValueError, match="not one of"):
        param.decode("[9,9]")
    flags = Param("flag", (0, True))  # a flag is not the number 1
    assert flags.index(True) == 1 and flags.decode(True) is True
    with pytest.raises(ValueError, match="1 is not one of"):
        flags.index(1)


def test_a_conditional_parameter_counts_once_while_inactive():
    space = sched_space()
    combos = list(space.combinations())
    assert space.size == len(combos) == 3 * 5 * (1 + 4)
    assert len({space.key(c) for c in combos}) == len(combos)
    assert all(c["unroll"] == 1 for c in combos if not c["stream"])
    # an inactive parameter may be left out or given any value: it is canonical at its first choice
    assert space.canonical({"tile": (2, 2), "block": 64, "stream": False, "unroll": 8})["unroll"] == 1
    assert space.schedule({"tile": (2, 2), "block": 64, "stream": False}) == Sched((2, 2), 64, 1, False)
    with pytest.raises(ValueError, match="depends on 'late'"):
        Space("bad", (Param("a", (1, 2), when=Condition("late", (1,))), Param("late", (1, 2))), lambda v: v)


def test_validity_of_values_names_the_reason():
    space = sched_space()
    assert space.values_violation({"tile": (4, 1), "block": 128, "stream": False}) == "tile[0] * block <= 256"
    assert space.values_violation({"tile": (4, 1), "block": 33, "stream": False}) == "block=33 is not a choice"
    assert space.is_valid({"tile": (1, 4), "block": 128, "stream": True, "unroll": 4})
    valid = space.valid_values()
    assert len(valid) == len(space.candidates()) == sum(1 for c in space.combinations() if space.is_valid(c))


def test_valid_values_are_walked_once_and_handed_out_as_fresh_dicts():
    made = []

    def make(values):
        made.append(1)
        return Sched(**values)

    space = sched_space(make=make)
    first = space.valid_values()
    walked = len(made)
    assert walked == sum(1 for _ in space.combinations())
    first[0]["block"] = 999  # a caller's edit must not reach the space or the next caller
    again = space.valid_values()
    assert len(made) == walked and again[0]["block"] != 999 and len(again) == len(first)


def test_fingerprint_changes_with_choices_kinds_conditions_constraints_and_version():
    base = sched_space().fingerprint
    assert base == sched_space().fingerprint
    params = sched_space().params
    changed = [
        sched_space(params=(params[0], Param("block", (32, 48, 64, 96)), *params[2:])),
        sched_space(params=(params[0], Param("block", (32, 48, 64, 96, 128), kind=Kind.CATEGORICAL), *params[2:])),
        sched_space(params=(*params[:3], Param("unroll", (1, 2, 4, 8)))),
        sched_space(constraints=()),
        sched_space(version="2"),
        sched_space(template="other"),
    ]
    prints = {s.fingerprint for s in changed}
    assert base not in prints and len(prints) == len(changed)


def test_size_cap_refuses_enumeration_but_not_sampling():
    space = sched_space(max_size=10)
    assert not space.enumerable
    with pytest.raises(SpaceTooLargeError, match="exceed the cap of 10"):
        space.enumerate()
    import random

    values = space.random_values(random.Random(1))
    assert space.canonical(values) == values


def test_neighbours_step_along_ordered_axes_and_jump_between_labels():
    space = sched_space()
    point = {"tile": (2, 2), "block": 64, "stream": True, "unroll": 1}
    near = {(n["tile"], n["block"], n["stream"], n["unroll"]) for n in space.neighbours(point)}
    assert near == {
        ((1, 4), 64, True, 1), ((4, 1), 64, True, 1),  # categorical: every other label
        ((2, 2), 48, True, 1), ((2, 2), 96, True, 1),  # ordinal: one step each way
        ((2, 2), 64, False, 1), ((2, 2), 64, True, 2),  # log2: one doubling (no step below 1)
    }
    far = space.neighbours(point, hamming=True)
    assert len(far) == 2 + 4 + 1 + 3
