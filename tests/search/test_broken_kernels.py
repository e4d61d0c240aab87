"""Deliberately broken kernels, each caught by the verification path that ``warpmap check`` uses.

Every kernel computes one number per row of ``x`` (a sum, or a sum of logarithms); the bugs are
the ones a GPU programmer makes and an emulator can wrongly forgive: a missing accumulator
initialisation, a missing barrier that the fiber order happens to hide, a result that is right only
with exact math, a wrong shuffle offset, a 16-bit index that wraps, an off-by-one bound. The correct
kernels beside them must pass, so the suite cannot pass by failing everything.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pytest

from compiler.backends import get_target
from compiler.device import device_preset
from compiler.ir import f32, kernel, lower
from compiler.ops import operators
from compiler.ops.base import TensorSpec
from compiler.ops.spec import OpSpec
from compiler.program import Launch, Program
from compiler.space import Param, Space
from search.trial import TrialStatus
from search.verify import check_schedules
from service.cli import main

Kind = Literal["sum", "sum_no_init", "sum_no_barrier", "sum_shuffle_offset", "sum_short_index",
               "sum_off_by_one", "log_accurate", "log_fast"]

_WARP_SUM = "  for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);\n"

#: The body of each kernel: one 32-thread block per row unless the kernel says otherwise.
_BODIES: dict[str, str] = {
    "sum": "  float s = 0.0f;\n  for (int c = threadIdx.x; c < cols; c += 32) s += x[blockIdx.x * cols + c];\n"
           + _WARP_SUM + "  if (threadIdx.x == 0) y[blockIdx.x] = s;\n",
    "sum_no_init": "  float s;\n  for (int c = threadIdx.x; c < cols; c += 32) s += x[blockIdx.x * cols + c];\n"
                   + _WARP_SUM + "  if (threadIdx.x == 0) y[blockIdx.x] = s;\n",
    # The last thread adds up what the others left in shared memory, with no barrier between: right
    # whenever it happens to run after all of them, which a fixed fiber order always arranges.
    "sum_no_barrier": "  __shared__ float part[32];\n  float s = 0.0f;\n"
                      "  for (int c = threadIdx.x; c < cols; c += 32) s += x[blockIdx.x * cols + c];\n"
                      "  part[threadIdx.x] = s;\n"
                      "  if (threadIdx.x == 31) {\n    float t = 0.0f;\n"
                      "    for (int i = 0; i < 32; ++i) t += part[i];\n    y[blockIdx.x] = t;\n  }\n",
    "sum_shuffle_offset": "  float s = 0.0f;\n"
                          "  for (int c = threadIdx.x; c < cols; c += 32) s += x[blockIdx.x * cols + c];\n"
                          "  for (int off = 32; off > 1; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);\n"
                          "  if (threadIdx.x == 0) y[blockIdx.x] = s;\n",
    # The row index wraps at 65,536: rows past it are never written (and rows below it twice).
    "sum_short_index": "  const unsigned short row = blockIdx.x;\n  float s = 0.0f;\n"
                       "  for (int c = threadIdx.x; c < cols; c += 32) s += x[row * cols + c];\n"
                       + _WARP_SUM + "  if (threadIdx.x == 0) y[row] = s;\n",
    "sum_off_by_one": "  float s = 0.0f;\n"
                      "  for (int c = threadIdx.x; c <= cols; c += 32) s += x[blockIdx.x * cols + c];\n"
                      + _WARP_SUM + "  if (threadIdx.x == 0) y[blockIdx.x] = s;\n",
    "log_accurate": "  float s = 0.0f;\n"
                    "  for (int c = threadIdx.x; c < cols; c += 32) s += logf(x[blockIdx.x * cols + c]);\n"
                    + _WARP_SUM + "  if (threadIdx.x == 0) y[blockIdx.x] = s;\n",
    # logf is within 1 ulp of log(v), but __logf only within 2^-21.41 absolutely on [0.5, 2]: near
    # v = 1, where log(v) is small, that is a relative error far above float32's tolerance.
    "log_fast": "  float s = 0.0f;\n"
                "  for (int c = threadIdx.x; c < cols; c += 32) s += __logf(x[blockIdx.x * cols + c]);\n"
                + _WARP_SUM + "  if (threadIdx.x == 0) y[blockIdx.x] = s;\n",
}


@dataclass(frozen=True)
class Kernel:
    """The one schedule of a kind: which kernel body to build."""

    kind: str


class RowSpec(OpSpec):
    op: Literal["rowbug"] = "rowbug"
    dtype: Literal["float32"] = "float32"
    kind: Kind
    rows: int
    cols: int


class RowOperator:
    """A test operator: one kernel per ``kind``, its space that kernel alone."""

    name = "rowbug"
    spec_model = RowSpec

    def space(self, spec: RowSpec, device: object, level: int) -> Space[Kernel]:
        return Space(template="rowbug", params=(Param("kind", (spec.kind,)),), make=lambda p: Kernel(**p))

    def build(self, spec: RowSpec, schedule: Kernel, target: str) -> Program:
        # The IR kernel gives the parameters and launch shape; its text is the hand-written one (see
        # ``_TEXTS``), since the IR cannot make these bugs.
        with kernel(f"rowbug_{schedule.kind}", block=32, grid=spec.rows) as k:
            k.tensor("x", f32, (spec.rows * spec.cols,), const=True)
            k.tensor("y", f32, (spec.rows,))
            k.scalar("cols")
        return Program("rowbug", ("x", "y"), (Launch(lower(k.kernel), ("x", "y", spec.cols)),))
    def inputs(self, spec: RowSpec, rng: np.random.Generator) -> dict[str, np.ndarray]:
        low, high = (1.005, 1.02) if spec.kind.startswith("log") else (-1.0, 1.0)
        return {"x": rng.uniform(low, high, (spec.rows, spec.cols)).astype(np.float32)}

    def outputs(self, spec: RowSpec) -> tuple[TensorSpec, ...]:
        return (TensorSpec("y", (spec.rows,), "float32"),)

    def reference(self, spec: RowSpec, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        x = inputs["x"].astype(np.float64)
        return {"y": (np.log(x) if spec.kind.startswith("log") else x).sum(axis=1)}

    def flops(self, spec: RowSpec) -> int:
        return spec.rows * spec.cols

    def min_bytes(self, spec: RowSpec) -> int:
        return 4 * spec.rows * (spec.cols + 1)


#: Each kind, a spec that shows its bug, and the verdict verification must reach: the status and a
#: phrase of its message.
CASES: dict[str, tuple[dict[str, int], TrialStatus, str]] = {
    "sum": ({"rows": 7, "cols": 77}, TrialStatus.OK, ""),
    # One term per row: summing many would average the GPU's errors (their signs vary) below the bound.
    "log_accurate": ({"rows": 64, "cols": 1}, TrialStatus.OK, ""),
    "sum_no_init": ({"rows": 7, "cols": 77}, TrialStatus.WRONG_RESULT, "relative error"),
    "sum_no_barrier": ({"rows": 7, "cols": 77}, TrialStatus.LAUNCH_ERROR, "race"),
    "sum_shuffle_offset": ({"rows": 7, "cols": 77}, TrialStatus.WRONG_RESULT, "relative error"),
    "sum_short_index": ({"rows": 65_541, "cols": 1}, TrialStatus.WRONG_RESULT, "relative error"),
    "sum_off_by_one": ({"rows": 7, "cols": 77}, TrialStatus.WRONG_RESULT, "relative error"),
    "log_fast": ({"rows": 64, "cols": 1}, TrialStatus.WRONG_RESULT, "relative error"),
}


def _text(kind: str) -> str:
    return (f'extern "C" __global__ void __launch_bounds__(32) rowbug_{kind}(const float* __restrict__ x, '
            f"float* __restrict__ y, int cols) {{\n" + _BODIES[kind] + "}\n")


@pytest.fixture
def rowbug(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, rewrite_cuda: Callable[[Any], None]) -> RowOperator:
    monkeypatch.setenv("WARPMAP_CACHE_DIR", str(tmp_path))
    rewrite_cuda({f"rowbug_{kind}": lambda _, kind=kind: _text(kind) for kind in _BODIES})
    operator = RowOperator()
    monkeypatch.setitem(operators(), operator.name, operator)
    return operator


@pytest.mark.parametrize("kind", sorted(CASES))
def test_verification_gives_each_kernel_its_verdict(rowbug: RowOperator, kind: str) -> None:
    shape, status, phrase = CASES[kind]
    spec = RowSpec(kind=kind, **shape)
    (result,) = check_schedules(rowbug, spec, [Kernel(kind)], target=get_target("emu", gpu=device_preset("h200")),
                                timeout_s=60.0)
    assert result.status is status, result.message
    assert phrase in result.message


def test_warpmap_check_fails_each_broken_kernel_with_a_clear_verdict(
    rowbug: RowOperator, capsys: pytest.CaptureFixture[str]
) -> None:
    verdicts: dict[str, tuple[int, str]] = {}
    for kind, (shape, _, _) in CASES.items():
        spec: dict[str, Any] = {"op": "rowbug", "kind": kind, **shape}
        code = main(["check", "--spec", json.dumps(spec)])
        verdicts[kind] = (code, capsys.readouterr().out)
    for kind, (_, status, phrase) in CASES.items():
        code, out = verdicts[kind]
        if status is TrialStatus.OK:
            assert code == 0 and "1 passed, 0 failed, 0 pruned" in out, out
        else:
            assert code == 1 and "FAIL" in out and phrase in out and "0 passed, 1 failed" in out, out
