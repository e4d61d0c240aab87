"""``bench/search_efficiency.py``'s re-timing: the fastest points of a measured table are timed again
in the measuring process and their medians replace the single measurements; the rest stay."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    spec = importlib.util.spec_from_file_location("search_efficiency", ROOT / "bench" / "search_efficiency.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_fastest_points_are_retimed_and_the_rest_kept() -> None:
    from compiler.backends import get_target
    from compiler.ops import parse_spec

    if get_target("cpu").unavailable_reason() is not None:
        pytest.skip("no host compiler")
    bench = _bench()
    spec = parse_spec({"op": "reduce", "shape": [64, 50], "axis": 1, "kind": "sum"})
    keys = [bench._space(spec).key(v) for v in bench._space(spec).valid_values()[:4]]
    # Made-up single measurements: two "fast" points (one far too fast to be real), two slow ones.
    table = {keys[0]: (1e-9, 0.5), keys[1]: (2e-9, 0.5), keys[2]: (50.0, 0.5), keys[3]: (None, 0.5)}
    retimed, count = bench.retime_top(spec, table, top=2, rounds=2, within=0.03)
    assert count == 2
    for key in keys[:2]:
        value, seconds = retimed[key]
        assert value is not None and value > 1e-6 and seconds == 0.5  # a real median, in ms
    assert retimed[keys[2]] == (50.0, 0.5) and retimed[keys[3]] == (None, 0.5)


def test_only_selects_workloads_by_first_word_and_refuses_an_unknown_one(capsys: pytest.CaptureFixture[str]) -> None:
    from compiler.backends import get_target

    if get_target("cpu").unavailable_reason() is not None:
        pytest.skip("no host compiler")
    bench = _bench()
    assert bench.main(["--only", "gemm"]) == 2
    known = "attention, bmm, matmul, max, skinny, softmax, sum"
    assert f"--only 'gemm' names no workload; known: {known}" in capsys.readouterr().err
    # A saved table replays only the workloads chosen (the others are not looked for in the file).
    space = bench._space(bench.parse_spec(bench.WORKLOADS["matmul 128x128x128"]))
    tables = sorted((ROOT / "bench" / "data").glob("search_efficiency_matmul_*.json"))
    assert len(tables) >= 2
    saved = next((t for t in tables if json.loads(t.read_text())["matmul 128x128x128"]["fingerprint"]
                  == space.fingerprint), None)
    if saved is None:
        pytest.skip("every saved matmul table is of another host's space (its f32 lanes and caches)")
    assert bench.main(["--only", "matmul", "--load", str(saved), "--strategies", "random", "--seeds", "2"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| matmul")]
    assert len(rows) == 1 and "| 1728 |" in rows[0]
    assert re.search(r"^# matmul 128x128x128: the template's default at \d+\.\d\dx the best, \d+ of 1728 points$",
                     out, re.MULTILINE)


def test_a_warm_start_takes_the_nearest_shapes_a_cache_would() -> None:
    from compiler.ops import parse_spec

    bench = _bench()

    def table(spec, fastest: int) -> dict:
        keys = [bench._space(spec).key(v) for v in bench._space(spec).valid_values()[:3]]
        return {key: (1.0 if i == fastest else 2.0, 0.1) for i, key in enumerate(keys)}

    specs = {"here": {"op": "reduce", "shape": [64, 50], "axis": 1, "kind": "sum"},
             "near": {"op": "reduce", "shape": [64, 100], "axis": 1, "kind": "sum"},
             "far": {"op": "reduce", "shape": [512, 400], "axis": 1, "kind": "sum"},
             "other kind": {"op": "reduce", "shape": [64, 50], "axis": 1, "kind": "max"},
             "other op": {"op": "softmax", "rows": 64, "cols": 50}}
    tables = {}
    for i, (name, data) in enumerate(specs.items()):
        spec = parse_spec(data)
        tables[name] = (spec, table(spec, i % 3), 3)
    hints = bench._warm_start("here", tables["here"][0], tables)
    near, far = (bench.best_values(tables[n][0], tables[n][1]) for n in ("near", "far"))
    assert hints == [near, far]  # nearest first; another kind or operator is not a shape of this one


def test_shape_distance_adds_log_ratios_of_sizes_and_refuses_other_kinds() -> None:
    distance = _bench().shape_distance
    base = {"m": 512, "n": 512, "k": 128, "dtype": "float16"}
    assert distance(base, base) == 0.0
    assert distance(base, {**base, "m": 1024, "k": 32}) == 3.0
    assert distance(base, {**base, "dtype": "float32"}) is None
    assert distance(base, {**base, "trans": True}) is None  # a field only one has
    assert distance({"x": True}, {"x": 1}) is None  # a flag is not a size
    reduce = {"op": "reduce", "shape": [64, 50], "axis": 1, "kind": "sum"}
    assert distance(reduce, {**reduce, "shape": [128, 25]}) == 2.0
    assert distance(reduce, {**reduce, "shape": [64, 50, 2]}) is None  # another rank
    assert distance(reduce, {**reduce, "axis": 0}) is None  # a place, not a size
    assert distance(reduce, {**reduce, "axis": 2}) is None
