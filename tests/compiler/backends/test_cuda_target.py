"""The cuda target's load, run and time against a stand-in driver (no GPU here): buffers by name, workspaces
poisoned on the device before each run, launches in order with the right pointers, CUDA events per
repetition and an L2 flush of at least twice the L2.

The stand-in keeps device memory as byte arrays and "runs" the two row-sum kernels in numpy, so the
data that comes back is only right when every copy and binding is.
"""

from __future__ import annotations

import ctypes
import dataclasses
import enum
import itertools
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from compiler.backends import Artifact, get_target
from compiler.backends import cuda as cuda_module
from compiler.backends.errors import KernelRunError
from compiler.backends.timing import Protocol
from compiler.device import DEVICES
from compiler.numeric import relative_error

from .conftest import ROWSUM, CpuRowSum, RowSumSpec

SPEC = RowSumSpec(rows=11, cols=7)
SCHEDULE = CpuRowSum(4, 3)  # two launches and a workspace; plain IR, so it renders as CUDA too


class Result(enum.Enum):
    CUDA_SUCCESS = 0
    CUDA_ERROR_NOT_READY = 600
    CUDA_ERROR_LAUNCH_FAILED = 719


class FakeDriver:
    """The part of ``cuda.bindings.driver`` the target calls, over host byte arrays."""

    CUresult = Result
    CUevent_flags = SimpleNamespace(CU_EVENT_DEFAULT=0, CU_EVENT_DISABLE_TIMING=2)
    CUfunction_attribute = SimpleNamespace(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES=8)

    def __init__(self, fail_launch: bool = False) -> None:
        self.memory: dict[int, bytearray] = {}
        self.handles = itertools.count(1000)
        self.log: list[tuple[Any, ...]] = []
        self.fail_launch = fail_launch

    def _ok(self, *values: Any) -> tuple[Any, ...]:
        return (Result.CUDA_SUCCESS, *values)

    def cuInit(self, flags: int): return self._ok()
    def cuDeviceGet(self, ordinal: int): return self._ok(0)
    def cuDevicePrimaryCtxRetain(self, device: int): return self._ok("context")
    def cuCtxSetCurrent(self, context: str): return self._ok()
    def cuFuncSetAttribute(self, *args: Any): return self._ok()
    def cuEventCreate(self, flags: int): return self._ok(next(self.handles))
    def cuEventRecord(self, event: int, stream: int): return self._ok()
    def cuEventSynchronize(self, event: int): return self._ok()
    def cuEventElapsedTime(self, start: int, stop: int): return self._ok(0.25)
    def cuEventDestroy(self, event: int): return self._ok()

    def cuEventQuery(self, event: int):
        return (Result.CUDA_ERROR_LAUNCH_FAILED if self.fail_launch else Result.CUDA_SUCCESS,)

    def cuModuleLoadData(self, image: bytes):
        assert image[:4] == b"\x7fELF"
        return self._ok(next(self.handles))

    def cuModuleGetFunction(self, module: int, name: bytes):
        return self._ok(name.decode())

    def cuModuleUnload(self, module: int):
        self.log.append(("unload", module))
        return self._ok()

    def cuMemAlloc(self, nbytes: int):
        pointer = next(self.handles)
        self.memory[pointer] = bytearray(nbytes)
        return self._ok(pointer)

    def cuMemFree(self, pointer: int):
        del self.memory[pointer]
        return self._ok()

    def cuMemcpyHtoD(self, pointer: int, host: int, nbytes: int):
        self.memory[pointer][:nbytes] = ctypes.string_at(host, nbytes)
        self.log.append(("htod", pointer, nbytes))
        return self._ok()

    def cuMemcpyDtoH(self, host: int, pointer: int, nbytes: int):
        ctypes.memmove(host, bytes(self.memory[pointer][:nbytes]), nbytes)
        return self._ok()

    def cuMemsetD32(self, pointer: int, value: int, count: int):
        self.log.append(("memset", pointer, 4 * count))
        return self._ok()

    def view(self, pointer: int) -> np.ndarray:
        return np.frombuffer(self.memory[pointer], dtype=np.float32)

    def cuLaunchKernel(self, function: str, gx, gy, gz, bx, by, bz, shared, stream, args, extra):
        values, types = args
        assert types == (None, None)  # both parameters are device pointers, passed as such
        self.log.append(("launch", function, values))
        rows, cols, parts = SPEC.rows, SPEC.cols, SCHEDULE.parts
        if function == "rowsum_partial":
            x, partial = self.view(values[0]).reshape(rows, cols), self.view(values[1]).reshape(rows, parts + 1)
            width = -(-cols // parts)
            for p in range(parts):
                partial[:, p] = x[:, p * width:(p + 1) * width].sum(axis=1)
        else:
            partial, out = self.view(values[0]).reshape(rows, parts + 1), self.view(values[1])
            out[:] = partial[:, :parts].sum(axis=1)
        return self._ok()


@pytest.fixture
def driver(monkeypatch: pytest.MonkeyPatch) -> FakeDriver:
    fake = FakeDriver()
    monkeypatch.setattr(cuda_module, "cu", fake)
    monkeypatch.setattr(cuda_module.CudaTarget, "unavailable_reason", lambda self: None)
    return fake


@pytest.fixture(scope="module")
def artifact() -> Artifact:
    built = get_target("cuda", gpu=DEVICES["h200"]).compile(ROWSUM.build(SPEC, SCHEDULE, "cpu"))
    assert isinstance(built, Artifact), built
    return built


def _buffers() -> tuple[dict[str, np.ndarray], np.ndarray]:
    x = ROWSUM.inputs(SPEC, np.random.default_rng(1))["x"]
    return {"x": x, "out": np.full(SPEC.rows, np.nan, np.float32)}, x.astype(np.float64).sum(axis=1)


def test_a_run_moves_the_arguments_poisons_the_workspace_and_launches_in_order(driver, artifact) -> None:
    target = get_target("cuda", gpu=DEVICES["h200"])
    loaded = target.load(artifact)
    workspace = loaded.workspaces["partial"]
    driver.view(workspace)[:] = 0.0  # what a previous run might have left
    buffers, expected = _buffers()
    target.run(loaded, buffers, timeout_s=5)
    assert relative_error(buffers["out"].astype(np.float64), expected) <= 1e-5
    launches = [entry for entry in driver.log if entry[0] == "launch"]
    assert [entry[1] for entry in launches] == ["rowsum_partial", "rowsum_final"]
    assert launches[0][2][1] == launches[1][2][0] == workspace  # both launches bind the one workspace
    first_launch = driver.log.index(launches[0])
    assert ("htod", workspace, 4 * SPEC.rows * (SCHEDULE.parts + 1)) in driver.log[:first_launch]
    assert np.isnan(driver.view(workspace).reshape(SPEC.rows, -1)[:, SCHEDULE.parts]).all()  # poison, unwritten
    assert set(driver.memory) == {workspace}  # the arguments' device buffers are freed after the run


def test_a_failed_launch_is_a_kernel_run_error(driver, artifact) -> None:
    target = get_target("cuda", gpu=DEVICES["h200"])
    loaded = target.load(artifact)
    driver.fail_launch = True
    with pytest.raises(KernelRunError, match="rowsum: kernel failed: CUDA_ERROR_LAUNCH_FAILED"):
        target.run(loaded, _buffers()[0], timeout_s=5)


def test_timing_uses_events_and_flushes_twice_the_l2(driver, artifact) -> None:
    gpu = dataclasses.replace(DEVICES["h200"], l2_bytes=1 << 20)
    target = get_target("cuda", gpu=gpu)
    loaded = target.load(artifact)
    protocol = Protocol(warmup_ms=0, min_repetitions=5, target_ms=0, flush_caches=True)
    samples = target.time(loaded, _buffers()[0], protocol)
    assert samples.samples_ns == (250_000,) * 5  # the events' 0.25 ms, not the host clock
    flushes = [entry for entry in driver.log if entry[0] == "memset"]
    assert len(flushes) == 5 and all(nbytes >= 2 * gpu.l2_bytes for _, _, nbytes in flushes)
    assert set(driver.memory) == set(loaded.workspaces.values())  # scratch and arguments freed


def test_unloading_frees_the_workspaces_and_modules(driver, artifact) -> None:
    loaded = get_target("cuda", gpu=DEVICES["h200"]).load(artifact)
    assert len(driver.memory) == 1
    del loaded
    assert not driver.memory and sum(entry[0] == "unload" for entry in driver.log) == 2
