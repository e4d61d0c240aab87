"""``bench/strategy_replay.py``'s ``--hybrid``: a measured variant of the hybrid strategy is one option
away, its fields parsed by type and a bad one refused in one line with exit status 2."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    spec = importlib.util.spec_from_file_location("strategy_replay", ROOT / "bench" / "strategy_replay.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_a_hybrid_variant_takes_typed_fields_and_is_named_by_them() -> None:
    variant = _bench().hybrid_variant("kernel=additive, additive_after=50,spread_centres=true")
    assert (variant.kernel, variant.additive_after, variant.spread_centres) == ("additive", 50, True)
    assert variant.name == "hybrid(kernel=additive, additive_after=50,spread_centres=true)"
    assert _bench().hybrid_variant("").kernel == "switch"  # no options: the default's


@pytest.mark.parametrize(("options", "message"), [("bogus=1", "bogus"), ("kernel=gp", "unknown kernel 'gp'"),
                                                  ("switch", "'switch' is not key=value")])
def test_a_bad_variant_is_refused_before_any_file_is_read(options, message, capsys) -> None:
    assert _bench().main(["--file", "missing.json.gz", "--hybrid", options]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_a_t4_file_keeps_failures_as_evaluations_and_leaves_restricted_points_out(tmp_path) -> None:
    import json

    from search.trial import TrialStatus

    def result(x: int, y: int, invalidity: str, runtimes: list[float]) -> dict:
        return {"configuration": {"x": x, "y": y}, "invalidity": invalidity, "times": {"runtimes": runtimes}}

    path = tmp_path / "tiny_T4.json"
    path.write_text(json.dumps({"results": [
        result(1, 1, "correct", [2.0, 3.0, 4.0]), result(1, 2, "correct", [1.5]), result(2, 1, "timeout", []),
        result(2, 2, "correctness", [1.0]), result(3, 1, "constraints", []), result(3, 2, "compile", [])]}))
    replay = _bench().load(path)
    assert set(replay.times) == {(1, 1), (1, 2), (2, 1), (2, 2), (3, 2)}  # (3, 1) breaks a restriction
    assert replay.params == {"x": (1, 2, 3), "y": (1, 2)} and replay.optimum == 1.5
    assert replay.times[(1, 1)] == 3.0 and replay.times[(2, 2)] is None  # a wrong result's time is no time
    measure = replay.objective()
    assert measure({"x": 2, "y": 1}).status is TrialStatus.TIMEOUT
    assert measure({"x": 2, "y": 2}).status is TrialStatus.WRONG_RESULT
    assert not replay.space().is_valid({"x": 3, "y": 1}) and replay.space().is_valid({"x": 3, "y": 2})
    path.write_text(json.dumps({"results": [result(1, 1, "constraints", []), result(1, 2, "compile", [])]}))
    with pytest.raises(ValueError, match="no configuration ran"):
        _bench().load(path)


def test_warm_from_starts_our_strategies_at_the_other_files_best(tmp_path, capsys) -> None:
    import json

    def write(name: str, times: dict[tuple[int, int], float]) -> Path:
        path = tmp_path / f"{name}_T4.json"
        path.write_text(json.dumps({"results": [
            {"configuration": {"x": x, "y": y}, "invalidity": "correct", "times": {"runtimes": [t]}}
            for (x, y), t in times.items()]}))
        return path

    grid = [(x, y) for x in range(1, 9) for y in range(1, 9)]
    here = write("here", {p: 10.0 + p[0] + p[1] for p in grid} | {(7, 3): 1.0})
    other = write("other", {p: 5.0 + p[0] for p in grid} | {(7, 3): 2.0})
    bench = _bench()
    assert bench.best_values(bench.load(other)) == {"x": 7, "y": 3}
    assert bench.main(["--file", str(here), "--strategies", "default,random", "--budgets", "2", "--seeds", "3",
                       "--warm-from", str(other), "--json"]) == 0
    rows = {r["strategy"]: r for r in json.loads(capsys.readouterr().out)["results"]}
    # The default schedule (none here), then the other file's best: the optimum, at the first evaluation.
    assert rows["default (hybrid), warm from 1 file"]["qualities"] == [1.0, 1.0, 1.0]
    assert rows["random, warm from 1 file"]["qualities"] == [1.0, 1.0, 1.0]
    assert bench.main(["--file", str(here), "--warm-from", str(tmp_path / "missing.json")]) == 2
    assert "missing.json" in capsys.readouterr().err


def test_first_seed_runs_later_seeds_alone(tmp_path, capsys) -> None:
    import json

    path = tmp_path / "grid_T4.json"
    path.write_text(json.dumps({"results": [
        {"configuration": {"x": x, "y": y}, "invalidity": "correct",
         "times": {"runtimes": [1.0 + (x * 7 + y * 3) % 11]}} for x in range(1, 9) for y in range(1, 9)]}))
    bench = _bench()

    def qualities(*extra: str) -> list[float]:
        assert bench.main(["--file", str(path), "--strategies", "random", "--budgets", "3", "--json", *extra]) == 0
        return json.loads(capsys.readouterr().out)["results"][0]["qualities"]

    four = qualities("--seeds", "4")
    assert four[:2] != four[2:]  # so that the check below can tell the seeds apart
    assert qualities("--seeds", "2", "--first-seed", "2") == four[2:]
    assert bench.main(["--file", str(path), "--first-seed", "-1"]) == 2
    assert "first seed" in capsys.readouterr().err
