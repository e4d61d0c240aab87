"""Running a cpu template's Program on the host, against numpy, outputs and workspaces poisoned first.

The ``run_on_cpu(program, inputs, outputs)`` fixture renders each launch with the host dialect, compiles
it with the cpu backend, runs the launches in order on one set of buffers (outputs and workspaces NaN
first) and returns the outputs; ``assert_matches(got, expected, outputs)`` compares them with the
operator's float64 reference under ``compiler.numeric.tolerance``. Every test here is skipped where the
host has no compiler with OpenMP.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
import pytest

from compiler.backends import cpu
from compiler.codegen.cpp import render_host
from compiler.numeric import poisoned, relative_error, tolerance
from compiler.ops.base import TensorSpec
from compiler.program import Program, launch_arguments

_UNAVAILABLE = cpu.unavailable_reason()

RunOnCpu = Callable[[Program, Mapping[str, np.ndarray], tuple[TensorSpec, ...]], dict[str, np.ndarray]]


@pytest.fixture(autouse=True)
def _requires_cpu() -> None:
    if _UNAVAILABLE is not None:
        pytest.skip(_UNAVAILABLE)


@pytest.fixture(scope="session")
def cpu_config(tmp_path_factory: pytest.TempPathFactory) -> cpu.CpuConfig:
    return cpu.CpuConfig(cache_dir=Path(tmp_path_factory.mktemp("cpu-builds")))


@pytest.fixture
def run_on_cpu(cpu_config: cpu.CpuConfig) -> RunOnCpu:
    def run(program: Program, inputs: Mapping[str, np.ndarray],
            outputs: tuple[TensorSpec, ...]) -> dict[str, np.ndarray]:
        results = {out.name: poisoned(out.shape, out.dtype) for out in outputs}
        buffers = {name: inputs[name].copy() if name in inputs else results[name] for name in program.arguments}
        buffers.update({w.name: poisoned(w.shape, w.dtype) for w in program.workspaces})
        for launch, args in zip(program.launches, launch_arguments(program, buffers), strict=True):
            artifact = cpu.compile(render_host(launch.kernel), cpu_config)
            assert not isinstance(artifact, cpu.CompileFailure), f"{artifact.message}\n{artifact.log}"
            cpu.run(cpu.load(artifact, cpu_config), args)
        return results

    return run


Matches = Callable[[Mapping[str, np.ndarray], Mapping[str, np.ndarray], tuple[TensorSpec, ...]], None]


@pytest.fixture
def assert_matches() -> Matches:
    return _assert_matches


def _assert_matches(got: Mapping[str, np.ndarray], expected: Mapping[str, np.ndarray],
                    outputs: tuple[TensorSpec, ...]) -> None:
    """Each output within the tolerance of its dtype and reduction length of the float64 reference."""
    for out in outputs:
        error = relative_error(got[out.name].reshape(out.shape).astype(np.float64), expected[out.name])
        allowed = tolerance(out.dtype, out.reduction)
        assert error <= allowed, f"{out.name}: relative error {error:.3g} > {allowed:.3g}"
