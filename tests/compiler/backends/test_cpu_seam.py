"""The seam end to end on the cpu: one spec, templates chosen by target, verification and ``warpmap check``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from compiler.backends import get_target
from compiler.backends.timing import Protocol
from search.trial import TrialStatus
from search.verify import check_schedule, check_schedules, summarize
from service.cli import main

from .conftest import CpuRowSum, RowSumSpec

Capture = pytest.CaptureFixture[str]


@pytest.fixture(autouse=True)
def _fresh_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("WARPMAP_CACHE_DIR", str(tmp_path))
    if get_target("cpu").unavailable_reason() is not None:
        pytest.skip(get_target("cpu").unavailable_reason())


def test_the_same_spec_serves_both_template_targets(rowsum) -> None:
    spec = RowSumSpec(rows=13, cols=29)
    cpu, emu = get_target("cpu"), get_target("emu")
    assert rowsum.space(spec, cpu.device(), 1).template == "rowsum_cpu"
    assert rowsum.space(spec, emu.device(), 1).template == "rowsum_cuda"
    for target in (cpu, emu):
        space = rowsum.space(spec, target.device(), 1)
        results = check_schedules(rowsum, spec, space.candidates(), target=target)
        assert summarize(results).line == f"{len(results)} passed, 0 failed, 0 pruned", [r.message for r in results]
        assert all(r.artifact is not None and r.artifact.target == target.name for r in results)


@pytest.mark.parametrize(("bug", "status", "phrase"), [
    ("wrong", TrialStatus.WRONG_RESULT, "out: relative error"),
    ("stale", TrialStatus.WRONG_RESULT, "relative error inf"),
    ("render", TrialStatus.COMPILE_ERROR, "render raised CodegenError"),
    ("hang", TrialStatus.TIMEOUT, "still running after"),
])
def test_broken_cpu_kernels_fail_verification(rowsum, bug: str, status: TrialStatus, phrase: str) -> None:
    spec = RowSumSpec(rows=7, cols=5, bug=bug)
    result = check_schedule(rowsum, spec, CpuRowSum(4, 3), target=get_target("cpu"), timeout_s=0.05)
    assert result.status is status and phrase in result.message, result.message


def test_the_verified_artifact_is_the_one_to_time(rowsum) -> None:
    spec = RowSumSpec(rows=9, cols=9)
    cpu = get_target("cpu")
    result = check_schedule(rowsum, spec, CpuRowSum(4, 1), target=cpu)
    assert result.status is TrialStatus.OK and result.artifact is not None
    inputs = rowsum.inputs(spec, np.random.default_rng(0))
    out = rowsum.outputs(spec)[0]
    samples = cpu.time(cpu.load(result.artifact), {"x": inputs["x"], "out": np.zeros(out.shape, np.float32)},
                       Protocol(warmup_ms=1, min_repetitions=2, target_ms=1))
    assert len(samples.samples_ns) >= 2


def test_warpmap_check_on_the_cpu_passes_the_level_1_space(rowsum, capsys: Capture) -> None:
    assert main(["check", "--spec", '{"op": "rowsum", "rows": 37, "cols": 1}', "--target", "cpu"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].startswith("space rowsum_cpu level 1: 4 combinations, 4 valid") and out[1].endswith("on cpu")
    rows = [line for line in out if line.endswith(" pass") or " pass " in line]
    assert len(rows) == 4 and all("  -  " in row for row in rows)  # the cpu has no register report
    assert out[-1] == "4 passed, 0 failed, 0 pruned"


def test_warpmap_check_on_the_cpu_fails_a_wrong_kernel(rowsum, capsys: Capture) -> None:
    assert main(["check", "--spec", '{"op": "rowsum", "rows": 5, "cols": 3, "bug": "wrong"}', "--target", "cpu"]) == 1
    captured = capsys.readouterr()
    assert captured.out.splitlines()[-1] == "0 passed, 4 failed, 0 pruned"
    assert "warpmap check: 4 of 4 schedules failed" in captured.err


@pytest.mark.parametrize(("argv", "message"), [
    (["--gpu", "h200"], "--gpu applies to the targets of the CUDA templates (emu, cuda), not to --target cpu"),
    (["--spec", '{"op": "rowsum", "rows": 5, "cols": 3, "dtype": "float16"}'],
     "no rowsum template for dtype 'float16' on target 'cpu'; that target has dtypes float32"),
])
def test_bad_cpu_checks_exit_2_with_one_line(rowsum, capsys: Capture, argv: list[str], message: str) -> None:
    base = ["check", "--spec", '{"op": "rowsum", "rows": 5, "cols": 3}', "--target", "cpu"]
    assert main(base + argv) == 2
    assert capsys.readouterr().err == f"warpmap check: error: {message}\n"
