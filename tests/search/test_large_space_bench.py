"""``bench/large_space.py``: a seeded synthetic space as a replay target, the default strategy timed on
it, a table printed; bad options refused in one line with exit status 2."""

from __future__ import annotations

import pytest


@pytest.fixture
def bench(load_bench):
    return load_bench("large_space")


def test_the_synthetic_space_is_seeded_and_keeps_the_share_asked(bench) -> None:
    space = bench.synthetic(0.25, (6, 5, 4))
    again = bench.synthetic(0.25, (6, 5, 4))
    assert space.times == again.times and 15 <= len(space.times) <= 45  # about a quarter of 120
    assert space.params == {"p0": tuple(range(6)), "p1": tuple(range(5)), "p2": tuple(range(4))}
    assert all(t is not None and t > 0 for t in space.times.values())
    assert bench.synthetic(0.25, (6, 5, 4), seed=2).times != space.times


def test_it_prints_a_row_per_seed(bench, capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main(["--sizes", "6,5,4", "--keep", "0.5", "--seeds", "2"]) == 0
    out = capsys.readouterr().out
    assert "120 combinations (enumerated)" in out
    rows = [line for line in out.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert len(rows) == 2 and all(0 < float(row.split("|")[3]) <= 1 for row in rows)


@pytest.mark.parametrize(("argv", "message"), [(["--keep", "0"], "--keep must be in (0, 1]"),
                                               (["--sizes", "3,x"], "--sizes must be positive integers")])
def test_bad_options_are_one_line_and_exit_2(bench, argv, message, capsys) -> None:
    assert bench.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
