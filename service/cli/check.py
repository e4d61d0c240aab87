"""``warpmap check``: build every schedule of a space, run each against numpy, print one row per schedule."""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from compiler.backends import Target, get_target
from compiler.cpu_device import CpuDevice
from compiler.device import DEFAULT_GPU, DeviceSpec, device_preset, local_gpu_spec
from compiler.ops import get_operator
from compiler.space import EmptySpaceError, schedule_values
from search.measure import available_memory_bytes
from search.trial import TrialStatus
from search.verify import CheckResult, check_schedules, summarize
from service.cli.errors import CliError
from service.cli.specs import check_memory, validated_spec
from service.cli.table import print_table

#: Seconds per schedule with the default 2 jobs, before any has been measured. emu: the 3,648
#: schedules of a level-2 512^3 f32 matmul took about 45 minutes on two cores; cuda: two NVRTC
#: compiles (sm_80, sm_90) of about 230 ms CPU each, over two jobs; cpu: one g++ -O3 build per launch,
#: about 330 ms for the example host matmul (median of 5 cold builds at load average 4.7), over two jobs.
#: Progress lines re-estimate from the measured pace.
ROUGH_SECONDS_PER_SCHEDULE = {"emu": 0.75, "cuda": 0.25, "cpu": 0.25}
#: Above this estimate, the header suggests ``--sample``.
LONG_CHECK_S = 600.0


def parse_spec_argument(text: str) -> Any:
    """The spec model for ``--spec``, or a CliError naming the offending field."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CliError(f"--spec is not valid JSON: {exc}") from None
    try:
        return validated_spec(data)
    except ValueError as exc:
        raise CliError(str(exc)) from None


def _row(index: int, result: CheckResult) -> list[object]:
    """One schedule's row. For a program of several launches, ``regs`` and ``smem`` are the largest over its
    launches (each for the newest arch compiled): the launch that limits occupancy is the one to see. A
    target without a resource report (the cpu) shows ``-``."""
    registers: list[int] = []
    shared: list[int] = []
    for kernel, per_arch in zip(result.kernels, result.launch_usage, strict=False):
        usage = per_arch[max(per_arch, key=_arch_number)] if per_arch else None
        if usage is not None:
            registers.append(usage.registers)
            shared.append(usage.shared_bytes + kernel.shared_bytes)
    return [
        index,
        *schedule_values(result.schedule).values(),
        max(registers) if registers else "-",
        max(shared) if shared else "-",
        result.error if result.error is not None else "-",
        "pass" if result.status is TrialStatus.OK else ("pruned" if result.status is TrialStatus.INVALID else "FAIL"),
        result.message,
    ]


def _arch_number(arch: str) -> int:
    """``sm_90`` -> 90, so the newest arch of a report sorts last.

    >>> _arch_number("sm_90a"), _arch_number("sm_80")
    (90, 80)
    """
    return int("".join(c for c in arch if c.isdigit()) or 0)


def validate_options(args: argparse.Namespace) -> None:
    if args.sample is not None and args.sample < 1:
        raise CliError(f"--sample must be at least 1, got {args.sample}")
    if args.jobs < 1:
        raise CliError(f"--jobs must be at least 1, got {args.jobs}")
    if args.seed < 0:
        raise CliError(f"--seed must be 0 or more, got {args.seed}")
    if not (args.timeout > 0 and math.isfinite(args.timeout)):
        raise CliError(f"--timeout must be a number of seconds above 0, got {args.timeout}")


def format_duration(seconds: float) -> str:
    """``45 s``, ``12 min``, ``3.5 h``.

    >>> format_duration(42.4), format_duration(2736), format_duration(12600)
    ('42 s', '46 min', '3.5 h')
    """
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def eta_line(count: int, device: str) -> str:
    """The up-front estimate of a check of ``count`` schedules, labelled as the rough guess it is.

    >>> eta_line(3648, "emu")
    '3648 schedule(s) to check, roughly 46 min (a rough estimate; --sample N checks a seeded sample)'
    """
    estimate = count * ROUGH_SECONDS_PER_SCHEDULE.get(device, 1.0)
    hint = "; --sample N checks a seeded sample" if estimate > LONG_CHECK_S else ""
    return f"{count} schedule(s) to check, roughly {format_duration(estimate)} (a rough estimate{hint})"


def progress_printer(total: int, stream: TextIO, now: Callable[[], float] = time.monotonic
                     ) -> Callable[[int, CheckResult], None]:
    """``on_result`` for :func:`check_schedules`: done/total and the ETA from the measured pace.

    On a terminal one line is rewritten in place; in a log (not a tty) a line is written every
    twentieth of the way and at the end, so the log stays readable.
    """
    start = now()
    every = max(1, total // 20)
    live = stream.isatty()

    def progress(done: int, _result: CheckResult) -> None:
        if not live and done % every and done != total:
            return
        elapsed = now() - start
        left = elapsed / done * (total - done)
        text = f"  checked {done}/{total} in {format_duration(elapsed)}"
        text += f", about {format_duration(left)} left" if done < total else ""
        print(f"\r{text}" if live else text, end="" if live else "\n", file=stream, flush=True)

    return progress


def space_device(gpu: str | None, api: Any = None) -> DeviceSpec:
    """The preset ``--gpu`` names; without it the real limits of this machine's GPU, else the default preset."""
    if gpu is not None:
        return device_preset(gpu)
    return local_gpu_spec(api) or device_preset(DEFAULT_GPU)


def check_target(name: str, gpu: str | None) -> Target:
    """The target ``--target`` names; one that runs the CUDA templates gets the limits of
    :func:`space_device` (``--gpu`` applies to no other). A CliError says why a target cannot run here."""
    target = get_target(name)
    if target.template_target == "cuda":
        target = get_target(name, gpu=space_device(gpu))
    elif gpu is not None:
        raise CliError(f"--gpu applies to the targets of the CUDA templates (emu, cuda), not to --target {name}")
    reason = target.unavailable_reason()
    if reason is not None:
        raise CliError(f"target {name!r} cannot run kernels here: {reason}")
    return target


def device_name(device: DeviceSpec | CpuDevice) -> str:
    return device.name if isinstance(device, DeviceSpec) else device.model


def run(args: argparse.Namespace) -> int:
    validate_options(args)
    spec = parse_spec_argument(args.spec)
    operator = get_operator(spec.op)
    target = check_target(args.target, args.gpu)
    check_memory(spec, available_memory_bytes())
    device = target.device()
    try:
        space = operator.space(spec, device, args.level)
    except EmptySpaceError as exc:
        raise CliError(f"no schedule can serve this spec on {device_name(device)}: {exc}") from None
    except ValueError as exc:  # a template that can say up front it cannot serve this spec or level
        raise CliError(str(exc)) from None
    enumeration = space.enumerate()
    rejected = ", ".join(f"{count} {name}" for name, count in enumeration.rejected.items()) or "none"
    if not enumeration.valid:
        raise CliError(f"no schedule of space {space.template} level {args.level} can serve this spec "
                       f"({enumeration.total} combinations, rejected: {rejected})")
    schedules = space.sample(args.sample, args.seed) if args.sample else enumeration.valid
    print(f"{operator.name} {spec.canonical_json()}")
    print(f"space {space.template} level {args.level}: {enumeration.total} combinations, "
          f"{len(enumeration.valid)} valid (rejected: {rejected}); checking {len(schedules)} on {args.target}")
    print(eta_line(len(schedules), args.target), flush=True)
    progress = progress_printer(len(schedules), sys.stderr)
    results = check_schedules(operator, spec, schedules, target=target, jobs=args.jobs, on_result=progress,
                              seed=args.seed, timeout_s=args.timeout)
    if sys.stderr.isatty():
        print(file=sys.stderr)
    header = ["#", *schedule_values(results[0].schedule), "regs", "smem", "rel_err", "result", "note"]
    print_table(header, [_row(i, r) for i, r in enumerate(results)])
    summary = summarize(results)
    print(summary.line)
    problem = summary.problem()
    if problem is not None:
        print(f"warpmap check: {problem}", file=sys.stderr)
    return 0 if summary.ok else 1
