"""``bench/fuzz_spaces.py``: random specs fit for each target, a short run on the host's cores that
passes, and a failing schedule reported with the command that reproduces it (exit status 1)."""

from __future__ import annotations

import json
import random
from dataclasses import replace

import pytest

from compiler.backends import get_target
from compiler.ops import get_operator, parse_spec
from search.trial import TrialStatus


@pytest.fixture
def bench(load_bench):
    return load_bench("fuzz_spaces")


def test_cpu_specs_are_float32_and_have_a_cpu_template(bench) -> None:
    rnd = random.Random(5)
    device = get_target("cpu").device()
    drawn = [bench.random_spec(rnd, "cpu") for _ in range(300)]
    assert {d["dtype"] for d in drawn} == {"float32"}
    assert {d["op"] for d in drawn} == {"matmul", "conv2d", "softmax", "reduce"}
    # Past the emulator's sizes, into the cpu's cache blocks.
    assert max(max(d["m"], d["n"], d["k"]) for d in drawn if d["op"] == "matmul") > 150
    for data in drawn[:30]:
        try:
            spec = parse_spec(data)
        except ValueError:
            continue  # a filter larger than the padded image, as the fuzzer skips
        assert get_operator(data["op"]).space(spec, device, 2).sample(1, 0)


def test_a_short_cpu_run_passes(bench, capsys: pytest.CaptureFixture[str]) -> None:
    if (reason := get_target("cpu").unavailable_reason()) is not None:
        pytest.skip(reason)
    assert bench.main(["--target", "cpu", "--minutes", "0.05", "--samples", "1", "--seed", "3"]) == 0
    out = capsys.readouterr().out
    assert "random specs on cpu" in out and "FAIL" not in out
    assert " ok " in out


def test_a_failure_is_reported_with_its_command(bench, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    if (reason := get_target("cpu").unavailable_reason()) is not None:
        pytest.skip(reason)
    real = bench.check_schedules

    def wrong(*args, **kwargs):
        return [replace(r, status=TrialStatus.WRONG_RESULT, message="planted") for r in real(*args, **kwargs)]

    monkeypatch.setattr(bench, "check_schedules", wrong)
    assert bench.main(["--target", "cpu", "--minutes", "0.01", "--samples", "1"]) == 1
    out = capsys.readouterr().out
    fail = next(line for line in out.splitlines() if line.startswith("FAIL wrong_result: planted"))
    command = next(line for line in out.splitlines() if "warpmap check --target cpu" in line)
    data = json.loads(command.split("--spec '")[1].split("'")[0])
    assert parse_spec(data) and fail


def test_each_spec_checks_its_default_schedule_too(bench, monkeypatch: pytest.MonkeyPatch) -> None:
    """What an untuned call and every search's first trial run is fuzzed with the samples."""
    if (reason := get_target("cpu").unavailable_reason()) is not None:
        pytest.skip(reason)
    seen = []

    def record(operator, spec, schedules, **kwargs):
        seen.append((operator, spec, tuple(schedules)))
        return []

    monkeypatch.setattr(bench, "check_schedules", record)
    assert bench.main(["--target", "cpu", "--minutes", "0.01", "--samples", "1"]) == 0
    assert seen
    device = get_target("cpu").device()
    for operator, spec, schedules in seen:
        space = operator.space(spec, device, 2)
        assert space.schedule(space.default_values()) == schedules[0] and len(schedules) <= 2
