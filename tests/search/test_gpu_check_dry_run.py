"""``bench/gpu_check.py --dry-run``: without a GPU, the tuning section's plan is printed and its first
candidates are built with NVRTC for sm_90 through the tuning's own build path."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_the_dry_run_builds_each_workloads_first_candidates_for_sm_90() -> None:
    from compiler.backends.nvrtc import nvrtc_version

    try:
        nvrtc_version()
    except Exception as exc:  # no NVRTC on this machine: nothing to build with
        pytest.skip(f"NVRTC is not available: {exc}")
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "gpu_check.py"), "--dry-run", "--workloads",
         "32bit bert ffn2,16bit 1024^3", "--trials", "3"],
        capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "limits of preset NVIDIA H200 (sm_90)" in out
    plans = re.findall(r"^(\d+bit [^:]+): \{.*\} -> (\w+), \d+ combinations; budget (\d+) trials", out, re.M)
    assert plans == [("32bit bert ffn2", "matmul_simt", "32"), ("16bit 1024^3", "matmul_mma", "32")]
    built = re.findall(r"^\d+\s+\w+=.*\s(\d+)\s+\d+\s+[\d.]+\s+built$", out, re.M)
    assert len(built) == 6 and all(0 < int(regs) <= 255 for regs in built), out
    assert re.findall(r"(\d+) candidates built in", out) == ["3", "3"]
    assert "[I " not in done.stderr  # Optuna's INFO lines stay out of the way
    records = re.findall(r"^(\d+bit [^:]+): the record of #\d+ read back: cuda, 1 launch\(es\), 1 CUBIN\(s\), "
                         r"arguments a, b, c$", out, re.M)
    assert records == ["32bit bert ffn2", "16bit 1024^3"]


@pytest.fixture
def gpu_tune(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import gpu_tune

    return gpu_tune


@pytest.mark.parametrize(("fault", "verdict"), [
    (None, r"ok \(\d\.\de-\d\d\)"),
    ("poisoned", r"numpy: c off by inf \(allowed .*\)"),
    ("one in a hundred", r"numpy: c off by 0\.01 \(allowed .*\)"),
])
def test_the_stored_check_compares_the_kernel_run_from_its_record_with_numpy(
        gpu_tune, monkeypatch: pytest.MonkeyPatch, fault: str | None, verdict: str) -> None:
    """The record is a real cpu build's, sent through JSON as the check sends it; the GPU launch is stood in
    for by numpy's product, right or wrong as ``fault`` says (a real run needs a GPU)."""
    from compiler.backends import get_target
    from compiler.ops import get_operator, parse_spec
    from search.records import program_result
    from search.verify import compile_schedule

    operator, spec = get_operator("matmul"), parse_spec({"op": "matmul", "m": 19, "n": 23, "k": 37})
    space = operator.space(spec, get_target("cpu").device(), 1)
    built = compile_schedule(operator, spec, space.enumerate().valid[0], get_target("cpu"))
    assert built.artifact is not None, built.message
    record = program_result(built.artifact, schedule={}, latency_us=1.0, trials_used=1)
    seen: list[dict[str, object]] = []

    def load_stored(document, binary, *, target):  # type: ignore[no-untyped-def]
        seen.append({"target": target, "document": document, "binary": binary})

        def kernel(a, b, c):  # type: ignore[no-untyped-def]
            assert np.isnan(c).all()  # the outputs come poisoned
            if fault != "poisoned":
                c[...] = a @ b * (1.01 if fault == "one in a hundred" else 1.0)
        return kernel

    monkeypatch.setattr(gpu_tune, "load_stored", load_stored)
    result = gpu_tune.stored_check(record, built.artifact.program, operator, spec, runs=("numpy",))
    assert re.fullmatch(verdict, result), result
    (call,) = seen
    assert call["target"] == "cuda" and call["binary"] == record.binary
    assert call["document"]["source"] == record.source and call["document"]["target"] == "cuda"


def test_the_default_column_is_the_default_schedule_s_own_trial(gpu_tune) -> None:
    from types import SimpleNamespace

    from compiler.backends.timing import Protocol, Samples
    from search.results import Trial
    from search.trial import TrialStatus

    protocol = Protocol(warmup_ms=1, min_repetitions=1, target_ms=1)
    default = {"block_m": 128, "stages": 3}
    trials = [Trial(0, {"block_m": 64, "stages": 3}, TrialStatus.OK, samples=Samples((1_000_000,), protocol)),
              Trial(1, dict(default), TrialStatus.OK, samples=Samples((3_000_000, 2_000_000, 5_000_000), protocol))]
    result = SimpleNamespace(trials=trials)
    assert gpu_tune.default_ms(result, default) == 3.0
    failed = SimpleNamespace(trials=[trials[0], Trial(1, dict(default), TrialStatus.LAUNCH_ERROR, "fault")])
    assert gpu_tune.default_ms(failed, default) is None
    assert gpu_tune.default_ms(result, None) is None
