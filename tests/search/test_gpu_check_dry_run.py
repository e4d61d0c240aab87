"""``bench/gpu_check.py --dry-run``: without a GPU, the tuning section's plan is printed and its first
candidates are built with NVRTC for sm_90 through the tuning's own build path."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

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
