"""Check one schedule end to end: build its program, compile it for the target, run it, compare with numpy.

The same path serves ``warpmap check`` and the tuner's correctness gate, on any target
(``compiler.backends.get_target``): this module asks none of them which one it is. Every outcome is a
:class:`CheckResult` with a :class:`~search.trial.TrialStatus`; only bugs in this harness raise. A
passing result carries the compiled artifact: the one that was verified is the one to time and store.

Pruned (``INVALID``) means the schedule cannot serve the spec on the device, and nothing else: the
target's compile says it does not fit (on the CUDA targets, ptxas reports spills or limits exceeded), or
the template refused it on purpose with :class:`~compiler.space.ScheduleDoesNotFitError`. Any other
exception from a template's ``build`` is a bug in the template and fails the schedule
(``COMPILE_ERROR``, with the traceback), as does a program the target cannot compile. A check whose
every schedule was pruned verified nothing: :func:`summarize` calls it a failure.

Outputs (and workspaces, by the target) are poisoned with NaN before each run and compared by relative
L2 error against :func:`compiler.numeric.tolerance`, which grows with the number of terms each output
element sums (its ``TensorSpec.reduction``).
"""

from __future__ import annotations

import functools
import traceback
from collections import Counter
from collections.abc import Callable, Hashable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from compiler.backends import Artifact, CompileFailure, Target
from compiler.backends.errors import KernelRunError, KernelTimeoutError
from compiler.backends.ptxas_report import ResourceUsage
from compiler.numeric import from_storage, poisoned, relative_error, tolerance, underflow_allowance
from compiler.ops.base import Operator
from compiler.program import Program
from compiler.source import KernelSource
from compiler.space import ScheduleDoesNotFitError
from search.trial import TrialStatus

_FAILURE_STATUS = {"compile_error": TrialStatus.COMPILE_ERROR, "invalid": TrialStatus.INVALID}


@dataclass(frozen=True)
class CheckResult:
    schedule: Hashable
    status: TrialStatus
    #: Worst relative L2 error over the outputs, when the program ran.
    error: float | None = None
    #: The compiler's resource report per arch, one mapping per launch compiled, in launch order (ptxas's
    #: on the CUDA targets; empty mappings where a target reports none).
    launch_usage: tuple[Mapping[str, ResourceUsage], ...] = ()
    message: str = ""
    program: Program | None = None
    #: The source of each launch compiled, in launch order, in the target's dialect.
    kernels: tuple[KernelSource, ...] = ()
    #: What the target built, when it built: the artifact that was run, and is to be timed and stored.
    artifact: Artifact | None = None

    @property
    def usage(self) -> Mapping[str, ResourceUsage]:
        """The resource report per arch for the first launch (see ``launch_usage`` for the others)."""
        return self.launch_usage[0] if self.launch_usage else {}


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

    def arguments(self, program: Program) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """The program's arguments by name, over fresh copies of the inputs and NaN-poisoned outputs, plus
        the outputs by name (workspaces belong to the loaded program, which poisons them itself)."""
        outputs = {out.name: poisoned(out.shape, out.dtype) for out in self.operator.outputs(self.spec)}
        buffers: dict[str, np.ndarray] = {}
        for name in program.arguments:
            if name in self.inputs:
                buffers[name] = self.inputs[name].copy()
            elif name in outputs:
                buffers[name] = outputs[name]
            else:
                raise ValueError(f"{program.name}: argument {name!r} is neither an input nor an output")
        return buffers, outputs

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


def compile_schedule(operator: Operator, spec: object, schedule: Hashable, target: Target) -> CheckResult:
    """Build the schedule's program and compile it for the target: everything before the launches. A
    result whose ``artifact`` is set is ready to run; any other is final."""
    try:
        program = operator.build(spec, schedule, target.template_target)
    except ScheduleDoesNotFitError as exc:  # the template's own refusal: a pruned candidate
        return CheckResult(schedule, TrialStatus.INVALID, message=f"build: {exc}")
    except Exception as exc:  # any other exception is a template bug: fail, with where it was
        trace = "".join(traceback.format_exception(exc)).rstrip()
        return CheckResult(schedule, TrialStatus.COMPILE_ERROR,
                           message=f"build raised {type(exc).__name__}: {exc}\n{trace}")
    built = target.compile(program)
    launches = built.launches
    usage = tuple(launch.usage for launch in launches)
    kernels = tuple(launch.source for launch in launches)
    if isinstance(built, CompileFailure):
        return CheckResult(schedule, _FAILURE_STATUS[built.kind], launch_usage=usage, message=built.message,
                           program=program, kernels=kernels)
    return CheckResult(schedule, TrialStatus.OK, launch_usage=usage, program=program, kernels=kernels, artifact=built)


def _run(compiled: CheckResult, oracle: Oracle, target: Target, timeout_s: float) -> CheckResult:
    assert compiled.artifact is not None and compiled.program is not None

    def result(status: TrialStatus, error: float | None = None, message: str = "") -> CheckResult:
        return CheckResult(compiled.schedule, status, error, compiled.launch_usage, message, compiled.program,
                           compiled.kernels, compiled.artifact)

    buffers, outputs = oracle.arguments(compiled.program)
    try:
        loaded = target.load(compiled.artifact)
        target.run(loaded, buffers, timeout_s=timeout_s)
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
    target: Target,
    seed: int = 0,
    timeout_s: float = 60.0,
) -> CheckResult:
    compiled = compile_schedule(operator, spec, schedule, target)
    if compiled.artifact is None:
        return compiled
    return _run(compiled, Oracle(operator, spec, seed), target, timeout_s)


def check_schedules(
    operator: Operator,
    spec: object,
    schedules: Sequence[Hashable],
    *,
    target: Target,
    seed: int = 0,
    timeout_s: float = 60.0,
    jobs: int = 2,
    on_result: Callable[[int, CheckResult], None] | None = None,
) -> list[CheckResult]:
    """:func:`check_schedule` for each schedule, in order, against one :class:`Oracle`.

    Builds and compiles run ``jobs`` at a time in threads; loads, launches and comparisons run one at a
    time in the calling thread while later schedules compile: a launch already uses every core (emulator,
    cpu) or the whole device (GPU), and a GPU launch must not share the device with another one.

    ``on_result(done, result)`` is called as each one finishes, for progress output.
    """
    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, got {jobs}")
    oracle = Oracle(operator, spec, seed)

    def compile_one(schedule: Hashable) -> CheckResult:
        return compile_schedule(operator, spec, schedule, target)

    results: list[CheckResult] = []
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for done, compiled in enumerate(pool.map(compile_one, schedules), start=1):
            result = compiled if compiled.artifact is None else _run(compiled, oracle, target, timeout_s)
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
