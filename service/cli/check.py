"""``warpmap check``: build every schedule of a space, run each against numpy, print one row per schedule."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from pydantic import ValidationError

from compiler.backends import BACKENDS, get_runner
from compiler.backends.nvrtc import DEFAULT_ARCHS
from compiler.device import DEVICES, device_preset
from compiler.diskcache import DiskCache, default_cache_root
from compiler.ops import get_operator, parse_spec
from compiler.space import EmptySpaceError, schedule_values
from search.trial import TrialStatus
from search.verify import CheckResult, check_schedules, summarize
from service.cli.errors import CliError
from service.cli.table import format_table

_CUBIN_CACHE_BYTES = 512 << 20


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "check",
        help="verify a schedule space against numpy",
        description="Build the schedules of an operator's space (all, or a seeded sample), run each on the "
        "device with random inputs and compare with the numpy reference. Exits 1 if any schedule fails.",
    )
    parser.add_argument("--spec", required=True, help='operator spec as JSON, e.g. \'{"op": "matmul", ...}\'')
    parser.add_argument("--level", type=int, default=1, choices=(1, 2), help="schedule space level (default 1)")
    parser.add_argument("--sample", type=int, metavar="N", help="check a seeded sample of N schedules")
    parser.add_argument("--seed", type=int, default=0, help="seed for the sample and the inputs (default 0)")
    parser.add_argument("--device", default="emu", choices=sorted(BACKENDS), help="where kernels run (default emu)")
    parser.add_argument("--gpu", default="h200", choices=sorted(DEVICES),
                        help="GPU whose limits shape the space (default h200)")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds a kernel may run (default 60)")
    parser.add_argument("--jobs", type=int, default=2, help="schedules checked at once (default 2)")
    parser.set_defaults(func=run)


def parse_spec_argument(text: str) -> Any:
    """The spec model for ``--spec``, or a CliError naming the offending field."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CliError(f"--spec is not valid JSON: {exc}") from None
    try:
        return parse_spec(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in error['loc']) or 'spec'}: {error['msg']}" for error in exc.errors()
        )
        raise CliError(f"invalid spec: {problems}") from None
    except ValueError as exc:
        raise CliError(f"invalid spec: {exc}") from None


def _row(index: int, result: CheckResult) -> list[object]:
    usage = result.usage.get(DEFAULT_ARCHS[-1]) or next(iter(result.usage.values()), None)
    dynamic = result.kernel.shared_bytes if result.kernel else 0
    return [
        index,
        *schedule_values(result.schedule).values(),
        usage.registers if usage else "-",
        usage.shared_bytes + dynamic if usage else "-",
        result.error if result.error is not None else "-",
        "pass" if result.status is TrialStatus.OK else ("pruned" if result.status is TrialStatus.INVALID else "FAIL"),
        result.message,
    ]


def run(args: argparse.Namespace) -> int:
    if args.sample is not None and args.sample < 1:
        raise CliError(f"--sample must be at least 1, got {args.sample}")
    if args.jobs < 1:
        raise CliError(f"--jobs must be at least 1, got {args.jobs}")
    spec = parse_spec_argument(args.spec)
    operator = get_operator(spec.op)
    runner = get_runner(args.device)
    reason = runner.unavailable_reason()
    if reason is not None:
        raise CliError(f"device {args.device!r} cannot run kernels here: {reason}")
    device = device_preset(args.gpu)
    try:
        space = operator.space(spec, device, args.level)
    except EmptySpaceError as exc:
        raise CliError(f"no schedule can serve this spec on {args.gpu}: {exc}") from None
    enumeration = space.enumerate()
    schedules = space.sample(args.sample, args.seed) if args.sample else enumeration.valid
    rejected = ", ".join(f"{count} {name}" for name, count in enumeration.rejected.items()) or "none"
    print(f"{operator.name} {spec.canonical_json()}")
    print(f"space {space.template} level {args.level}: {enumeration.total} combinations, "
          f"{len(enumeration.valid)} valid (rejected: {rejected}); checking {len(schedules)} on {args.device}")
    cache = DiskCache(default_cache_root() / "cubin", _CUBIN_CACHE_BYTES)

    def progress(done: int, _result: CheckResult) -> None:
        print(f"\r  checked {done}/{len(schedules)}", end="", file=sys.stderr, flush=True)

    results = check_schedules(operator, spec, schedules, runner=runner, device=device, jobs=args.jobs,
                              on_result=progress, seed=args.seed, timeout_s=args.timeout, cache=cache)
    print(file=sys.stderr)
    if not results:
        print("no valid schedule to check")
        return 1
    header = ["#", *schedule_values(results[0].schedule), "regs", "smem", "rel_err", "result", "note"]
    print(format_table(header, [_row(i, r) for i, r in enumerate(results)]))
    summary = summarize(results)
    print(summary.line)
    problem = summary.problem()
    if problem is not None:
        print(f"warpmap check: {problem}", file=sys.stderr)
    return 0 if summary.ok else 1
