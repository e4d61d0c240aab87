"""The verification harness on a tiny operator whose kernels are right, wrong, broken or hanging."""

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import pytest

from compiler.backends import get_target
from compiler.backends.cuda_build import resource_problem
from compiler.backends.ptxas_report import ResourceUsage
from compiler.device import device_preset
from compiler.ir import blockIdx, f32, if_, kernel, lower, threadIdx, while_
from compiler.mapping import spatial
from compiler.ops.base import TensorSpec
from compiler.program import Program
from compiler.source import KernelSource
from search.trial import TrialStatus
from search.verify import check_schedule, check_schedules

N = 1000


@dataclass(frozen=True)
class Flavour:
    kind: str  # "right", "off_by_one", "partial", "hang", "oob", "syntax", "scribble"


class Scale:
    """y = 2 * x over N elements, with deliberately broken flavours."""

    name = "scale"

    def __init__(self) -> None:
        self.references = 0

    def build(self, spec: object, schedule: Flavour, target: str) -> Program:
        # The syntax error is written into this kernel's text by ``_syntax_error``.
        with kernel("scale_syntax" if schedule.kind == "syntax" else "scale", block=128, grid=-(-N // 128)) as k:
            x = k.tensor("x", f32, (N,), const=schedule.kind != "scribble")
            y = k.tensor("y", f32, (N,))
            for (i,) in spatial(128).on(threadIdx.x):
                index = blockIdx.x * 128 + i
                limit = {"partial": N - 3, "oob": N + 64}.get(schedule.kind, N)
                with if_(index < limit):
                    factor = 2.0001 if schedule.kind == "off_by_one" else 2.0
                    y[index] = x[index] * factor
                    if schedule.kind == "scribble":  # a right output, then its input overwritten
                        x[index] = 0.0
                if schedule.kind == "hang":
                    with while_(index >= 0):
                        y[index] = x[index]
        return Program.single(lower(k.kernel))

    def inputs(self, spec: object, rng: np.random.Generator) -> dict[str, np.ndarray]:
        return {"x": rng.standard_normal(N).astype(np.float32)}

    def outputs(self, spec: object) -> tuple[TensorSpec, ...]:
        return (TensorSpec("y", (N,), "float32"),)

    def reference(self, spec: object, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.references += 1
        return {"y": inputs["x"].astype(np.float64) * 2.0}


@pytest.fixture(autouse=True)
def _syntax_error(rewrite_cuda) -> None:
    rewrite_cuda({"scale_syntax": lambda text: text.replace(";", " oops;", 1)})


EMU = get_target("emu", gpu=device_preset("h200"))


def check(kind: str, **options):
    return check_schedule(Scale(), None, Flavour(kind), target=EMU, **options)


def test_a_right_kernel_passes_with_usage_for_each_arch():
    result = check("right")
    assert result.status is TrialStatus.OK, result.message
    assert result.error == pytest.approx(0.0, abs=1e-7)
    assert set(result.usage) == {"sm_80", "sm_90"}
    assert result.usage["sm_90"].registers > 0


@pytest.mark.parametrize(("kind", "status", "message"), [
    ("off_by_one", TrialStatus.WRONG_RESULT, "relative error"),
    ("partial", TrialStatus.WRONG_RESULT, "relative error inf"),
    ("syntax", TrialStatus.COMPILE_ERROR, "sm_80"),
    ("oob", TrialStatus.LAUNCH_ERROR, "y"),
])
def test_broken_kernels_fail_with_the_right_status(kind, status, message):
    result = check(kind)
    assert result.status is status
    assert message in result.message


def test_a_hanging_kernel_times_out():
    result = check("hang", timeout_s=1.0)
    assert result.status is TrialStatus.TIMEOUT


@pytest.mark.parametrize(("usage", "problem"), [
    (ResourceUsage(registers=40), None),
    (ResourceUsage(registers=40, spill_stores=8, spill_loads=8), "spills 8 bytes stored, 8 loaded"),
    (ResourceUsage(registers=255), "255 registers x 512 threads > 65536"),
    (ResourceUsage(registers=32, shared_bytes=50_000), "static shared memory 50000 B > 49152 B"),
])
def test_resource_report_rules(usage, problem):
    kernel = KernelSource("k", "", (1, 1, 1), (512, 1, 1), ())
    assert resource_problem(kernel, usage, device_preset("h200")) == problem


def test_dynamic_shared_memory_counts_against_the_opt_in_limit():
    kernel = KernelSource("k", "", (1, 1, 1), (128, 1, 1), (), shared_bytes=230_000)
    assert resource_problem(kernel, ResourceUsage(registers=32, shared_bytes=4096), device_preset("h200")) == (
        "shared memory 234096 B > 232448 B"
    )
    assert resource_problem(kernel, ResourceUsage(registers=32), device_preset("h200")) is None


@dataclass
class RecordingTarget:
    """The emulator, noting which thread compiled and which ran each program."""

    name: str = "recording"
    template_target: str = "cuda"
    compiled_in: set[int] = field(default_factory=set)
    launched_in: set[int] = field(default_factory=set)

    def compile(self, program):
        self.compiled_in.add(threading.get_ident())
        return EMU.compile(program)

    def load(self, artifact):
        return EMU.load(artifact)

    def run(self, loaded, buffers, *, timeout_s: float) -> None:
        self.launched_in.add(threading.get_ident())
        EMU.run(loaded, buffers, timeout_s=timeout_s)


def test_check_schedules_compiles_in_workers_but_launches_in_the_calling_thread():
    target = RecordingTarget()
    operator = Scale()
    kinds = ["right", "off_by_one", "right", "syntax", "partial"]
    done: list[int] = []
    results = check_schedules(operator, None, [Flavour(k) for k in kinds], target=target,
                              jobs=2, on_result=lambda n, _: done.append(n))
    assert [r.status for r in results] == [TrialStatus.OK, TrialStatus.WRONG_RESULT, TrialStatus.OK,
                                           TrialStatus.COMPILE_ERROR, TrialStatus.WRONG_RESULT]
    assert [r.schedule.kind for r in results] == kinds
    assert done == [1, 2, 3, 4, 5]
    assert target.launched_in == {threading.get_ident()}
    assert threading.get_ident() not in target.compiled_in
    assert operator.references == 1  # one oracle for every schedule


def test_each_schedule_gets_its_own_copy_of_the_inputs():
    results = check_schedules(Scale(), None, [Flavour("scribble"), Flavour("right")], target=EMU)
    assert [r.status for r in results] == [TrialStatus.OK, TrialStatus.OK], [r.message for r in results]


def test_check_schedules_needs_at_least_one_job():
    with pytest.raises(ValueError, match="jobs must be at least 1"):
        check_schedules(Scale(), None, [Flavour("right")], target=EMU, jobs=0)
