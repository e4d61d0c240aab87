"""``bench/large_outputs.py``: the scratch table, a product run and checked, a wrong result caught (exit
status 1), bad counts refused by argparse (exit status 2)."""

from __future__ import annotations

import re

import pytest

from compiler.backends import get_target
from compiler.backends.cpu import CpuConfig


@pytest.fixture
def bench(load_bench):
    if (reason := get_target("cpu").unavailable_reason()) is not None:
        pytest.skip(reason)
    return load_bench("large_outputs")


@pytest.mark.parametrize("inside", [False, True])
def test_a_product_runs_and_is_checked(bench, capsys: pytest.CaptureFixture[str], inside: bool) -> None:
    argv = ["--scratch", "256", "--samples", "5", "--run", "400", "--k", "7", "--rows", "5"]
    assert bench.main(argv + (["--inside"] if inside else [])) == 0
    table, run = capsys.readouterr().out.strip().splitlines()
    assert table.startswith("256³: operands 1 MiB, largest in-launch scratch of 5 sampled schedules")
    # Declared for the most threads a launch may run on, allocated for the threads it runs on here.
    found = re.search(r"MiB declared \((\d+) slots\), [\d.,]+ MiB allocated on (\d+) threads \((\d+) slots\)$", table)
    assert found is not None, table
    declared, threads, allocated = map(int, found.groups())
    assert threads == CpuConfig.default().workers and 0 < allocated <= threads and declared > 0
    assert run.startswith("400x400x7 (160,000 outputs)") and "6 rows checked" in run
    assert ("pack_b_inside=True" in run) == inside  # a 400-row default packs B by a launch of its own


def test_a_wrong_product_exits_1(bench, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # A launch that writes nothing leaves the poisoned output: every checked row is NaN.
    monkeypatch.setattr(type(get_target("cpu")), "run", lambda self, loaded, buffers, timeout_s: None)
    assert bench.main(["--scratch", "", "--run", "64", "--rows", "3"]) == 1
    assert "(WRONG)" in capsys.readouterr().out


def test_bad_counts_exit_2(bench, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        bench.main(["--rows", "0"])
    assert exit_.value.code == 2 and "--rows" in capsys.readouterr().err
