"""How fast each strategy finds the best schedule of real cpu spaces: the exhaustive best against each.

For each workload, every valid point of its level-2 cpu space is measured once through the tuner itself
(``search.tune.tune`` with the ``exhaustive`` strategy: built in the pool, checked against numpy, timed in
the measuring process). Those measurements then serve as the objective for each strategy, replayed from
the same table with ``--seeds`` seeds: a strategy is charged the trials it spends, and the seconds those
trials took when they were measured, until the best it has found is within ``--within`` (3%) of the
exhaustive best. Replaying one measured table keeps the comparison fair (every strategy sees the same
numbers) at the price of not re-measuring: the table's own noise is not in the figures.

One measurement of a point moves by more than the 3% window from run to run, so "the exhaustive best"
of single measurements is partly noise. Before strategies are charged, the ``--retime`` fastest points
(and any within ``--within`` of them) are timed again in ``--rounds`` interleaved rounds in the tuner's
measuring process (``search.measure.retime``, as a tuning re-times its best three); their pooled medians
replace their single measurements in the table, and the best of those is the goal's reference.

``--save FILE`` writes the exhaustive measurements (per workload: the space's fingerprint and each
point's choice indices, median and seconds) and ``--load FILE`` replays them instead of measuring, so
strategies can be compared again without minutes of measuring (refused if a space has changed since).

Usage: ``python bench/search_efficiency.py [--only softmax,sum,max,matmul,bmm,attention,skinny]
[--strategies default,tpe,random] [--seeds 5] [--within 0.03] [--retime 12] [--rounds 7]
[--save FILE | --load FILE] [--warm]``; ``--only`` keeps the workloads whose name starts with one of the words
given. ``--warm`` adds, for each strategy, the same replay warm-started from the best points of the other
workloads in the run that are nearby shapes of it (the same operator and every field but the sizes; each
taken as the nearest point of the space), its trials charged like any other: a warm start that
``warpmap tune`` does not make, since it measured no better than the template's default (README).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, TypeGuard

import optuna

from compiler.backends import get_target
from compiler.backends.timing import DEFAULT_PROTOCOL
from compiler.ops import get_operator, parse_spec
from search.isolation import IsolatedProcess, Returned
from search.measure import BuildRequest, MeasureRequest, build_candidate, retime
from search.strategies import Budget, Outcome, search
from search.strategies.pool import values_of
from search.trial import TrialStatus
from search.tune import Trial, measuring_environment, tune

#: Three memory-bound row-wise spaces (40-48 points) and four compute-bound matmul spaces, where
#: strategies differ: square, batched, BERT-base's attention scores (Q times K transposed, 12 heads) and a
#: tall, narrow one; 1,728, 624, 1,728 and 1,416 points on an AVX-512 host, 3 to 15 minutes each to
#: measure whole with two cores.
WORKLOADS = {
    "softmax 4096x1000": {"op": "softmax", "rows": 4096, "cols": 1000},
    "sum 4096x1000 axis 1": {"op": "reduce", "shape": [4096, 1000], "axis": 1, "kind": "sum"},
    "max 4096x1000 axis 0": {"op": "reduce", "shape": [4096, 1000], "axis": 0, "kind": "max"},
    "matmul 128x128x128": {"op": "matmul", "m": 128, "n": 128, "k": 128},
    "bmm 8x96x96x96": {"op": "matmul", "batch": 8, "m": 96, "n": 96, "k": 96},
    "attention 12x128x128x64": {"op": "matmul", "batch": 12, "m": 128, "n": 128, "k": 64, "layout_b": "col"},
    "skinny 256x64x128": {"op": "matmul", "m": 256, "n": 64, "k": 128},
}


#: A measured table: a point's choice indices (``Space.key``) -> (median ms or None, seconds taken).
Table = dict[tuple[int, ...], tuple[float | None, float]]


def _space(spec: Any) -> Any:
    return get_operator(spec.op).space(spec, get_target("cpu").device(), 2)


def measure_all(spec: Any) -> tuple[Table, int]:
    """Every valid point's median (ms, None when it failed) and the seconds its trial took."""
    target = get_target("cpu")
    space = _space(spec)
    count = len(space.candidates())
    table: Table = {}
    last = [time.perf_counter()]

    def sink(trial: Trial) -> None:
        now = time.perf_counter()
        table[space.key(dict(trial.values))] = (trial.latency_ms, now - last[0])
        last[0] = now

    tune(spec, target, strategy="exhaustive", budget=Budget(trials=count), sink=sink)
    return table, count


def retime_top(spec: Any, table: Table, top: int, rounds: int, within: float) -> tuple[Table, int]:
    """The table with its ``top`` fastest points (and those within ``within`` of the fastest) re-timed
    interleaved; also how many were re-timed. The seconds a point cost stay those of its first trial."""
    target = get_target("cpu")
    space = _space(spec)
    ranked = sorted((value, key) for key, (value, _) in table.items() if value is not None)
    if not ranked:
        return table, 0
    cut = ranked[0][0] * (1 + within) ** 2
    chosen = [key for i, (value, key) in enumerate(ranked) if i < top or value <= cut]
    data = spec.model_dump(mode="json")
    requests = []
    for key in chosen:
        built = build_candidate(BuildRequest(target, data, 2, values_of(space, key)))
        if built.artifact is None:
            raise RuntimeError(f"a point measured before no longer builds: {built.message}")
        requests.append(MeasureRequest(target, data, built.artifact, DEFAULT_PROTOCOL))
    with IsolatedProcess(environment=measuring_environment()) as child:
        outcome = child.call(retime, requests, rounds, timeout_s=600.0)
    if not isinstance(outcome, Returned):
        raise RuntimeError(f"re-timing failed: {outcome}")
    retimed = dict(table)
    for key, samples in zip(chosen, outcome.value, strict=True):
        retimed[key] = (samples.median_ns / 1e6, table[key][1])
    return retimed, len(chosen)


class _Reached(Exception):  # noqa: N818 (a signal, not an error)
    """The strategy came within the goal: the replay stops there."""


def save(path: Path, tables: dict[str, tuple[str, Table, int]]) -> None:
    """Write each workload's space fingerprint and measured table as JSON."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({name: {"fingerprint": fingerprint, "count": count,
                                       "points": [[list(k), v, s] for k, (v, s) in table.items()]}
                                for name, (fingerprint, table, count) in tables.items()}))


def load(path: Path, name: str, spec: Any) -> tuple[Table, int]:
    """The saved table of one workload; a changed space (another fingerprint) is refused."""
    stored = json.loads(path.read_text())
    if name not in stored:
        raise ValueError(f"{path} has no measurements of {name!r}")
    entry = stored[name]
    if entry["fingerprint"] != _space(spec).fingerprint:
        raise ValueError(f"{path}: the space of {name!r} has changed since it was measured")
    return {tuple(k): (v, s) for k, v, s in entry["points"]}, int(entry["count"])


def best_values(spec: Any, table: Table) -> dict[str, Any]:
    """The fastest point of a measured table, as parameter values: what the cache keeps of a tuning."""
    space = _space(spec)
    measured = {k: v for k, (v, _) in table.items() if v is not None}
    return values_of(space, min(measured, key=measured.__getitem__))


def default_standing(spec: Any, table: Table) -> str:
    """Where the template's default schedule, every strategy's first trial, stands in a measured table."""
    space = _space(spec)
    values = space.default_values()
    value = table.get(space.key(values), (None, 0.0))[0] if values is not None else None
    if value is None:
        return "the template's default was not measured"
    measured = sorted(v for v, _ in table.values() if v is not None)
    rank = 1 + sum(v < value for v in measured)
    return f"the template's default at {value / measured[0]:.2f}x the best, {rank} of {len(measured)} points"


def replay(spec: Any, table: Table, strategy: str, seed: int, goal: float,
           first: list[dict[str, Any]] | None = None) -> tuple[int, float]:
    """Trials and measured seconds ``strategy`` spends until its best is within ``goal`` ms, started from
    ``first`` (a warm start: evaluations like any other, charged as such)."""
    space = _space(spec)
    trials, spent, best = 0, 0.0, float("inf")
    done: tuple[int, float] | None = None

    def objective(values: dict[str, Any]) -> Outcome:
        nonlocal trials, spent, best, done
        value, seconds = table[space.key(values)]
        trials += 1
        spent += seconds
        if value is not None:
            best = min(best, value)
        if best <= goal:
            done = (trials, spent)
            raise _Reached
        return Outcome.ok(value) if value is not None else Outcome.failed(TrialStatus.LAUNCH_ERROR)

    with contextlib.suppress(_Reached):  # the goal reached: the replay ends there
        search(space, objective, strategy, Budget(trials=len(table)), seed=seed, first=first or ())
    return done if done is not None else (len(table), spent)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="workloads whose name starts with one of these words")
    parser.add_argument("--strategies", default="default,tpe,random")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--within", type=float, default=0.03)
    parser.add_argument("--retime", type=int, default=12, help="re-time this many of the fastest points (0: none)")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds of the re-timing")
    files = parser.add_mutually_exclusive_group()
    files.add_argument("--save", type=Path, help="write the exhaustive measurements to this JSON file")
    files.add_argument("--load", type=Path, help="replay measurements saved with --save instead of measuring")
    parser.add_argument("--warm", action="store_true",
                        help="also run each strategy warm-started from the best point of every other workload of "
                             "the same operator in this run, as a cache holding them would start it")
    args = parser.parse_args(argv)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    reason = get_target("cpu").unavailable_reason()
    if reason is not None:
        print(f"search_efficiency: {reason}", file=sys.stderr)
        return 2
    words = [w.strip() for w in args.only.split(",") if w.strip()]
    chosen = {name: data for name, data in WORKLOADS.items() if not words or name.split()[0] in words}
    if not chosen:
        print(f"search_efficiency: --only {args.only!r} names no workload; known: "
              f"{', '.join(sorted({n.split()[0] for n in WORKLOADS}))}", file=sys.stderr)
        return 2
    saved: dict[str, tuple[str, Table, int]] = {}
    source = f"measurements from {args.load}" if args.load is not None else "measured now"
    print(f"# {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, load {os.getloadavg()[0]:.2f}, {source}; "
          f"within {args.within:.0%} of the exhaustive best, median of {args.seeds} seeds [min, max]")
    print("| workload | valid points | exhaustive best ms (s to measure all) | strategy | trials | of the space "
          "| measured s |")
    print("| --- | ---: | ---: | --- | ---: | ---: | ---: |")
    tables: dict[str, tuple[Any, Table, int]] = {}
    for name, data in chosen.items():
        spec = parse_spec(data)
        if args.load is not None:
            try:
                table, count = load(args.load, name, spec)
            except (OSError, ValueError, KeyError, json.JSONDecodeError) as error:
                print(f"search_efficiency: {error}", file=sys.stderr)
                return 2
        else:
            table, count = measure_all(spec)
            if args.retime > 0:
                table, retimed = retime_top(spec, table, args.retime, args.rounds, args.within)
                print(f"# {name}: {retimed} fastest points re-timed in {args.rounds} interleaved rounds",
                      flush=True)
            saved[name] = (_space(spec).fingerprint, table, count)
            if args.save is not None:
                save(args.save, saved)
        tables[name] = (spec, table, count)
        print(f"# {name}: {default_standing(spec, table)}", flush=True)
        if not args.warm:  # a warm start needs every table first; without it, each row as soon as it can be
            _print_rows(name, spec, table, count, args, [])
    if args.warm:
        for name, (spec, table, count) in tables.items():
            _print_rows(name, spec, table, count, args, _warm_start(name, spec, tables))
    return 0


#: Integer spec fields that name a place, not a size: a reduction's axis.
NOT_SIZES = frozenset({"axis", "axes"})


def shape_distance(a: dict[str, Any], b: dict[str, Any]) -> float | None:
    """How far apart two specs of one operator are: the sum of |log2| of the ratios of their sizes
    (positive integer fields, and lists of them of one length: a reduction's shape); None when any
    other field (dtype, layout, an axis, a flag) differs, since a schedule does not carry over."""
    distance = 0.0
    for name in a.keys() | b.keys():
        x, y = a.get(name), b.get(name)
        if name in NOT_SIZES:
            if x != y:
                return None
        elif _sizes(x) and _sizes(y) and len(x) == len(y):
            distance += sum(abs(math.log2(p / q)) for p, q in zip(x, y, strict=True))
        elif _size(x) and _size(y):
            distance += abs(math.log2(x / y))
        elif x != y or type(x) is not type(y):
            return None
    return distance


def _sizes(values: Any) -> TypeGuard[list[int]]:
    return isinstance(values, list) and bool(values) and all(_size(v) for v in values)


def _size(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _warm_start(name: str, spec: Any, tables: dict[str, tuple[Any, Table, int]]) -> list[dict[str, Any]]:
    """The best points of the other workloads that count as nearby shapes of this one: the same operator,
    every field but the sizes equal (``shape_distance``), the nearest four first."""
    near = []
    for other_name, (other, table, _) in tables.items():
        distance = shape_distance(spec.model_dump(mode="json"), other.model_dump(mode="json"))
        if other_name != name and other.op == spec.op and distance is not None:
            near.append((distance, best_values(other, table)))
    return [values for _, values in sorted(near, key=lambda pair: pair[0])[:4]]


def _print_rows(name: str, spec: Any, table: Table, count: int, args: argparse.Namespace,
                hints: list[dict[str, Any]]) -> None:
    best = min(v for v, _ in table.values() if v is not None)
    total = sum(s for _, s in table.values())
    for strategy in args.strategies.split(","):
        for first in ([], hints) if hints else ([],):
            runs = [replay(spec, table, strategy, seed, best * (1 + args.within), first)
                    for seed in range(args.seeds)]
            trials = [t for t, _ in runs]
            seconds = [s for _, s in runs]
            label = f"{strategy}, warm from {len(first)}" if first else strategy
            print(f"| {name} | {count} | {best:.4g} ({total:.0f} s) | {label} | {statistics.median(trials):g} "
                  f"[{min(trials)}, {max(trials)}] | {statistics.median(trials) / count:.0%} | "
                  f"{statistics.median(seconds):.1f} |", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
