"""The cpu templates against numpy (OpenBLAS) and torch (CPU), side by side in one run.

Sections (``--only matmul,...``; all by default):

- ``matmul``: the cpu matmul template (``compiler.ops.cpu.matmul``) at 256, 512, 1024, 2048 square and
  the BERT-base shapes (M = 128; N, K in 768/3072), float32, row-major, all cores. "tuned" is the best
  of a quick sweep of the level-2 space (the default schedule, the tiles one parameter away from it
  and ``--sweep`` seeded samples, each timed briefly; the search engine replaces this sweep when it
  lands), "default" is
  ``default_schedule``. Every contender is then timed in ``--rounds`` interleaved rounds, in a
  shuffled order each round, under one protocol (``compiler.backends.timing``): warm-up by time, at
  least N repetitions or about T ms. Our figure times the whole program (packing launches included),
  each launch compiled and loaded by ``compiler.backends.cpu``. The table gives GFLOP/s (2mnk per
  second) as the median over all samples with p20/p80, the ratio to numpy's median, and the fraction
  of the machine's FP32 peak.

The peak is shown twice: the estimate of ``detect_cpu().peak_gflops_f32`` (FMA pipes x lanes x 2 x
cores x the clock the OS reports, which may be far below the clock under load), and a measured one:
a kernel of independent register FMAs in the same IR on all cores.

OpenBLAS is run as it runs by default here: OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are removed from
this process's environment before numpy loads (the kernel it picks is printed, from threadpoolctl
when installed). Each contender starts after a pause longer than either library's idle threads spin
(OpenBLAS about 2^28 cycles, libgomp its GOMP_SPINCOUNT), so neither spins against the other; within a
contender's repetitions its threads stay as warm as that library leaves them. OMP_WAIT_POLICY is left
to the environment: with PASSIVE our second thread woke too late to help at 512^3 on a loaded machine
(207 GFLOP/s, one core's worth, against 346 with libgomp's default, December 2026).

- ``packing``: where the default schedule packs A and B (by launches of their own, B inside the
  compute launch, or both: one launch), the rest of its tile kept, on small, tall, wide and batched
  shapes, interleaved with numpy; each variant's speed against the default's choice.
- ``conv2d``: ``bench/cpu_conv.py`` (ResNet-50 layers against torch and numpy im2col + matmul);
- ``rowwise``: ``bench/cpu_rowwise.py`` (softmax 4096x1000 and reductions against numpy and torch).
  Both run in this process after the matmul section, with ``--rounds``; each prints its own table and
  protocol (their options: run the scripts themselves).

Usage: ``python bench/cpu_vs_numpy.py [--only matmul,packing,conv2d,rowwise] [--rounds 5] [--sweep 12]
[--shapes 1024,bert]``
"""

from __future__ import annotations

import os

# Before numpy loads OpenBLAS: let it pick its kernel for this machine; libgomp reads the policy once.
os.environ.pop("OPENBLAS_CORETYPE", None)
os.environ.pop("OPENBLAS_L2_SIZE", None)
# OpenMP threads bound one to a CPU, as in a tuning's measuring process (search.tune.MEASURING_ENVIRONMENT):
# unbound, another process busy on one core could leave two of a kernel's threads on the other core,
# each spinning for its peer, and every call waited out scheduler ticks (README, "Measured", a busy host).
os.environ.setdefault("OMP_PROC_BIND", "true")

import argparse
import dataclasses
import datetime
import functools
import importlib
import random
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import numpy as np

from compiler.backends import cpu
from compiler.backends.cpu_peak import measured_peak_gflops
from compiler.backends.cpu_target import CpuTarget
from compiler.backends.timing import Protocol, measure, percentile
from compiler.cpu_device import CpuDevice, detect_cpu
from compiler.ops.cpu import matmul
from compiler.ops.cpu.gemm import GemmTile
from compiler.ops.matmul_spec import MatmulSpec
from compiler.program import Program
from compiler.space import schedule_values

Call = Callable[[], object]
#: OpenBLAS's idle threads spin about 2^28 cycles (~0.07 s) after a call before they sleep.
PAUSE_S = 0.2
SHAPES = {
    "256": (256, 256, 256), "512": (512, 512, 512), "1024": (1024, 1024, 1024), "2048": (2048, 2048, 2048),
    "bert-qkv": (128, 768, 768), "bert-ffn1": (128, 3072, 768), "bert-ffn2": (128, 768, 3072),
}


@dataclass(frozen=True)
class Context:
    device: CpuDevice
    config: cpu.CpuConfig
    rounds: int
    sweep: int
    protocol: Protocol
    peak: float
    estimate: float
    #: The clock samples are taken with: wall (monotonic) or this thread's CPU time (one thread only).
    clock: Callable[[], int] = time.perf_counter_ns
    #: Trials of ``warpmap tune``'s search per shape (0: no "tune" row).
    tune_trials: int = 0


def _tuned_program(spec: MatmulSpec, trials: int) -> tuple[Program, str, float]:
    """What ``warpmap tune`` returns for ``spec`` on the cpu (its default strategy, ``trials`` candidates,
    level 2): the program, its schedule in brief and the seconds the tuning took."""
    from compiler.backends import get_target
    from search.strategies import Budget
    from search.tune import tune

    start = time.perf_counter()
    result = tune(spec, get_target("cpu"), budget=Budget(trials=trials))
    return result.artifact.program, _tile_text(GemmTile(**{k: v for k, v in result.values.items()
                                                           if k in GemmTile.__dataclass_fields__})) + (
        " B-in-block" if result.values.get("pack_b_inside") else ""), time.perf_counter() - start


def _try_torch() -> ModuleType | None:
    try:
        import torch
    except ImportError:
        return None
    return torch


def _limit_peers(threads: int) -> None:
    """numpy's BLAS and torch on ``threads`` threads too (needs threadpoolctl for numpy)."""
    torch = _try_torch()
    if torch is not None:
        torch.set_num_threads(threads)
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        print("cpu_vs_numpy: --threads needs threadpoolctl to limit numpy's BLAS", file=sys.stderr)
        raise SystemExit(2) from None
    threadpool_limits(threads)


def blas_kernel() -> str:
    """Which OpenBLAS numpy runs, and its kernel (threadpoolctl's view), or why that is unknown."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "unknown (threadpoolctl not installed)"
    np.ones((2, 2)) @ np.ones((2, 2))
    blas = [i for i in threadpool_info() if i.get("user_api") == "blas"]
    return "; ".join(f"{i.get('internal_api')} {i.get('version')} {i.get('architecture')} "
                     f"{i.get('num_threads')} threads" for i in blas) or "no BLAS found"


def program_call(program: Program, buffers: dict[str, np.ndarray], config: cpu.CpuConfig) -> Call:
    """A call running every launch of ``program`` in order on ``buffers``, as the tuner times it."""
    target = CpuTarget(config=config)
    return target.call(target.build(program), buffers)


def _timed(calls: dict[str, Call], rounds: int, protocol: Protocol,
           clock: Callable[[], int]) -> dict[str, list[int]]:
    """Samples per contender over interleaved rounds, a shuffled order per round, a pause before each."""
    samples: dict[str, list[int]] = {name: [] for name in calls}
    order = list(calls)
    shuffle = random.Random(0)
    for _ in range(rounds):
        shuffle.shuffle(order)
        for name in order:
            time.sleep(PAUSE_S)
            samples[name] += measure(calls[name], protocol, clock=clock).samples_ns
    return samples


def _rates(flops: float, samples_ns: list[int]) -> tuple[float, float, float]:
    """GFLOP/s median, p20, p80 (p20 of the rate is the p80 of the time)."""
    return (flops / percentile(samples_ns, 50), flops / percentile(samples_ns, 80),
            flops / percentile(samples_ns, 20))


def measured_peak(ctx: Context) -> float:
    """GFLOP/s of the cpu target's peak kernel (``compiler.backends.cpu_peak``: register FMAs only, on
    every core), from its fastest sample under this bench's clock."""
    return measured_peak_gflops(ctx.config, ctx.device, protocol=Protocol(warmup_ms=20, min_repetitions=50,
                                                                          target_ms=200), clock=ctx.clock)


def neighbours(spec: MatmulSpec, device: CpuDevice, tile: matmul.CpuMatmulSchedule) -> list[matmul.CpuMatmulSchedule]:
    """The level-2 tiles that differ from ``tile`` in one parameter (a one-step local search)."""
    found = matmul.space(spec, device, 2)
    values = schedule_values(tile)
    out = []
    for param in found.params:
        for choice in param.choices:
            if choice == values[param.name]:
                continue
            candidate = type(tile)(**{**values, param.name: choice})
            if found.violation(candidate) is None:
                out.append(candidate)
    return out


def _sweep(spec: MatmulSpec, ctx: Context, a: np.ndarray, b: np.ndarray) -> tuple[GemmTile, GemmTile, float]:
    """(tuned, default, seconds spent): the fastest of the default, its level-2 neighbours and
    ``ctx.sweep`` seeded samples of the level-2 space, each timed briefly."""
    start = time.perf_counter()
    default = matmul.default_schedule(spec, ctx.device)
    candidates = [default, *neighbours(spec, ctx.device, default),
                  *matmul.space(spec, ctx.device, 2).sample(ctx.sweep, seed=1)]
    quick = Protocol(warmup_ms=10, min_repetitions=3, target_ms=30)
    timed: dict[GemmTile, list[float]] = {}
    calls = {tile: _matmul_call(spec, tile, ctx, a, b) for tile in dict.fromkeys(candidates)}
    for _ in range(2):  # two passes, so a burst of load on the machine does not decide alone
        for tile, call in calls.items():
            time.sleep(PAUSE_S / 4)
            timed.setdefault(tile, []).append(measure(call, quick, clock=ctx.clock).median_ns)
    best = min(timed, key=lambda t: min(timed[t]))
    return best, default, time.perf_counter() - start


def _matmul_call(spec: MatmulSpec, tile: GemmTile, ctx: Context, a: np.ndarray, b: np.ndarray) -> Call:
    return _program_checked(spec, matmul.build(spec, tile), ctx, a, b)


def _program_checked(spec: MatmulSpec, program: Program, ctx: Context, a: np.ndarray, b: np.ndarray) -> Call:
    """The call of ``program`` on ``a`` and ``b``, run once and checked against numpy first."""
    buffers = {"a": a, "b": b, "c": np.empty(spec.c_shape, np.float32)}
    call = program_call(program, buffers, ctx.config)
    call()
    expected = np.matmul(a.astype(np.float64), b)  # row-major operands, (batch, m, k) @ (batch, k, n)
    error = np.linalg.norm(buffers["c"] - expected) / np.linalg.norm(expected)
    if not error < 1e-5:
        raise RuntimeError(f"{program.name}: relative error {error:.3g} at {spec}")
    return call


def section_matmul(ctx: Context, shapes: list[str]) -> list[list[str]]:
    torch = _try_torch()
    rows = []
    for name in shapes:
        m, n, k = SHAPES[name]
        spec = MatmulSpec(m=m, n=n, k=k)
        rng = np.random.default_rng(0)
        a = rng.uniform(-1, 1, spec.a_shape).astype(np.float32)
        b = rng.uniform(-1, 1, spec.b_shape).astype(np.float32)
        tuned, default, spent = _sweep(spec, ctx, a, b)
        a2, b2 = a.reshape(m, k), b.reshape(k, n)
        calls: dict[str, Call] = {
            "numpy": functools.partial(np.matmul, a2, b2),
            "tuned": _matmul_call(spec, tuned, ctx, a, b),
            "default": _matmul_call(spec, default, ctx, a, b),
        }
        tune_note = ""
        if ctx.tune_trials:
            program, tune_note, tune_s = _tuned_program(spec, ctx.tune_trials)
            calls["tune"] = _program_checked(spec, program, ctx, a, b)
            tune_note += f" ({ctx.tune_trials} trials, {tune_s:.0f} s)"
        if torch is not None:
            calls["torch"] = functools.partial(torch.matmul, torch.from_numpy(a2), torch.from_numpy(b2))
        samples = _timed(calls, ctx.rounds, ctx.protocol, ctx.clock)
        flops = 2 * m * n * k
        numpy_median = _rates(flops, samples["numpy"])[0]
        for who in ("numpy", "torch", "tune", "tuned", "default"):
            if who == "tune" and "tune" not in calls:
                continue
            if who not in samples:
                rows.append([f"{m}x{n}x{k}", who, "n/a", "", "", "", ""])
                continue
            median, p20, p80 = _rates(flops, samples[who])
            tile = tuned if who == "tuned" else default if who == "default" else None
            note = tune_note if who == "tune" else "" if tile is None else _tile_text(tile)
            if who == "tuned":
                note += f" (sweep {spent:.0f} s)"
            rows.append([f"{m}x{n}x{k}", who, f"{median:.1f} [{p20:.0f}, {p80:.0f}]",
                         f"{median / numpy_median:.2f}x", f"{median / ctx.peak:.0%}",
                         f"{median / ctx.estimate:.0%}", note])
        print(f"  done {name}", file=sys.stderr, flush=True)
    return rows


#: ``packing``'s shapes (batch, m, n, k): small single products whose grid is one column of one or two
#: blocks, taller ones, one row of several blocks, and batched ones.
PACKING_SHAPES = ((1, 64, 64, 64), (1, 128, 128, 128), (1, 256, 64, 128), (1, 256, 256, 256), (1, 512, 64, 512),
                  (1, 1024, 128, 256), (1, 4096, 64, 1024), (1, 4096, 256, 1024), (1, 128, 768, 768),
                  (8, 96, 96, 96), (12, 128, 128, 64))
#: The packing variants of one tile: (pack_b_inside, pack_a_inside).
PACKINGS = {"A, B by launches": (False, False), "B inside": (True, False), "A and B inside": (True, True)}


def section_packing(ctx: Context, shapes: list[str]) -> list[list[str]]:
    """Where the default schedule's operands are packed: by launches of their own, B inside the compute
    launch, or both (one launch), the rest of the tile as the default has it; interleaved with numpy."""
    rows = []
    for batch, m, n, k in PACKING_SHAPES:
        spec = MatmulSpec(m=m, n=n, k=k, batch=batch)
        rng = np.random.default_rng(0)
        a = rng.uniform(-1, 1, spec.a_shape).astype(np.float32)
        b = rng.uniform(-1, 1, spec.b_shape).astype(np.float32)
        default = matmul.default_schedule(spec, ctx.device)
        tiles = {name: dataclasses.replace(default, pack_b_inside=inside_b, pack_a_inside=inside_a)
                 for name, (inside_b, inside_a) in PACKINGS.items()}
        calls: dict[str, Call] = {name: _matmul_call(spec, tile, ctx, a, b) for name, tile in tiles.items()}
        calls["numpy"] = functools.partial(np.matmul, a, b)
        samples = _timed(calls, ctx.rounds, ctx.protocol, ctx.clock)
        flops = 2 * batch * m * n * k
        rates = {name: _rates(flops, samples[name]) for name in calls}
        grid = f"{batch} x {-(-m // default.mc)} x {-(-n // default.nc)}"
        chosen = next(name for name, tile in tiles.items() if tile == default)
        shape = f"{batch}x{m}x{n}x{k}" if batch > 1 else f"{m}x{n}x{k}"
        for name, (median, p20, p80) in rates.items():
            rows.append([shape, grid, name + (" (default)" if name == chosen else ""),
                         f"{median:.1f} [{p20:.0f}, {p80:.0f}]", f"{median / rates[chosen][0]:.2f}x"])
        print(f"  done {shape}", file=sys.stderr, flush=True)
    return rows


def _tile_text(tile: GemmTile) -> str:
    v = schedule_values(tile)
    return (f"{v['mr']}x{v['nr']} mc{v['mc']} kc{v['kc']} nc{v['nc']} u{v['k_unroll']}"
            + ("" if v["prefetch_c"] else " no-prefetch") + (" B-in-block" if v.get("pack_b_inside") else "")
            + (" A-in-block" if v.get("pack_a_inside") else ""))


SECTIONS: dict[str, Callable[[Context, list[str]], list[list[str]]]] = {"matmul": section_matmul,
                                                                       "packing": section_packing}
#: Sections that are scripts of their own beside this one (section -> module in bench/).
SCRIPTS = {"conv2d": "cpu_conv", "rowwise": "cpu_rowwise"}
HEADERS = {"matmul": ["shape m x n x k", "who", "GFLOP/s median [p20, p80]", "vs numpy", "of meas.", "of est.",
                       "schedule"],
           "packing": ["shape [batch x] m x n x k", "grid (batch x rows x columns)", "packing",
                       "GFLOP/s median [p20, p80]", "vs the default"]}


def _table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in [headers, *rows]]
    return "\n".join([lines[0], "  ".join("-" * w for w in widths), *lines[1:]])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join([*SECTIONS, *SCRIPTS]),
                        help=f"sections, comma-separated: {', '.join([*SECTIONS, *SCRIPTS])}")
    parser.add_argument("--shapes", default=",".join(SHAPES), help=f"matmul shapes: {', '.join(SHAPES)}")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sweep", type=int, default=8, help="level-2 tiles sampled besides the neighbours")
    parser.add_argument("--target-ms", type=float, default=60.0)
    parser.add_argument("--tune", type=int, default=0, metavar="TRIALS",
                        help="also time what `warpmap tune` returns after TRIALS candidates (row 'tune')")
    parser.add_argument("--threads", type=int, default=None,
                        help="threads for every contender (default: all cores of this process)")
    parser.add_argument("--clock", choices=("wall", "thread"), default="wall",
                        help="thread: this thread's CPU time, with --threads 1 (what a loaded machine "
                             "lends in time slices does not count)")
    args = parser.parse_args(argv)
    sections = [s for s in args.only.split(",") if s]
    shapes = [s for s in args.shapes.split(",") if s]
    scripts = [s for s in sections if s in SCRIPTS]
    sections = [s for s in sections if s not in SCRIPTS]
    unknown = [s for s in sections if s not in SECTIONS] + [s for s in shapes if s not in SHAPES]
    if args.clock == "thread" and args.threads != 1:
        print("cpu_vs_numpy: --clock thread needs --threads 1", file=sys.stderr)
        return 2
    if unknown:
        print(f"cpu_vs_numpy: unknown section or shape {', '.join(unknown)}", file=sys.stderr)
        return 2
    reason = cpu.unavailable_reason()
    if reason is not None:
        print(f"cpu_vs_numpy: {reason}", file=sys.stderr)
        return 2
    device = detect_cpu()
    with tempfile.TemporaryDirectory(prefix="wm-bench-") as tmp:
        config = cpu.CpuConfig(cache_dir=Path(os.environ.get("WM_BENCH_CACHE", tmp)))
        if args.threads is not None:
            config = cpu.CpuConfig(cache_dir=config.cache_dir, workers=args.threads)
            _limit_peers(args.threads)
        protocol = Protocol(warmup_ms=20, min_repetitions=5, target_ms=args.target_ms)
        estimate = device.peak_gflops_f32 or float("nan")
        ctx = Context(device, config, args.rounds, args.sweep, protocol, 1.0, estimate,
                      time.thread_time_ns if args.clock == "thread" else time.perf_counter_ns)
        peak = measured_peak(ctx)
        clock = time.thread_time_ns if args.clock == "thread" else time.perf_counter_ns
        ctx = Context(device, config, args.rounds, args.sweep, protocol, peak, estimate, clock, args.tune)
        torch = _try_torch()
        print(f"# {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, load {os.getloadavg()[0]:.2f}, "
              f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'unset')}; "
              f"{device.model}, {device.isa_summary}, {config.workers} threads")
        print(f"# peak FP32: measured {peak:.0f} GFLOP/s (register FMAs, all cores, fastest of 50+ samples: "
              f"'of meas.'); estimate {estimate or 0:.0f} GFLOP/s at the {device.clock_ghz} GHz the OS "
              "reports ('of est.'; the clock under load may be higher)")
        print(f"# numpy {np.__version__}: {blas_kernel()}; torch: "
              + (f"{torch.__version__}, {torch.get_num_threads()} threads" if torch else "n/a (not installed)"))
        print(f"# clock: {'this thread' + chr(39) + 's CPU time' if args.clock == 'thread' else 'wall (monotonic)'}; "
              f"protocol: {args.rounds} interleaved rounds of {protocol}; tuned = best of a quick sweep "
              f"(the default, its level-2 neighbours and {args.sweep} level-2 samples), not the search engine")
        for section in sections:
            rows = SECTIONS[section](ctx, shapes)
            print(f"\n## {section}\n")
            print(_table(HEADERS[section], rows))
        print(f"\n# load at the end {os.getloadavg()[0]:.2f}")
    for name in scripts:
        print(f"\n## {name} ({SCRIPTS[name]}.py)\n", flush=True)
        importlib.import_module(SCRIPTS[name]).main(["--rounds", str(args.rounds)])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
