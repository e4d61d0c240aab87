"""``bench/roofline.py``: the roofs table has a row per footprint with a positive rate and a ridge
point; unknown sections and bad counts are refused by argparse (exit status 2)."""

from __future__ import annotations

import pytest

from compiler.backends import get_target


@pytest.fixture
def bench(load_bench):
    return load_bench("roofline")


def test_the_roofs_table_has_a_rate_and_a_ridge_per_footprint(bench, capsys: pytest.CaptureFixture[str]) -> None:
    if (reason := get_target("cpu").unavailable_reason()) is not None:
        pytest.skip(reason)
    bench.main(["--only", "hierarchy", "--rounds", "1"])
    out = capsys.readouterr().out
    assert "FP32 peak, register FMAs on" in out
    rows = [line.split() for line in out.splitlines() if line[:1].isdigit()]
    assert len(rows) == len(bench.FOOTPRINTS)
    for row in rows:
        # "16.0 KiB  381.3 [381.3, 381.3]  1.2  0.48 s first": size, rate, [min, max], ridge, seconds.
        rate, ridge, seconds = float(row[2]), float(row[5]), float(row[6])
        assert rate > 0 and ridge > 0 and seconds > 0 and row[7:9] == ["s", "first"]


@pytest.mark.parametrize(("argv", "message"), [(["--only", "tuned,speed"], "unknown section(s) speed"),
                                               (["--rounds", "0"], "--rounds and --trials must be at least 1")])
def test_bad_options_exit_2(bench, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        bench.main(argv)
    assert exit_.value.code == 2 and message in capsys.readouterr().err
