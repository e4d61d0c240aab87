"""``bench/busy_host.py``: a row per size and host, each cell the processes' median [min, max], the
default schedule checked against numpy in every timing process (a wrong result fails the run)."""

from __future__ import annotations

import pytest

from compiler.backends import get_target


def test_a_row_per_size_and_host_with_both_bindings(load_bench, capsys: pytest.CaptureFixture[str]) -> None:
    if (reason := get_target("cpu").unavailable_reason()) is not None:
        pytest.skip(reason)
    bench = load_bench("busy_host")
    assert bench.main(["--sizes", "40", "--processes", "1", "--spinners", "1"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if line.startswith("40³ ")]
    assert [row[1] for row in rows] == ["quiet", "busy"]
    for row in rows:
        unbound, bound, ratio = float(row[-7]), float(row[-4]), float(row[-1])
        assert unbound > 0 and bound > 0 and ratio == pytest.approx(unbound / bound, rel=0.05)  # cells: 0.1 us
