"""The default verification path (``search.verify`` with the ``emu`` runner, as ``warpmap check`` uses
it) reports a kernel that stages data through shared memory without its ``__syncthreads()``, even
where the emulator's fixed fiber order would have produced the right numbers."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pytest

from compiler.backends import get_target
from compiler.device import device_preset
from compiler.ir import blockIdx, else_, f32, if_, kernel, let, lower, shared, sync_threads, threadIdx
from compiler.ops.base import TensorSpec
from compiler.program import Program
from search.trial import TrialStatus
from search.verify import check_schedule


class Shift:
    """y[i] = x[i - 1] within each block of 128 (y[i] = x[i] at a block's first element); the spec is
    the number of blocks.

    Each thread stages x[i] and then reads its left neighbour's slot. The fibers of a block run in
    thread order, so without the barrier the neighbour has always written first: right numbers, by luck.
    """

    name = "shift"

    def build(self, spec: int, schedule: str, target: str) -> Program:
        with kernel("shift", block=128, grid=spec) as k:
            x = k.tensor("x", f32, (spec * 128,), const=True)
            y = k.tensor("y", f32, (spec * 128,))
            s = shared("s", f32, (128,))
            t = threadIdx.x
            i = let("i", blockIdx.x * 128 + t)
            s[t] = x[i]
            if schedule == "barrier":
                sync_threads()
            with if_(t > 0):
                y[i] = s[t - 1]
            with else_():
                y[i] = x[i]
        return Program.single(lower(k.kernel))

    def inputs(self, spec: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
        return {"x": rng.standard_normal(spec * 128).astype(np.float32)}

    def outputs(self, spec: int) -> tuple[TensorSpec, ...]:
        return (TensorSpec("y", (spec * 128,), "float32"),)

    def reference(self, spec: object, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        x = inputs["x"].astype(np.float64).reshape(-1, 128)
        return {"y": np.concatenate([x[:, :1], x[:, :-1]], axis=1).reshape(-1)}


@pytest.fixture
def check(tmp_path, monkeypatch):
    monkeypatch.setenv("WARPMAP_CACHE_DIR", str(tmp_path))  # the default runner's cache, here

    def run(blocks: int, schedule: str):
        return check_schedule(Shift(), blocks, schedule, target=get_target("emu", gpu=device_preset("h200")))

    return run


# 4 blocks: the checked build runs the whole grid; 100: it runs a sample, the plain build the grid.
@pytest.mark.parametrize("blocks", [4, 100])
def test_the_kernel_with_its_barrier_passes(check, blocks: int) -> None:
    result = check(blocks, "barrier")
    assert result.status is TrialStatus.OK, result.message


@pytest.mark.parametrize("blocks", [4, 100])
def test_a_missing_barrier_fails_verification_as_a_race(check, blocks: int) -> None:
    result = check(blocks, "no barrier")
    assert result.status is TrialStatus.LAUNCH_ERROR, result
    assert "shared-memory race in kernel 'shift'" in result.message
    assert "thread (1,0,0): it reads __shared__ 's' at byte 0" in result.message
    assert "which thread (0,0,0) wrote with no barrier between" in result.message
