"""Check one schedule end to end: build it, compile it for each arch, run it, compare with numpy.

The same path serves ``warpmap check`` and the tuner's correctness gate. Every outcome is a
:class:`CheckResult` with a :class:`~search.trial.TrialStatus`; only bugs in warpmap itself raise.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from compiler.backends import Runner
from compiler.backends.errors import KernelRunError, KernelTimeoutError
from compiler.backends.nvrtc import DEFAULT_ARCHS, ResourceUsage, compile_source
from compiler.device import DeviceSpec
from compiler.diskcache import DiskCache
from compiler.numeric import TOLERANCE, from_storage, poisoned, relative_error
from compiler.ops.base import Operator
from compiler.source import KernelSource
from search.trial import TrialStatus


@dataclass(frozen=True)
class CheckResult:
    schedule: Hashable
    status: TrialStatus
    #: Worst relative L2 error over the outputs, when the kernel ran.
    error: float | None = None
    #: ptxas's report for each arch compiled.
    usage: dict[str, ResourceUsage] = field(default_factory=dict)
    message: str = ""
    kernel: KernelSource | None = None


def resource_problem(kernel: KernelSource, usage: ResourceUsage, device: DeviceSpec) -> str | None:
    """Why ptxas's report rules the kernel out on ``device`` (spills, registers, shared memory), or None."""
    if usage.spill_stores or usage.spill_loads:
        return f"spills {usage.spill_stores} bytes stored, {usage.spill_loads} loaded"
    if usage.registers * kernel.threads_per_block > device.max_registers_per_block:
        return f"{usage.registers} registers x {kernel.threads_per_block} threads > {device.max_registers_per_block}"
    if usage.shared_bytes > device.max_shared_static:
        return f"static shared memory {usage.shared_bytes} B > {device.max_shared_static} B"
    if usage.shared_bytes + kernel.shared_bytes > device.max_shared_dynamic:
        return f"shared memory {usage.shared_bytes + kernel.shared_bytes} B > {device.max_shared_dynamic} B"
    return None


def compile_checked(
    kernel: KernelSource,
    device: DeviceSpec,
    archs: Sequence[str] = DEFAULT_ARCHS,
    cache: DiskCache | None = None,
) -> tuple[TrialStatus | None, dict[str, ResourceUsage], str]:
    """Compile for every arch; a failure status and message, or None with the usage per arch."""
    usage: dict[str, ResourceUsage] = {}
    for arch in archs:
        build = compile_source(kernel, arch, cache=cache)
        if not build.ok or build.usage is None:
            error = build.error
            where = f" at line {error.line}: {error.source_line.strip()}" if error and error.source_line else ""
            return TrialStatus.COMPILE_ERROR, usage, f"{arch}: {error.message if error else 'no report'}{where}"
        usage[arch] = build.usage
        problem = resource_problem(kernel, build.usage, device)
        if problem is not None:
            return TrialStatus.INVALID, usage, f"{arch}: {problem}"
    return None, usage, ""


def arguments(
    operator: Operator, spec: object, kernel: KernelSource, seed: int
) -> tuple[list[np.ndarray | int | float], dict[str, np.ndarray]]:
    """Random inputs and NaN-poisoned outputs in the kernel's parameter order, plus the outputs by name."""
    inputs = operator.inputs(spec, np.random.default_rng(seed))
    outputs = {out.name: poisoned(out.shape, out.dtype) for out in operator.outputs(spec)}
    args: list[np.ndarray | int | float] = []
    for param in kernel.params:
        if param.name in inputs:
            args.append(inputs[param.name])
        elif param.name in outputs:
            args.append(outputs[param.name])
        else:
            raise ValueError(f"{kernel.entry}: parameter {param.name!r} is neither an input nor an output")
    return args, outputs


def worst_error(operator: Operator, spec: object, args: Sequence[object], kernel: KernelSource,
                outputs: dict[str, np.ndarray]) -> tuple[float, str]:
    inputs = {p.name: a for p, a in zip(kernel.params, args, strict=True) if p.name not in outputs}
    reference = operator.reference(spec, inputs)
    worst, worst_name = 0.0, ""
    for out in operator.outputs(spec):
        error = relative_error(from_storage(outputs[out.name], out.dtype).reshape(out.shape), reference[out.name])
        if error >= worst:
            worst, worst_name = error, out.name
    return worst, worst_name


def check_schedule(
    operator: Operator,
    spec: object,
    schedule: Hashable,
    *,
    runner: Runner,
    device: DeviceSpec,
    archs: Sequence[str] = DEFAULT_ARCHS,
    seed: int = 0,
    timeout_s: float = 60.0,
    cache: DiskCache | None = None,
) -> CheckResult:
    try:
        kernel = operator.build(spec, schedule)
    except ValueError as exc:
        return CheckResult(schedule, TrialStatus.INVALID, message=f"build: {exc}")
    status, usage, message = compile_checked(kernel, device, archs, cache)
    if status is not None:
        return CheckResult(schedule, status, usage=usage, message=message, kernel=kernel)
    args, outputs = arguments(operator, spec, kernel, seed)
    try:
        runner.run(kernel, args, timeout_s=timeout_s)
    except KernelTimeoutError as exc:
        return CheckResult(schedule, TrialStatus.TIMEOUT, usage=usage, message=str(exc), kernel=kernel)
    except KernelRunError as exc:
        return CheckResult(schedule, TrialStatus.LAUNCH_ERROR, usage=usage, message=str(exc), kernel=kernel)
    error, name = worst_error(operator, spec, args, kernel, outputs)
    tolerance = TOLERANCE[next(o.dtype for o in operator.outputs(spec) if o.name == name)] if name else 0.0
    if not error <= tolerance:
        message = f"{name}: relative error {error:.3g} > {tolerance:g}"
        return CheckResult(schedule, TrialStatus.WRONG_RESULT, error, usage, message, kernel)
    return CheckResult(schedule, TrialStatus.OK, error, usage, kernel=kernel)


def check_schedules(
    operator: Operator,
    spec: object,
    schedules: Sequence[Hashable],
    *,
    runner: Runner,
    device: DeviceSpec,
    jobs: int = 2,
    on_result: Callable[[int, CheckResult], None] | None = None,
    **options: Any,
) -> list[CheckResult]:
    """:func:`check_schedule` for each schedule, ``jobs`` at a time (compiles overlap), in order.

    ``on_result(done, result)`` is called as each one finishes, for progress output.
    """

    def check(schedule: Hashable) -> CheckResult:
        return check_schedule(operator, spec, schedule, runner=runner, device=device, **options)

    results: list[CheckResult] = []
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for done, result in enumerate(pool.map(check, schedules), start=1):
            results.append(result)
            if on_result is not None:
                on_result(done, result)
    return results
