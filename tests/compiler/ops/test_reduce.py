"""Reduction template: spec validation, reference, space, and every level-1 schedule on the emulator."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from compiler.backends import get_target
from compiler.device import device_preset
from compiler.numeric import from_storage
from compiler.ops import get_operator, parse_spec
from compiler.ops.reduce import MAX_ELEMENTS, OPERATOR, ReduceSchedule, ReduceSpec, reduce_reference
from compiler.space import schedule_values
from search.trial import TrialStatus
from search.verify import check_schedule
from service.cli import main as cli_main

H200 = device_preset("h200")


def check(spec, schedule):
    return check_schedule(OPERATOR, spec, schedule, target=get_target("emu", gpu=H200))


def _cases(specs, level=1, sample=None, seed=0):
    for spec in specs:
        space = OPERATOR.space(spec, H200, level)
        schedules = space.sample(sample, seed) if sample else space.candidates()
        for schedule in schedules:
            label = "-".join(str(v) for v in schedule_values(schedule).values())
            shape = "x".join(map(str, spec.shape))
            yield pytest.param(spec, schedule, id=f"{spec.kind}-{spec.dtype}-{shape}-axis{spec.axis}-{label}")


def _assert_passes(spec, schedule):
    result = check(spec, schedule)
    assert result.status in (TrialStatus.OK, TrialStatus.INVALID), (result.status, result.message)


ODD = [ReduceSpec(shape=[5, 37, 9], axis=axis, kind=kind) for kind in ("sum", "max", "mean") for axis in (0, 1, 2)]


@pytest.mark.parametrize(("spec", "schedule"), list(_cases(ODD)))
def test_every_level1_schedule_matches_numpy(spec, schedule):
    _assert_passes(spec, schedule)


HALF = [
    ReduceSpec(shape=[5, 37, 9], axis=0, kind="mean", dtype="float16"),
    ReduceSpec(shape=[3, 1000], axis=1, kind="sum", dtype="float16"),
    ReduceSpec(shape=[6, 36, 9], axis=2, kind="max", dtype="bfloat16"),
    ReduceSpec(shape=[7, 20, 11], axis=1, kind="sum", dtype="bfloat16"),
]


@pytest.mark.parametrize(("spec", "schedule"), list(_cases(HALF, sample=4, seed=5)))
def test_half_precision_sample(spec, schedule):
    _assert_passes(spec, schedule)


LONG = [ReduceSpec(shape=[2, 300_000], axis=1, kind="sum"), ReduceSpec(shape=[1000, 64], axis=0, kind="mean")]


@pytest.mark.parametrize(("spec", "schedule"), list(_cases(LONG, level=2, sample=3, seed=2)))
def test_long_reduced_axes(spec, schedule):
    _assert_passes(spec, schedule)


@settings(max_examples=8, deadline=None)
@given(shape=st.lists(st.integers(1, 12), min_size=1, max_size=4), data=st.data(),
       kind=st.sampled_from(["sum", "max", "mean"]), dtype=st.sampled_from(["float32", "float16", "bfloat16"]))
def test_random_specs_and_schedules(shape, data, kind, dtype):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    spec = ReduceSpec(shape=shape, axis=axis, kind=kind, dtype=dtype)
    valid = OPERATOR.space(spec, H200, 2).candidates()
    result = check(spec, valid[data.draw(st.integers(0, len(valid) - 1))])
    assert result.status is TrialStatus.OK, result.message


def test_reducing_a_vector_gives_a_scalar():
    spec = ReduceSpec(shape=[1000], axis=0, kind="max")
    assert OPERATOR.outputs(spec)[0].shape == ()
    (schedule,) = OPERATOR.space(spec, H200, 1).sample(1, seed=0)
    assert check(spec, schedule).status is TrialStatus.OK


@pytest.mark.parametrize("kind", ["sum", "max", "mean"])
def test_reference_views_the_tensor_as_outer_extent_inner(kind):
    spec = ReduceSpec(shape=[2, 3, 4], axis=1, kind=kind)
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    y = reduce_reference(spec, {"x": x})["y"]
    expected = {"sum": x.sum(axis=1), "max": x.max(axis=1), "mean": x.mean(axis=1)}[kind]
    assert y.shape == (2, 4) and y.dtype == np.float64
    np.testing.assert_allclose(y, expected)
    assert (spec.outer, spec.extent, spec.inner) == (2, 3, 4)


def test_inputs_are_random_nonzero_storage():
    spec = ReduceSpec(shape=[4, 5, 6], axis=2, kind="sum", dtype="bfloat16")
    x = OPERATOR.inputs(spec, np.random.default_rng(0))["x"]
    assert x.dtype == np.uint16 and x.shape == (4, 5, 6)
    values = from_storage(x, "bfloat16")
    assert np.count_nonzero(values) == values.size and len(np.unique(values)) > 20


def test_counts():
    spec = ReduceSpec(shape=[8, 100, 3], axis=1, kind="mean", dtype="float16")
    assert OPERATOR.min_bytes(spec) == (8 * 100 * 3 + 8 * 3) * 2
    assert OPERATOR.flops(spec) == 8 * 100 * 3 + 8 * 3


def test_negative_axis_is_normalised_to_one_workload():
    first = ReduceSpec(shape=[5, 37, 9], axis=-1, kind="sum")
    assert first.axis == 2
    assert first.canonical_json() == ReduceSpec(shape=[5, 37, 9], axis=2, kind="sum").canonical_json()
    assert parse_spec({"op": "reduce", "shape": [4, 4], "axis": -2, "kind": "max"}).axis == 0


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"shape": [5, 37, 9], "axis": 3, "kind": "sum"}, "axis 3 is out of range for the 3-D shape"),
        ({"shape": [5, 37, 9], "axis": -4, "kind": "sum"}, "axis -4 is out of range"),
        ({"shape": [], "axis": 0, "kind": "sum"}, "shape"),
        ({"shape": [5, 0, 9], "axis": 0, "kind": "sum"}, "shape.1"),
        ({"shape": [5, 9], "axis": 0, "kind": "product"}, "kind"),
        ({"shape": [5, 9], "axis": 0, "kind": "sum", "dtype": "int8"}, "dtype"),
        ({"shape": [1 << 16, 1 << 15, 2], "axis": 2, "kind": "sum"}, f"outputs; the limit is {MAX_ELEMENTS}"),
        ({"shape": [1] * 9, "axis": 0, "kind": "sum"}, "shape"),
    ],
)
def test_bad_specs_name_the_problem(fields, message):
    with pytest.raises(ValidationError, match=message):
        ReduceSpec(**fields)


def test_space_levels_and_named_constraints():
    strided = OPERATOR.space(ReduceSpec(shape=[5, 37, 9], axis=1, kind="sum"), H200, 1).enumerate()
    assert len(strided.valid) == 20 and all(s.vector == 1 for s in strided.valid)
    # 45 outputs leave SMs idle: the 4 schedules whose 8 parts each get a step of the 37 are split
    assert sorted(s.parts * s.step for s in strided.valid if s.parts > 1) == [32] * 4
    contiguous = OPERATOR.space(ReduceSpec(shape=[5, 37, 9], axis=2, kind="sum"), H200, 1).enumerate()
    assert contiguous.rejected == {
        "reduced extent divisible by vector": 32,
        "parts > 1 only when the outputs fill fewer blocks than 132 SMs": 8,
        "parts > 1 only when each part has a step of the reduced axis": 8,
    }
    half = OPERATOR.space(ReduceSpec(shape=[4, 64], axis=1, kind="sum", dtype="float16"), H200, 1).candidates()
    assert {s.vector for s in half} == {1, 2}
    level2 = OPERATOR.space(ReduceSpec(shape=[64, 4096], axis=1, kind="sum"), H200, 2).enumerate()
    assert len(level2.valid) >= 500
    assert level2.rejected["threads per block <= 1024"] > 0
    strided2 = OPERATOR.space(ReduceSpec(shape=[64, 4096], axis=0, kind="sum"), H200, 2).enumerate()
    assert strided2.rejected["vector loads need the last axis reduced"] > 0
    with pytest.raises(ValueError, match="level 0"):
        OPERATOR.space(ReduceSpec(shape=[4], axis=0, kind="sum"), H200, 0)


def test_a_vector_across_a_strided_axis_is_refused_before_compiling():
    result = check(ReduceSpec(shape=[4, 8, 3], axis=1, kind="sum"), ReduceSchedule(4, 8, 1, 2, "shuffle"))
    assert result.status is TrialStatus.INVALID and "vector 2" in result.message


def test_registered():
    assert get_operator("reduce") is OPERATOR


def test_warpmap_check_passes_on_a_middle_axis(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("WARPMAP_CACHE_DIR", str(tmp_path))
    spec = '{"op":"reduce","shape":[5,37,9],"axis":1,"kind":"mean","dtype":"bfloat16"}'
    code = cli_main(["check", "--spec", spec, "--sample", "4"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "4 passed, 0 failed" in out


def test_warpmap_check_names_a_bad_axis(capsys):
    code = cli_main(["check", "--spec", '{"op":"reduce","shape":[5,37,9],"axis":3,"kind":"sum"}'])
    assert code == 2
    assert "axis 3 is out of range for the 3-D shape [5, 37, 9]" in capsys.readouterr().err
