"""Softmax template: spec validation, reference, space, and every level-1 schedule on the emulator."""

import json
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from compiler.backends import CompileFailure, get_target
from compiler.device import DEVICES, device_preset
from compiler.numeric import from_storage
from compiler.ops import get_operator, parse_spec
from compiler.ops.softmax import (
    MAX_ELEMENTS,
    OPERATOR,
    SoftmaxSchedule,
    SoftmaxSpec,
    softmax_reference,
)
from compiler.space import schedule_values
from search.trial import TrialStatus
from search.verify import check_schedule
from service.cli import main as cli_main

H200 = device_preset("h200")
AWKWARD = [SoftmaxSpec(rows=4, cols=1), SoftmaxSpec(rows=5, cols=1000), SoftmaxSpec(rows=3, cols=4099)]


def check(spec, schedule):
    return check_schedule(OPERATOR, spec, schedule, target=get_target("emu", gpu=H200))


def _cases(specs, level=1, sample=None, seed=0):
    for spec in specs:
        space = OPERATOR.space(spec, H200, level)
        schedules = space.sample(sample, seed) if sample else space.candidates()
        for schedule in schedules:
            label = "-".join(str(v) for v in schedule_values(schedule).values())
            yield pytest.param(spec, schedule, id=f"{spec.dtype}-{spec.rows}x{spec.cols}-{label}")


def _assert_passes(spec, schedule):
    result = check(spec, schedule)
    assert result.status in (TrialStatus.OK, TrialStatus.INVALID), (result.status, result.message)
    if result.status is TrialStatus.OK:
        assert result.error is not None and result.error <= 1e-5 * (1 if spec.dtype == "float32" else 1000)


@pytest.mark.parametrize(("spec", "schedule"), list(_cases(AWKWARD)))
def test_every_level1_schedule_matches_numpy(spec, schedule):
    _assert_passes(spec, schedule)


HALF = [SoftmaxSpec(rows=3, cols=1000, dtype="float16"), SoftmaxSpec(rows=5, cols=4099, dtype="bfloat16"),
        SoftmaxSpec(rows=4, cols=130, dtype="bfloat16")]


@pytest.mark.parametrize(("spec", "schedule"), list(_cases(HALF, sample=4, seed=3)))
def test_half_precision_sample(spec, schedule):
    _assert_passes(spec, schedule)


@pytest.mark.parametrize(("spec", "schedule"), list(_cases([SoftmaxSpec(rows=2, cols=200_003)], level=2,
                                                           sample=3, seed=1)))
def test_rows_of_hundreds_of_thousands_of_columns(spec, schedule):
    assert schedule.cache == "stream"  # nothing else holds such a row
    _assert_passes(spec, schedule)


@settings(max_examples=6, deadline=None)
@given(rows=st.integers(1, 9), cols=st.integers(1, 3000), dtype=st.sampled_from(["float32", "float16", "bfloat16"]),
       pick=st.integers(0, 10_000))
def test_random_specs_and_schedules(rows, cols, dtype, pick):
    spec = SoftmaxSpec(rows=rows, cols=cols, dtype=dtype)
    valid = OPERATOR.space(spec, H200, 2).candidates()
    result = check(spec, valid[pick % len(valid)])
    assert result.status is TrialStatus.OK, result.message


def test_reference_is_max_subtracted_and_normalised():
    spec = SoftmaxSpec(rows=2, cols=3)
    x = np.array([[1000.0, 1001.0, 1002.0], [-5.0, 0.0, 5.0]], dtype=np.float32)
    y = softmax_reference(spec, {"x": x})["y"]
    expected = np.exp([-2.0, -1.0, 0.0]) / np.exp([-2.0, -1.0, 0.0]).sum()
    np.testing.assert_allclose(y[0], expected, rtol=1e-12)
    np.testing.assert_allclose(y.sum(axis=1), [1.0, 1.0], rtol=1e-12)


def test_inputs_are_random_and_in_storage_form():
    spec = SoftmaxSpec(rows=3, cols=50, dtype="bfloat16")
    x = OPERATOR.inputs(spec, np.random.default_rng(0))["x"]
    assert x.dtype == np.uint16 and x.shape == (3, 50)
    values = from_storage(x, "bfloat16")
    assert np.count_nonzero(values) == values.size and values.std() > 1.0


def test_counts_and_outputs():
    spec = SoftmaxSpec(rows=8, cols=1024, dtype="float16")
    assert OPERATOR.min_bytes(spec) == 2 * 8 * 1024 * 2
    assert OPERATOR.flops(spec) == 5 * 8 * 1024
    (out,) = OPERATOR.outputs(spec)
    assert (out.name, out.shape, out.dtype) == ("y", (8, 1024), "float16")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"rows": 0, "cols": 5}, "rows"),
        ({"rows": 5, "cols": 0}, "cols"),
        ({"rows": 5, "cols": 5, "dtype": "float64"}, "dtype"),
        ({"rows": 5, "cols": 5, "axis": 1}, "axis"),
        ({"rows": 1 << 18, "cols": 1 << 17}, "GiB"),
        ({"rows": MAX_ELEMENTS + 1, "cols": 1}, "rows"),
    ],
)
def test_bad_specs_name_the_problem(fields, message):
    with pytest.raises(ValidationError, match=message):
        SoftmaxSpec(**fields)


def test_registered_and_parsed_from_client_json():
    assert get_operator("softmax") is OPERATOR
    spec = parse_spec({"op": "softmax", "rows": 3, "cols": 7, "dtype": "float16"})
    assert spec == SoftmaxSpec(rows=3, cols=7, dtype="float16")
    assert json.loads(spec.canonical_json()) == {"op": "softmax", "rows": 3, "cols": 7, "dtype": "float16"}


def test_space_levels_and_named_constraints():
    spec = SoftmaxSpec(rows=3, cols=4099)
    level1 = OPERATOR.space(spec, H200, 1).enumerate()
    assert 0 < len(level1.valid) <= 48
    assert level1.rejected["cols divisible by vector"] == 16
    assert level1.rejected["registers path holds <= 64 values per thread"] > 0
    assert all(s.vector == 1 for s in level1.valid)
    assert len(OPERATOR.space(SoftmaxSpec(rows=64, cols=4096), H200, 2).candidates()) >= 200
    half = OPERATOR.space(SoftmaxSpec(rows=3, cols=4096, dtype="float16"), H200, 1).enumerate()
    assert half.rejected["16-bit loads are pairs (vector <= 2)"] > 0
    small = replace(DEVICES["a100"], max_threads_per_block=256)
    assert all(s.threads <= 256 for s in OPERATOR.space(spec, small, 2).candidates())
    with pytest.raises(ValueError, match="level 3"):
        OPERATOR.space(spec, H200, 3)


def test_the_heaviest_register_schedules_compile_without_spills():
    spec = SoftmaxSpec(rows=64, cols=4096)
    cached = [s for s in OPERATOR.space(spec, H200, 2).candidates() if s.cache == "registers"]
    heaviest = sorted(cached, key=lambda s: (s.chunks(spec.cols) * s.vector * s.threads, s.threads))[-2:]
    for schedule in heaviest:
        artifact = get_target("emu", gpu=H200).compile(OPERATOR.build(spec, schedule, "cuda"))
        assert not isinstance(artifact, CompileFailure), (schedule, artifact.message)
        assert all(u.spill_stores == 0 for u in artifact.launches[0].usage.values())


def test_a_misaligned_vector_is_refused_before_compiling():
    result = check(SoftmaxSpec(rows=2, cols=6), SoftmaxSchedule(32, 1, 4, "stream", 1))
    assert result.status is TrialStatus.INVALID and "vector 4" in result.message


def test_warpmap_check_passes_on_4099_columns(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("WARPMAP_CACHE_DIR", str(tmp_path))
    code = cli_main(["check", "--spec", '{"op":"softmax","rows":3,"cols":4099}'])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "0 failed" in out
