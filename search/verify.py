"""Check one schedule end to end: build its program, compile each launch for each arch, run the launches in
order, compare with numpy.

The same path serves ``warpmap check`` and the tuner's correctness gate. Every outcome is a
:class:`CheckResult` with a :class:`~search.trial.TrialStatus`; only bugs in this harness raise.

Pruned (``INVALID``) means the schedule cannot serve the spec on the device, and nothing else: ptxas
reports spills or limits exceeded, or the template refused it on purpose with
:class:`~compiler.space.ScheduleDoesNotFitError`. Any other exception from a template's ``build`` is
a bug in the template and fails the schedule (``COMPILE_ERROR``, with the traceback). A check whose
every schedule was pruned verified nothing: :func:`summarize` calls it a failure.

Outputs are compared by relative L2 error against :func:`compiler.numeric.tolerance`, which grows with
the number of terms each output element sums (its ``TensorSpec.reduction``).
"""

from __future__ import annotations

import functools
import traceback
from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from compiler.backends import Runner
from compiler.backends.errors import KernelRunError, KernelTimeoutError
from compiler.backends.nvrtc import DEFAULT_ARCHS, ResourceUsage, compile_source
from compiler.codegen import render_program
from compiler.device import DeviceSpec
from compiler.diskcache import DiskCache
from compiler.numeric import from_storage, poisoned, relative_error, tolerance, underflow_allowance
from compiler.ops.base import Operator
from compiler.program import Program, launch_arguments
from compiler.source import KernelSource
from compiler.space import ScheduleDoesNotFitError
from search.trial import TrialStatus


@dataclass(frozen=True)
class CheckResult:
    schedule: Hashable
    status: TrialStatus
    #: Worst relative L2 error over the outputs, when the program ran.
    error: float | None = None
    #: ptxas's report for each arch compiled, one mapping per launch compiled, in launch order.
    launch_usage: tuple[dict[str, ResourceUsage], ...] = ()
    message: str = ""
    program: Program | None = None
    #: The CUDA source of each launch, in launch order (what NVRTC and the runner were given).
    kernels: tuple[KernelSource, ...] = ()

    @property
    def usage(self) -> dict[str, ResourceUsage]:
        """ptxas's report per arch for the first launch (see ``launch_usage`` for the others)."""
        return self.launch_usage[0] if self.launch_usage else {}


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


def compile_launches(
    kernels: Sequence[KernelSource],
    device: DeviceSpec,
    archs: Sequence[str] = DEFAULT_ARCHS,
    cache: DiskCache | None = None,
) -> tuple[TrialStatus | None, tuple[dict[str, ResourceUsage], ...], str]:
    """:func:`compile_checked` for each launch in order, stopping at the first that fails; a message
    about a launch of a multi-launch program names its entry."""
    usages: list[dict[str, ResourceUsage]] = []
    for kernel in kernels:
        status, usage, message = compile_checked(kernel, device, archs, cache)
        usages.append(usage)
        if status is not None:
            return status, tuple(usages), message if len(kernels) == 1 else f"{kernel.entry}: {message}"
    return None, tuple(usages), ""


class Oracle:
    """The random inputs of one (operator, spec, seed) and numpy's outputs for them, both made once.

    Every schedule of a workload runs on the same inputs, so the float64 reference (for a large matmul,
    slower than the emulated kernel) is paid once per check, not once per schedule. Each run gets its
    own copy of the inputs: a kernel that scribbles on one cannot change what the next schedule sees.
    """

    def __init__(self, operator: Operator, spec: object, seed: int = 0) -> None:
        self.operator, self.spec, self.seed = operator, spec, seed

    @functools.cached_property
    def inputs(self) -> dict[str, np.ndarray]:
        return self.operator.inputs(self.spec, np.random.default_rng(self.seed))

    @functools.cached_property
    def expected(self) -> dict[str, np.ndarray]:
        return self.operator.reference(self.spec, self.inputs)

    def arguments(self, program: Program) -> tuple[list[list[np.ndarray | int | float]], dict[str, np.ndarray]]:
        """Each launch's arguments in its parameter order, over fresh copies of the inputs and NaN-poisoned
        outputs and workspaces (one buffer each, shared by the launches), plus the outputs by name."""
        outputs = {out.name: poisoned(out.shape, out.dtype) for out in self.operator.outputs(self.spec)}
        buffers: dict[str, np.ndarray] = {}
        for name in program.arguments:
            if name in self.inputs:
                buffers[name] = self.inputs[name].copy()
            elif name in outputs:
                buffers[name] = outputs[name]
            else:
                raise ValueError(f"{program.name}: argument {name!r} is neither an input nor an output")
        for workspace in program.workspaces:
            buffers[workspace.name] = poisoned(workspace.shape, workspace.dtype)
        return launch_arguments(program, buffers), outputs

    def worst_error(self, outputs: dict[str, np.ndarray]) -> tuple[float, str]:
        """The relative error of the output furthest past its tolerance (or nearest to it), and its name."""
        worst, worst_name, worst_ratio = 0.0, "", -1.0
        for out in self.operator.outputs(self.spec):
            got = from_storage(outputs[out.name], out.dtype).reshape(out.shape)
            error = relative_error(got, self.expected[out.name])
            ratio = error / self.tolerance(out.name)
            if ratio >= worst_ratio:
                worst, worst_name, worst_ratio = error, out.name, ratio
        return worst, worst_name

    def tolerance(self, name: str) -> float:
        """The relative error allowed in output ``name``: by its dtype and reduction length, plus what
        rounding its subnormal reference values may cost."""
        return self._tolerances[name]

    @functools.cached_property
    def _tolerances(self) -> dict[str, float]:
        return {
            out.name: tolerance(out.dtype, out.reduction) + underflow_allowance(out.dtype, self.expected[out.name])
            for out in self.operator.outputs(self.spec)
        }


@dataclass(frozen=True)
class _Compiled:
    """A schedule that built and compiled within the device's limits, ready to run."""

    schedule: Hashable
    program: Program
    kernels: tuple[KernelSource, ...]
    usage: tuple[dict[str, ResourceUsage], ...]


def _compile(operator: Operator, spec: object, schedule: Hashable, runner: Runner, device: DeviceSpec,
             archs: Sequence[str], cache: DiskCache | None) -> CheckResult | _Compiled:
    """Build, render and compile each launch for every arch and let the runner prepare: everything before
    the launches."""
    try:
        program = operator.build(spec, schedule)
        kernels = render_program(program)
    except ScheduleDoesNotFitError as exc:  # the template's own refusal: a pruned candidate
        return CheckResult(schedule, TrialStatus.INVALID, message=f"build: {exc}")
    except Exception as exc:  # any other exception is a template bug: fail, with where it was
        trace = "".join(traceback.format_exception(exc)).rstrip()
        return CheckResult(schedule, TrialStatus.COMPILE_ERROR,
                           message=f"build raised {type(exc).__name__}: {exc}\n{trace}")
    status, usage, message = compile_launches(kernels, device, archs, cache)
    if status is not None:
        return CheckResult(schedule, status, launch_usage=usage, message=message, program=program, kernels=kernels)
    try:
        for kernel in kernels:
            runner.prepare(kernel)
    except KernelRunError as exc:
        return CheckResult(schedule, TrialStatus.COMPILE_ERROR, launch_usage=usage, message=str(exc),
                           program=program, kernels=kernels)
    return _Compiled(schedule, program, kernels, usage)


def _run(compiled: _Compiled, oracle: Oracle, runner: Runner, timeout_s: float) -> CheckResult:
    schedule, program, kernels, usage = compiled.schedule, compiled.program, compiled.kernels, compiled.usage

    def result(status: TrialStatus, error: float | None = None, message: str = "") -> CheckResult:
        return CheckResult(schedule, status, error, usage, message, program, kernels)

    launch_args, outputs = oracle.arguments(program)
    # Launches run in order on the same buffers: each sees what the ones before it wrote.
    for kernel, args in zip(kernels, launch_args, strict=True):
        try:
            runner.run(kernel, args, timeout_s=timeout_s)
        except KernelTimeoutError as exc:
            return result(TrialStatus.TIMEOUT, message=str(exc))
        except KernelRunError as exc:
            return result(TrialStatus.LAUNCH_ERROR, message=str(exc))
    error, name = oracle.worst_error(outputs)
    allowed = oracle.tolerance(name) if name else 0.0
    if not error <= allowed:
        return result(TrialStatus.WRONG_RESULT, error, f"{name}: relative error {error:.3g} > {allowed:.3g}")
    return result(TrialStatus.OK, error)


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
    compiled = _compile(operator, spec, schedule, runner, device, archs, cache)
    if isinstance(compiled, CheckResult):
        return compiled
    return _run(compiled, Oracle(operator, spec, seed), runner, timeout_s)


def check_schedules(
    operator: Operator,
    spec: object,
    schedules: Sequence[Hashable],
    *,
    runner: Runner,
    device: DeviceSpec,
    archs: Sequence[str] = DEFAULT_ARCHS,
    seed: int = 0,
    timeout_s: float = 60.0,
    cache: DiskCache | None = None,
    jobs: int = 2,
    on_result: Callable[[int, CheckResult], None] | None = None,
) -> list[CheckResult]:
    """:func:`check_schedule` for each schedule, in order, against one :class:`Oracle`.

    Builds and compiles run ``jobs`` at a time in threads; launches and comparisons run one at a time
    in the calling thread while later schedules compile: a launch already uses every core (emulator)
    or the whole device (GPU), and a GPU launch must not share the device with another one.

    ``on_result(done, result)`` is called as each one finishes, for progress output.
    """
    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, got {jobs}")
    oracle = Oracle(operator, spec, seed)

    def compile_one(schedule: Hashable) -> CheckResult | _Compiled:
        return _compile(operator, spec, schedule, runner, device, archs, cache)

    results: list[CheckResult] = []
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for done, compiled in enumerate(pool.map(compile_one, schedules), start=1):
            result = compiled if isinstance(compiled, CheckResult) else _run(compiled, oracle, runner, timeout_s)
            results.append(result)
            if on_result is not None:
                on_result(done, result)
    return results


#: Distinct prune reasons a summary names; the rest are counted together.
_REASONS_SHOWN = 3


@dataclass(frozen=True)
class CheckSummary:
    """The verdict over the schedules of one check.

    A check passes when no schedule failed and at least one passed: a check whose every schedule was
    pruned verified nothing, so the workload has no kernel, and that is an error, not a success.
    """

    passed: int
    failed: int
    pruned: int
    #: Each distinct prune message and how many schedules it ruled out, most frequent first.
    pruned_reasons: tuple[tuple[str, int], ...] = ()

    @property
    def ok(self) -> bool:
        return self.failed == 0 and self.passed > 0

    @property
    def line(self) -> str:
        return f"{self.passed} passed, {self.failed} failed, {self.pruned} pruned"

    def problem(self) -> str | None:
        """Why the check did not pass, in one line, or None when it did."""
        if self.failed:
            return f"{self.failed} of {self.passed + self.failed + self.pruned} schedules failed"
        if self.passed:
            return None
        if not self.pruned:
            return "no schedule was checked"
        shown = "; ".join(f"{count} x {reason}" for reason, count in self.pruned_reasons[:_REASONS_SHOWN])
        rest = sum(count for _, count in self.pruned_reasons[_REASONS_SHOWN:])
        more = f"; {rest} more for other reasons" if rest else ""
        return f"no schedule can serve this spec: all {self.pruned} checked were pruned ({shown}{more})"


def summarize(results: Sequence[CheckResult]) -> CheckSummary:
    """Count the outcomes of a check and gather why its pruned schedules were pruned."""
    statuses = Counter(r.status for r in results)
    reasons = Counter(r.message.splitlines()[0] if r.message else "no reason given"
                      for r in results if r.status is TrialStatus.INVALID)
    return CheckSummary(
        passed=statuses[TrialStatus.OK],
        failed=sum(n for status, n in statuses.items() if status.is_failure),
        pruned=statuses[TrialStatus.INVALID],
        pruned_reasons=tuple(reasons.most_common()),
    )
