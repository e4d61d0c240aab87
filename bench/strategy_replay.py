"""Search strategies on brute-forced public tuning spaces, replayed as if the file were a device.

A T4 file (../shared/data/benchmark_hub/) holds every valid configuration of a GPU kernel's space and
its measured runtimes. The replay target turns it into our ``Space`` (the parameters and their values
as the file has them; a combination is valid when the file lists it, as the original restrictions
allowed) and serves its measurements as the objective (a configuration's time is the median of its
runtimes; one the file marks as failed to compile, to run, in time or correctly is a failed evaluation,
which counts; one it marks as breaking the restrictions, ``constraints``, is outside the space). Our
strategies run through the same code that tunes real kernels (``search.strategies``).

Quality at budget B = optimum / best time found among the first B distinct configurations evaluated
(0 when none ran). Each (strategy, seed) runs once to the largest budget and the smaller budgets read
the prefix of its evaluations: the strategies do not change course with the budget, so this is what a
run with the smaller budget would have done. Kernel Tuner's strategies run on the same files in its
simulation mode, in the same process, when any of them is asked for (``pip install -e '.[bench]'``);
only our strategies need nothing beyond warpmap.

Usage: ``python bench/strategy_replay.py --file F.json.gz [--strategies tpe,random,...]
[--hybrid switch=10,kernel=switch ...] [--budgets 25,50,100,200] [--seeds 10] [--warm-from G.json.gz,...]
[--json]``; ``default`` is the strategy ``warpmap tune`` uses, ``kt:NAME`` a Kernel Tuner strategy
(``kt:all`` for those in ``KT_DEFAULT``); each ``--hybrid`` adds the ``hybrid`` strategy with those
options (``Hybrid``'s fields), labelled ``hybrid(options)``, so a measured variant is one command.
``--warm-from`` plays a tuning cache that holds the same space tuned on other devices: our strategies
start with the best configuration of each file named (as ``warpmap tune`` starts from
``db.warm_start_schedules``), and their rows say so; Kernel Tuner's run cold.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna

from compiler.space import Constraint, Param, Space
from search.strategies import DEFAULT, Budget, Outcome, Strategy, get_strategy, search
from search.strategies.hybrid import Hybrid
from search.trial import TrialStatus

#: Kernel Tuner strategies run by ``kt:all`` (its population, annealing, local and model-free ones).
KT_DEFAULT = ("genetic_algorithm", "firefly_algorithm", "pso", "dual_annealing", "simulated_annealing",
              "basinhopping", "diff_evo", "greedy_ils", "random_sample")
OURS_DEFAULT = ("default", "hybrid", "tpe", "random")
_FAILED = {"compile": TrialStatus.COMPILE_ERROR, "runtime": TrialStatus.LAUNCH_ERROR, "timeout": TrialStatus.TIMEOUT,
           "correctness": TrialStatus.WRONG_RESULT}
#: T4's mark of a configuration that breaks the space's restrictions: outside the space, as a tuner's
#: restrictions would have kept it (it is never evaluated, so it costs no evaluation).
OUTSIDE = "constraints"


@dataclass(frozen=True)
class Replay:
    """A brute-forced space: parameter values, the valid configurations, their times (None: failed)."""

    name: str
    params: dict[str, tuple[Any, ...]]
    times: dict[tuple[Any, ...], float | None]
    statuses: dict[tuple[Any, ...], str]

    @property
    def optimum(self) -> float:
        return min(t for t in self.times.values() if t is not None)

    def space(self) -> Space[tuple[Any, ...]]:
        names = tuple(self.params)
        listed = self.times
        return Space(
            template=f"replay:{self.name}",
            params=tuple(Param(n, c) for n, c in self.params.items()),
            make=lambda values: tuple(values[n] for n in names),
            constraints=(Constraint("listed in the brute-forced space", lambda point: point in listed),),
        )

    def objective(self) -> Callable[[dict[str, Any]], Outcome]:
        names = tuple(self.params)

        def measure(values: dict[str, Any]) -> Outcome:
            point = tuple(values[n] for n in names)
            time_ms = self.times[point]
            if time_ms is None:
                return Outcome.failed(_FAILED.get(self.statuses[point], TrialStatus.LAUNCH_ERROR), self.statuses[point])
            return Outcome.ok(time_ms)

        return measure


def load(path: Path) -> Replay:
    """The replay of one T4 file (a bad file is a one-line error)."""
    with gzip.open(path, "rt") if path.suffix == ".gz" else path.open() as handle:
        data = json.load(handle)
    if "cache" in data and "results" not in data:
        return _load_cache(path, data)
    results = data["results"]
    names = list(results[0]["configuration"])
    values: dict[str, set[Any]] = {n: set() for n in names}
    times: dict[tuple[Any, ...], float | None] = {}
    statuses: dict[tuple[Any, ...], str] = {}
    for result in results:
        if result.get("invalidity") == OUTSIDE:
            continue
        config = result["configuration"]
        point = tuple(config[n] for n in names)
        for n in names:
            values[n].add(config[n])
        runtimes = result.get("times", {}).get("runtimes") or []
        ok = result.get("invalidity") == "correct" and runtimes
        times[point] = statistics.median(runtimes) if ok else None
        statuses[point] = result.get("invalidity", "unknown")
    if not any(t is not None for t in times.values()):
        raise ValueError(f"{path}: no configuration ran")
    params = {n: tuple(sorted(v)) for n, v in values.items()}
    return Replay(path.name.split(".")[0], params, times, statuses)


def _load_cache(path: Path, data: dict[str, Any]) -> Replay:
    """A Kernel Tuner cache file (its own format, older than T4): a time or an error marker per entry."""
    names = list(data["tune_params_keys"])
    params = {n: tuple(sorted(data["tune_params"][n])) for n in names}
    times: dict[tuple[Any, ...], float | None] = {}
    statuses: dict[tuple[Any, ...], str] = {}
    for entry in data["cache"].values():
        point = tuple(entry[n] for n in names)
        value = entry.get("time")
        ok = isinstance(value, int | float) and not isinstance(value, bool) and value > 0
        times[point] = float(value) if ok else None
        statuses[point] = "correct" if ok else "compile" if "Compil" in str(value) else "runtime"
    if not any(t is not None for t in times.values()):
        raise ValueError(f"{path}: no configuration ran")
    return Replay(path.name.split(".")[0], params, times, statuses)


def quality(replay: Replay, evaluated: list[float | None], budget: int) -> float:
    found = [t for t in evaluated[:budget] if t is not None]
    return replay.optimum / min(found) if found else 0.0


def run_ours(replay: Replay, strategy: str | Strategy, seed: int, trials: int,
             first: Sequence[Mapping[str, Any]] = ()) -> list[float | None]:
    """The times of the configurations one of our strategies (a name or a Strategy) evaluated, in order;
    ``first`` are evaluated first (a warm start)."""
    chosen = get_strategy(strategy) if isinstance(strategy, str) else strategy
    result = search(replay.space(), replay.objective(), chosen, Budget(trials=trials), seed=seed, first=first)
    return [t.value for t in result.trials]


def best_values(replay: Replay) -> dict[str, Any]:
    """The fastest configuration of a replay, by parameter name: what a cache keeps of a finished tuning."""
    ran = {point: t for point, t in replay.times.items() if t is not None}
    # Named before the zip: inside it, mypy infers min's result from zip's Iterable context and rejects the key.
    best = min(ran, key=ran.__getitem__)
    return dict(zip(replay.params, best, strict=True))


def hybrid_variant(options: str) -> Hybrid:
    """``Hybrid`` with ``key=value,...`` options (ints, decimals, ``true``/``false``, else strings), named by them."""
    fields: dict[str, Any] = {}
    for item in filter(None, (part.strip() for part in options.split(","))):
        key, sep, text = item.partition("=")
        if not sep:
            raise ValueError(f"--hybrid {options!r}: {item!r} is not key=value")
        value: Any = text
        if text in ("true", "false"):
            value = text == "true"
        elif text.lstrip("-").isdigit():
            value = int(text)
        elif text.lstrip("-").replace(".", "", 1).isdigit():
            value = float(text)
        fields[key.strip()] = value
    try:
        return Hybrid(name=f"hybrid({options})", **fields)
    except TypeError as error:  # an unknown field
        raise ValueError(f"--hybrid {options!r}: {error}") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--file", required=True, type=Path)
    parser.add_argument("--strategies", default=",".join(OURS_DEFAULT))
    parser.add_argument("--hybrid", action="append", default=[], metavar="KEY=VALUE,...",
                        help="add the hybrid strategy with these options (repeatable)")
    parser.add_argument("--budgets", default="25,50,100,200")
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--first-seed", type=int, default=0,
                        help="the seeds are this one and the next ones (default 0: seeds 0 to --seeds - 1)")
    parser.add_argument("--warm-from", default="", metavar="F.json.gz,...",
                        help="start our strategies with the best configuration of each of these files (a cache "
                             "that holds the same space tuned on other devices)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    try:
        budgets = sorted({int(b) for b in args.budgets.split(",")})
        if not budgets or budgets[0] <= 0 or args.seeds <= 0 or args.first_seed < 0:
            raise ValueError("budgets and seeds must be positive, and the first seed 0 or more")
        variants = [hybrid_variant(options) for options in args.hybrid]
        replay = load(args.file)
        warm = [best_values(load(Path(f))) for f in args.warm_from.split(",") if f.strip()]
    except (OSError, ValueError, KeyError, IndexError, json.JSONDecodeError) as error:
        print(f"strategy_replay: {error}", file=sys.stderr)
        return 2
    names = [s.strip() for s in args.strategies.split(",") if s.strip()]
    if "kt:all" in names:
        names = [n for n in names if n != "kt:all"] + [f"kt:{k}" for k in KT_DEFAULT]
    chosen: list[str | Strategy] = [*names, *variants]
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    runner = None
    if any(n.startswith("kt:") for n in names):
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        try:
            from replay_kernel_tuner import KernelTunerReplay
        except ImportError as error:
            print(f"strategy_replay: Kernel Tuner strategies need kernel_tuner ({error})", file=sys.stderr)
            return 2
        runner = KernelTunerReplay(replay)
    rows = []
    for strategy in chosen:
        name = strategy if isinstance(strategy, str) else strategy.name
        started = time.monotonic()
        per_seed = []
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            if name.startswith("kt:"):
                assert runner is not None
                per_seed.append(runner.run(name[3:], seed, budgets[-1]))
            else:
                try:
                    per_seed.append(run_ours(replay, strategy, seed, budgets[-1], warm))
                except ValueError as error:
                    print(f"strategy_replay: {error}", file=sys.stderr)
                    return 2
        seconds = (time.monotonic() - started) / args.seeds
        print(f"strategy_replay: {name}: {args.seeds} seeds, {seconds:.1f} s a run", file=sys.stderr, flush=True)
        label = f"default ({DEFAULT})" if name == "default" else name
        if warm and not name.startswith("kt:"):
            label += f", warm from {len(warm)} file{'s' if len(warm) != 1 else ''}"
        for budget in budgets:
            qualities = [round(quality(replay, evaluated, budget), 4) for evaluated in per_seed]
            rows.append({"strategy": label, "budget": budget, "median_quality": statistics.median(qualities),
                         "qualities": qualities, "seconds_per_run": round(seconds, 2)})
    if args.json:
        print(json.dumps({"file": args.file.name, "optimum": replay.optimum, "results": rows}))
    else:
        print_table(args.file.name, replay, rows, budgets)
    return 0


def print_table(file: str, replay: Replay, rows: list[dict[str, Any]], budgets: list[int]) -> None:
    valid = sum(1 for t in replay.times.values() if t is not None)
    print(f"{file}: {len(replay.times)} configurations, {valid} ran, optimum {replay.optimum:.4f} ms")
    print("median quality (worst seed) at each budget")
    header = f"{'strategy':<28}" + "".join(f"{b:>15}" for b in budgets) + f"{'s/run':>8}"
    print(header)
    by_strategy: dict[str, dict[int, dict[str, Any]]] = {}
    for row in rows:
        by_strategy.setdefault(row["strategy"], {})[row["budget"]] = row
    for name, cells in by_strategy.items():
        line = f"{name:<28}"
        for b in budgets:
            cell = cells[b]
            line += f"{cell['median_quality']:>8.3f} ({min(cell['qualities']):.2f})"
        print(line + f"{cells[budgets[-1]]['seconds_per_run']:>8.1f}")


if __name__ == "__main__":
    sys.exit(main())
