"""The cpu matmul past what the test suite can hold: the in-launch packing's scratch by problem size, and
a product whose output passes 2^31 elements, run and checked.

``--scratch 2048,8192,16384``: for each n, the level-2 space of n³ on this host, ``--samples`` schedules
(seed 0) built, nothing compiled or allocated; prints the operands' bytes and the largest scratch of a
launch that packs its operands itself (workspaces ``aw`` and ``bw``): as the program declares it (slots
for the most threads the launch may run on) and as the cpu target allocates it here (a slot per thread a
launch on this host runs, ``Workspace.allocated_shape``).

``--run N``: an N x N x ``--k`` product with the template's default schedule, or with ``--inside`` a
sampled one that packs B inside the compute launch, built, compiled and run once on the host's cores,
its output NaN-poisoned first; ``--rows`` random rows and the last are compared with numpy in float64.
N = 46341 passes 2^31 outputs (8.6 GB of them: run it where that much memory is free). Exits 1 if a
checked row is wrong or keeps a NaN.

Usage: ``python bench/large_outputs.py [--scratch 2048,8192] [--samples 200] [--run 46341] [--k 5]
[--inside] [--rows 40]``
"""

from __future__ import annotations

import argparse
import math
import sys
import time

import numpy as np

from compiler.backends import get_target
from compiler.backends.cpu import CpuConfig
from compiler.backends.target import CompileFailure
from compiler.ops import get_operator, parse_spec
from compiler.program import Program

#: Workspaces of a compute launch that packs its operands itself (``compiler.ops.cpu.gemm``).
SCRATCH = ("aw", "bw")


def _mib(size: int) -> str:
    """``size`` bytes in MiB, a decimal kept below 10 so that a small scratch does not read 0."""
    return f"{size / 2**20:,.{1 if size < 10 * 2**20 else 0}f} MiB"


def scratch(program: Program, workers: int | None) -> tuple[int, int]:
    """(bytes, slots) of ``program``'s in-launch scratch, as declared (``workers`` None) or as allocated for
    launches on ``workers`` threads; (0, 0) for a program that packs in launches of their own."""
    shapes = [w.shape if workers is None else w.allocated_shape(workers)
              for w in program.workspaces if w.name in SCRATCH]
    return sum(4 * math.prod(shape) for shape in shapes), max((shape[0] for shape in shapes), default=0)


def scratch_rows(sizes: list[int], samples: int, workers: int) -> list[str]:
    """For each n, the operands' MiB and the largest in-launch scratch among sampled level-2 schedules, as
    declared and as allocated for launches on ``workers`` threads."""
    device = get_target("cpu").device()
    matmul = get_operator("matmul")
    rows = []
    for n in sizes:
        spec = parse_spec({"op": "matmul", "m": n, "n": n, "k": n})
        schedules = matmul.space(spec, device, 2).sample(samples, 0)
        programs = [matmul.build(spec, schedule, "cpu") for schedule in schedules]
        declared, declared_slots = max(scratch(program, None) for program in programs)
        allocated, allocated_slots = max(scratch(program, workers) for program in programs)
        rows.append(f"{n}³: operands {matmul.min_bytes(spec) / 2**20:,.0f} MiB, largest in-launch scratch of "
                    f"{samples} sampled schedules {_mib(declared)} declared ({declared_slots} slots), "
                    f"{_mib(allocated)} allocated on {workers} threads ({allocated_slots} slots)")
    return rows


def run_product(n: int, k: int, inside: bool, rows: int) -> tuple[bool, str]:
    """(passed, a line) for one n x n x k product run on the host and checked on sampled rows."""
    target = get_target("cpu")
    matmul = get_operator("matmul")
    spec = parse_spec({"op": "matmul", "m": n, "n": n, "k": k})
    space = matmul.space(spec, target.device(), 2)
    if inside:
        schedule = next(s for s in space.sample(200, 0) if s.pack_b_inside)
    else:
        values = space.default_values()
        assert values is not None, "the template has no default schedule for this shape"
        schedule = space.make(values)
    artifact = target.compile(matmul.build(spec, schedule, "cpu"))
    if isinstance(artifact, CompileFailure):
        return False, f"{n}x{n}x{k}: did not build: {artifact.message}"
    rng = np.random.default_rng(0)
    buffers = dict(matmul.inputs(spec, rng))
    (output,) = matmul.outputs(spec)
    buffers[output.name] = np.full(output.shape, np.nan, dtype=np.float32)
    loaded = target.load(artifact)
    started = time.perf_counter()
    target.run(loaded, buffers, timeout_s=600)
    seconds = time.perf_counter() - started
    c = buffers[output.name].reshape(n, n)
    a = buffers["a"].reshape(n, k).astype(np.float64)
    b = buffers["b"].reshape(k, n).astype(np.float64)
    picked = [*rng.integers(0, n, rows).tolist(), n - 1]
    error = max(float(np.max(np.abs(c[r].astype(np.float64) - a[r] @ b))) for r in picked)
    passed = error < 1e-4 * k
    return passed, (f"{n}x{n}x{k} ({n * n:,} outputs), {schedule}: ran in {seconds:.1f} s; {len(picked)} rows "
                    f"checked, largest error {error:.2g}{'' if passed else ' (WRONG)'}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scratch", default="2048,8192,16384", help="cube sizes for the scratch table ('' skips)")
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--run", type=int, default=0, metavar="N", help="run an N x N x K product (0: skip)")
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--inside", action="store_true", help="a schedule that packs B inside the launch")
    parser.add_argument("--rows", type=int, default=40)
    args = parser.parse_args(argv)
    if args.samples < 1 or args.rows < 1 or args.run < 0 or args.k < 1:
        parser.error("--samples, --rows and --k must be at least 1, --run 0 or more")
    if (reason := get_target("cpu").unavailable_reason()) is not None:
        print(f"large_outputs.py: the cpu target cannot run here: {reason}", file=sys.stderr)
        return 2
    sizes = [int(s) for s in args.scratch.split(",") if s.strip()]
    for line in scratch_rows(sizes, args.samples, CpuConfig.default().workers):
        print(line, flush=True)
    if args.run:
        passed, line = run_product(args.run, args.k, args.inside, args.rows)
        print(line)
        return 0 if passed else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
