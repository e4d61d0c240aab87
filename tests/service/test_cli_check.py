"""``warpmap check`` end to end through ``service.cli.main``: the matmul space on the emulator, bad specs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from compiler.backends import get_runner
from service.cli import main

SPEC = '{"op":"matmul","m":67,"n":45,"k":83,"batch":3,"layout_a":"col"}'
Capture = pytest.CaptureFixture[str]


def test_a_sample_of_the_matmul_space_passes(capsys: Capture, monkeypatch: pytest.MonkeyPatch,
                                             tmp_path: Path) -> None:
    monkeypatch.setenv("WARPMAP_CACHE_DIR", str(tmp_path))  # compiled kernels go to a fresh cache
    assert main(["check", "--spec", SPEC, "--sample", "4"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith('matmul {"batch":3,"dtype":"float32","k":83,"layout_a":"col"')
    assert re.match(r"space matmul_simt level 1: 32 combinations, 24 valid \(rejected: 8 block tile", lines[1])
    assert lines[1].endswith("checking 4 on emu")
    start = next(i for i, line in enumerate(lines) if line.startswith("#"))
    for column in ("warps_m", "lanes_m", "block_k", "vector", "regs", "smem", "rel_err", "result"):
        assert column in lines[start]
    rows = lines[start + 2:-1]  # below the header's rule, above the summary
    assert len(rows) == 4 and all(re.search(r"\de-\d\d  pass", row) for row in rows), rows
    assert lines[-1] == "4 passed, 0 failed, 0 pruned"


@pytest.mark.parametrize(("spec", "named"), [
    ('{"op":"matmul","m":0,"n":45,"k":83}', "m"),
    ('{"op":"matmul","m":4,"n":4,"k":4,"layout_b":"diagonal"}', "layout_b"),
    ('{"op":"matmul","m":4,"n":4,"k":4,"dtype":"float64"}', "dtype"),
    ('{"op":"matmul","m":4,"n":4}', "k"),
    ('{"op":"matmul","m":4,"n":4,"k":4,"colour":"red"}', "colour"),
    ('{"op":"matmull","m":4}', "matmull"),
    ('{"op":"matmul",', "not valid JSON"),
])
def test_bad_specs_exit_2_naming_the_problem(capsys: Capture, spec: str, named: str) -> None:
    assert main(["check", "--spec", spec]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("warpmap check: error:")
    assert named in captured.err
    assert "Traceback" not in captured.err + captured.out


def test_a_bad_sample_size_exits_2(capsys: Capture) -> None:
    assert main(["check", "--spec", SPEC, "--sample", "0"]) == 2
    assert "--sample must be at least 1, got 0" in capsys.readouterr().err


def test_the_gpu_backend_without_a_gpu_says_why(capsys: Capture) -> None:
    if get_runner("cuda").unavailable_reason() is None:
        pytest.skip("this machine has a GPU")
    assert main(["check", "--spec", '{"op": "matmul", "m": 8, "n": 8, "k": 8}', "--device", "cuda"]) == 2
    assert "device 'cuda' cannot run kernels here: no GPU" in capsys.readouterr().err
