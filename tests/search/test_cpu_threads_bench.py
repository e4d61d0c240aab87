"""``bench/cpu_threads.py``: a row per size and thread count, each with the protocol's medians and the
sustained figures of every round; bad counts are refused by argparse (exit status 2)."""

from __future__ import annotations

import pytest

from compiler.backends import get_target


@pytest.fixture
def bench(load_bench):
    return load_bench("cpu_threads")


def test_a_row_per_size_and_thread_count(bench, capsys: pytest.CaptureFixture[str]) -> None:
    if (reason := get_target("cpu").unavailable_reason()) is not None:
        pytest.skip(reason)
    assert bench.main(["--sizes", "40", "--threads", "1,2", "--seconds", "0.05", "--rounds", "2"]) == 0
    out = capsys.readouterr().out
    assert "CPU quota" in out.splitlines()[0]
    rows = [line.split(maxsplit=2) for line in out.splitlines() if line.startswith("40³ ")]
    assert [row[1] for row in rows] == ["1", "2"]
    for row in rows:
        figures = [float(v) for v in row[2].replace(",", " ").split()]
        assert len(figures) == 4 and all(v > 0 for v in figures)  # two rounds of (median, sustained)


def test_bad_counts_exit_2(bench, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        bench.main(["--threads", "0"])
    assert exit_.value.code == 2 and "threads" in capsys.readouterr().err
