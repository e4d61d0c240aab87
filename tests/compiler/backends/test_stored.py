"""Stored kernels run from their cache record alone: real cpu builds (matmul in one, two and three launches,
softmax as plain kernel fields) turned into ``KernelResult``s, sent through JSON with the binary in base64,
loaded and run on random inputs against numpy; bad calls are ValueErrors that say what is wrong.

The cuda path is checked as far as a machine without a GPU allows: the CUBINs NVRTC really builds, the
record parsed, arguments read from ``__cuda_array_interface__``, DLPack capsules and pointers, and the
launches made in order, with the right pointers, against a stand-in driver that runs the rowsum kernels in
numpy.
"""

from __future__ import annotations

import base64
import ctypes
import itertools
import json
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from compiler.backends import Artifact, get_target, stored, stored_cuda
from compiler.backends.errors import BackendUnavailableError
from compiler.backends.stored import load_stored, stored_program
from compiler.device import DEVICES
from compiler.numeric import from_storage, poisoned, relative_error
from compiler.ops import get_operator, parse_spec
from compiler.ops.cpu.gemm import SCRATCH_SLOTS
from compiler.ops.cpu.matmul import CpuMatmulSchedule
from compiler.toolchain import detect_gpus
from search.records import program_result
from search.verify import compile_schedule

from .conftest import ROWSUM, CpuRowSum, RowSumSpec

MATMUL = {"op": "matmul", "m": 37, "n": 29, "k": 53, "batch": 2, "layout_b": "col"}
SOFTMAX = {"op": "softmax", "rows": 7, "cols": 131}


def _stored(spec_json: dict[str, Any], *, launches: int | None = None) -> dict[str, Any]:
    """A real build of ``spec_json`` on the cpu (the first schedule with ``launches`` launches), as the
    API would send it: the KernelResult's fields plus its target, the binary in base64, through JSON."""
    target = get_target("cpu")
    operator, spec = get_operator(spec_json["op"]), parse_spec(spec_json)
    space = operator.space(spec, target.device(), 1)
    schedules = space.enumerate().valid if launches is not None else (space.schedule(space.default),)
    for schedule in schedules:
        if launches is None or len(operator.build(spec, schedule, "cpu").launches) == launches:
            break
    else:
        pytest.fail(f"no level-1 schedule of {spec_json} has {launches} launches")
    built = compile_schedule(operator, spec, schedule, target)
    assert built.artifact is not None, built.message
    record = program_result(built.artifact, schedule={}, latency_us=1.0, trials_used=1)
    document = {**record.fields(), "target": "cpu", "binary": base64.b64encode(record.binary or b"").decode()}
    return json.loads(json.dumps(document))


def _case(spec_json: dict[str, Any], seed: int = 0) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], Any]:
    operator, spec = get_operator(spec_json["op"]), parse_spec(spec_json)
    inputs = operator.inputs(spec, np.random.default_rng(seed))
    outputs = {o.name: poisoned(o.shape, o.dtype) for o in operator.outputs(spec)}
    return inputs, outputs, operator.reference(spec, inputs)


def _shapes(spec_json: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    inputs, outputs, _ = _case(spec_json)
    return {name: a.shape for name, a in {**inputs, **outputs}.items()}


@pytest.fixture(scope="module", params=[3, 2, 1], ids=["pack-a-pack-b-compute", "pack-a-compute", "one-launch"])
def matmul_record(request: pytest.FixtureRequest) -> dict[str, Any]:
    return _stored(MATMUL, launches=request.param)


@pytest.fixture(scope="module")
def softmax_record() -> dict[str, Any]:
    return _stored(SOFTMAX)


def _load(document: dict[str, Any], tmp_path, **kwargs: Any):
    return load_stored(document, base64.b64decode(document["binary"]), cache_dir=tmp_path / "stored", **kwargs)


def test_a_stored_matmul_runs_by_keyword_and_matches_numpy(matmul_record, tmp_path) -> None:
    kernel = _load(matmul_record, tmp_path, shapes=_shapes(MATMUL))
    assert kernel.arguments == ("a", "b", "c")
    assert matmul_record["program"] is not None  # workspaces or several launches: the whole program is kept
    inputs, outputs, expected = _case(MATMUL, seed=1)
    kernel(**inputs, **outputs)
    assert relative_error(from_storage(outputs["c"], "float32"), expected["c"]) <= 1e-5
    # Run again on other data: the workspaces carry nothing from the first run into the second.
    inputs, outputs, expected = _case(MATMUL, seed=2)
    kernel(inputs["a"], inputs["b"], outputs["c"])
    assert relative_error(from_storage(outputs["c"], "float32"), expected["c"]) <= 1e-5


def test_a_one_launch_kernel_is_run_from_its_plain_fields(softmax_record, tmp_path) -> None:
    assert softmax_record["program"] is None and len(softmax_record["params"]) == 2
    kernel = _load(softmax_record, tmp_path)
    inputs, outputs, expected = _case(SOFTMAX, seed=3)
    kernel(inputs["x"], y=outputs["y"])
    assert relative_error(from_storage(outputs["y"], "float32"), expected["y"]) <= 1e-5


def test_one_launchs_binary_may_be_stored_bare_and_the_target_is_read_from_it(softmax_record, tmp_path) -> None:
    import io
    import zipfile

    with zipfile.ZipFile(io.BytesIO(base64.b64decode(softmax_record["binary"]))) as archive:
        (name,) = archive.namelist()
        so = archive.read(name)
    assert name.endswith(".so")
    document = {k: v for k, v in softmax_record.items() if k != "target"}
    kernel = load_stored(document, so, cache_dir=tmp_path)
    assert kernel.program.target == "cpu"
    inputs, outputs, expected = _case(SOFTMAX, seed=4)
    kernel(**inputs, **outputs)
    assert relative_error(from_storage(outputs["y"], "float32"), expected["y"]) <= 1e-5


def test_the_shared_objects_go_to_a_private_content_addressed_folder(softmax_record, tmp_path) -> None:
    _load(softmax_record, tmp_path)
    _load(softmax_record, tmp_path)
    folder = tmp_path / "stored"
    assert folder.stat().st_mode & 0o077 == 0
    assert len([p for p in folder.rglob("*") if p.is_file()]) == 1  # the same bytes stored once


@pytest.mark.parametrize(("call", "message"), [
    (lambda k, a, b, c: k(a, b), r"missing arguments \['c'\]"),
    (lambda k, a, b, c: k(a, b, c, c), "takes 3 arguments, got 4 positional"),
    (lambda k, a, b, c: k(a, b, c=c, d=c), "has no argument 'd'"),
    (lambda k, a, b, c: k(a, b, c, a=a), "argument 'a' given twice"),
    (lambda k, a, b, c: k(a.astype(np.float64), b, c), r"argument 'a' must have dtype float32, got float64"),
    (lambda k, a, b, c: k(np.ascontiguousarray(a[..., :-1]), b, c),
     r"argument 'a' must have shape \(2, 37, 53\), got \(2, 37, 52\)"),
    (lambda k, a, b, c: k(a, b, np.asfortranarray(c)), "argument 'c' must be C-contiguous"),
    (lambda k, a, b, c: k(a.tolist(), b, c), "argument 'a' must be a numpy array of float32, got list"),
])
def test_a_bad_call_is_a_value_error_naming_the_argument(matmul_record, tmp_path, call, message) -> None:
    kernel = _load(matmul_record, tmp_path, shapes=_shapes(MATMUL))
    inputs, outputs, _ = _case(MATMUL)
    with pytest.raises(ValueError, match=message):
        call(kernel, inputs["a"], inputs["b"], outputs["c"])
    assert np.isnan(outputs["c"]).all()  # nothing ran


def test_host_dlpack_tensors_are_taken_without_a_copy(softmax_record, tmp_path) -> None:
    class Tensor:  # a host tensor that speaks only DLPack, like a torch cpu tensor
        def __init__(self, array: np.ndarray) -> None:
            self.array = array

        def __dlpack__(self, **kwargs: Any) -> Any:
            return self.array.__dlpack__(**kwargs)

        def __dlpack_device__(self) -> tuple[int, int]:
            return self.array.__dlpack_device__()

    kernel = _load(softmax_record, tmp_path)
    inputs, outputs, expected = _case(SOFTMAX, seed=5)
    kernel(Tensor(inputs["x"]), Tensor(outputs["y"]))
    assert relative_error(from_storage(outputs["y"], "float32"), expected["y"]) <= 1e-5


@pytest.mark.parametrize(("change", "message"), [
    (lambda d, b: ({**d, "target": "emu"}, b), "target 'emu' cannot be run from the cache"),
    (lambda d, b: (d, b""), "no binary"),
    (lambda d, b: (d, b"PK\x03\x04 not really a zip"), "archive is damaged"),
    (lambda d, b: ({**d, "grid": [1, 2]}, b), "grid must be three integers"),
    (lambda d, b: ({**d, "params": [{"name": "x", "dtype": "float64"}]}, b), "unknown dtype 'float64'"),
    (lambda d, b: ({**d, "params": [*d["params"], {"name": "n", "dtype": "int32", "pointer": False}]}, b),
     r"scalar parameters \['n'\] have no stored values"),
])
def test_a_record_that_cannot_run_is_a_value_error(matmul_record, softmax_record, change, message) -> None:
    document = softmax_record
    with pytest.raises(ValueError, match=message):
        stored_program(*change(document, base64.b64decode(document["binary"])))


def test_a_binary_of_the_other_target_is_refused(softmax_record, cuda_record) -> None:
    cubin = stored_program(cuda_record, base64.b64decode(cuda_record["binary"])).launches[0].binary
    with pytest.raises(ValueError, match=r"launch 0 \(softmax_f32\) has no cpu binary \(so\)"):
        stored_program(softmax_record, cubin)


def test_a_shared_object_that_does_not_load_here_is_a_value_error(softmax_record, tmp_path) -> None:
    import io
    import zipfile

    with zipfile.ZipFile(io.BytesIO(base64.b64decode(softmax_record["binary"]))) as archive:
        so = bytearray(archive.read(archive.namelist()[0]))
    so[18:20] = (183).to_bytes(2, "little")  # EM_AARCH64: an object built for another ISA
    with pytest.raises(ValueError, match="softmax_f32's shared object does not load here"):
        load_stored(softmax_record, bytes(so), cache_dir=tmp_path)


def test_a_program_missing_a_launchs_binary_is_refused(matmul_record) -> None:
    launches = matmul_record["program"]["launches"]
    document = {**matmul_record, "program": {**matmul_record["program"], "launches": [*launches, launches[-1]]}}
    with pytest.raises(ValueError, match=f"launch {len(launches)} .* has no cpu binary"):
        stored_program(document, base64.b64decode(matmul_record["binary"]))


# --- the in-launch packing's scratch: a slot per thread of the call ------------------------------------------

#: 17 x 16 blocks of 4 x lanes, more than SCRATCH_SLOTS: the stored program declares the most slots it may use.
LANES = get_target("cpu").device().f32_lanes
PACKING = {"op": "matmul", "m": 17 * 4 - 1, "n": 16 * LANES - 3, "k": 37}


@pytest.fixture(scope="module", params=[False, True], ids=["pack-b-inside", "pack-a-and-b-inside"])
def packing_record(request: pytest.FixtureRequest) -> dict[str, Any]:
    """A matmul packing inside its compute launch, stored as the API would send it."""
    schedule = CpuMatmulSchedule(mr=4, nr=LANES, mc=4, kc=16, nc=LANES, pack_b_inside=True,
                                 pack_a_inside=request.param)
    artifact = get_target("cpu").compile(get_operator("matmul").build(parse_spec(PACKING), schedule, "cpu"))
    assert isinstance(artifact, Artifact), artifact
    record = program_result(artifact, schedule={}, latency_us=1.0, trials_used=1)
    document = {**record.fields(), "target": "cpu", "binary": base64.b64encode(record.binary or b"").decode()}
    return json.loads(json.dumps(document))


def _per_worker(document: dict[str, Any], value: Any) -> dict[str, Any]:
    """``document`` with ``per_worker`` set to ``value`` on its packing scratch (``aw``, ``bw``), or left out
    of every workspace (a record written before the field) where ``value`` is None."""
    program = document["program"]
    workspaces = [{k: v for k, v in w.items() if k != "per_worker"} for w in program["workspaces"]]
    if value is not None:
        workspaces = [{**w, "per_worker": value} if w["name"] in ("aw", "bw") else w for w in workspaces]
    return {**document, "program": {**program, "workspaces": workspaces}}


def _run_packing(document: dict[str, Any], tmp_path, monkeypatch: pytest.MonkeyPatch,
                 workers: int) -> tuple[dict[str, int], float]:
    """The slots the stored kernel allocated for ``aw`` and ``bw``, and its error against numpy."""
    allocated: list[tuple[int, ...]] = []
    aligned_empty = stored.aligned_empty

    def recorded(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        allocated.append(tuple(shape))
        return aligned_empty(shape, dtype)

    monkeypatch.setattr(stored, "aligned_empty", recorded)
    kernel = _load(document, tmp_path, workers=workers, shapes=_shapes(PACKING))
    names = [w.name for w in kernel.program.workspaces]
    slots = {name: shape[0] for name, shape in zip(names, allocated, strict=True) if name in ("aw", "bw")}
    inputs, outputs, expected = _case(PACKING, seed=workers)
    kernel(**inputs, **outputs)
    return slots, relative_error(from_storage(outputs["c"], "float32"), expected["c"])


@pytest.mark.parametrize("workers", [1, 2])
def test_a_stored_slot_per_worker_is_cut_to_the_threads_of_the_calls(packing_record, tmp_path, monkeypatch,
                                                                     workers: int) -> None:
    # The record as the tuner writes it says which workspaces are a slot per thread.
    flags = {w["name"]: w.get("per_worker") for w in packing_record["program"]["workspaces"]}
    assert flags.get("bw") is True and all(flag is (True if name in ("aw", "bw") else None)
                                           for name, flag in flags.items())
    slots, error = _run_packing(packing_record, tmp_path, monkeypatch, workers)
    assert slots and set(slots.values()) == {workers}
    assert error <= 1e-5


def test_a_stored_record_without_per_worker_allocates_every_declared_slot(packing_record, tmp_path,
                                                                          monkeypatch) -> None:
    # Records written before the field run as they did.
    slots, error = _run_packing(_per_worker(packing_record, None), tmp_path, monkeypatch, 2)
    assert slots and set(slots.values()) == {SCRATCH_SLOTS}
    assert error <= 1e-5


def test_a_per_worker_that_is_not_a_boolean_is_refused(packing_record) -> None:
    with pytest.raises(ValueError, match="workspace has no valid 'per_worker' \\(got 'yes'\\)"):
        stored_program(_per_worker(packing_record, "yes"), base64.b64decode(packing_record["binary"]))


# --- cuda: real CUBINs, a stand-in driver -------------------------------------------------------------------

SPEC = RowSumSpec(rows=11, cols=7)
SCHEDULE = CpuRowSum(4, 3)  # two launches and a workspace


class Result:
    CUDA_SUCCESS = SimpleNamespace(name="CUDA_SUCCESS")
    CUDA_ERROR_LAUNCH_FAILED = SimpleNamespace(name="CUDA_ERROR_LAUNCH_FAILED")


class StandInDriver:
    """The calls ``stored_cuda`` makes, over host byte arrays; it "runs" the rowsum kernels in numpy."""

    CUresult = Result
    CUfunction_attribute = SimpleNamespace(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES=8)

    def __init__(self) -> None:
        self.memory: dict[int, bytearray] = {}
        self.handles = itertools.count(1 << 20)
        self.log: list[tuple[Any, ...]] = []
        self.fail = False

    def _ok(self, *values: Any) -> tuple[Any, ...]:
        return (Result.CUDA_SUCCESS, *values)

    def cuInit(self, flags): return self._ok()
    def cuDeviceGet(self, ordinal): return self._ok(("device", ordinal))
    def cuDevicePrimaryCtxRetain(self, device): return self._ok("context")
    def cuDevicePrimaryCtxRelease(self, device):
        self.log.append(("release",))
        return self._ok()

    def cuCtxSetCurrent(self, context): return self._ok()
    def cuFuncSetAttribute(self, *args): return self._ok()
    def cuModuleGetFunction(self, module, name): return self._ok(name.decode())
    def cuModuleUnload(self, module):
        self.log.append(("unload", module))
        return self._ok()

    def cuModuleLoadData(self, image):
        assert image[:4] == b"\x7fELF"  # a real CUBIN
        return self._ok(next(self.handles))

    def CUstream(self, handle):
        return ("stream", handle)

    def cuStreamSynchronize(self, stream):
        self.log.append(("stream sync", stream))
        return self._ok()

    def cuCtxSynchronize(self):
        return (Result.CUDA_ERROR_LAUNCH_FAILED,) if self.fail else self._ok()

    def cuMemAlloc(self, nbytes):
        pointer = next(self.handles)
        self.memory[pointer] = bytearray(nbytes)
        return self._ok(pointer)

    def cuMemFree(self, pointer):
        del self.memory[pointer]
        return self._ok()

    def cuMemcpyHtoD(self, pointer, host, nbytes):
        self.memory[pointer][:nbytes] = ctypes.string_at(host, nbytes)
        return self._ok()

    def cuMemcpyDtoH(self, host, pointer, nbytes):
        ctypes.memmove(host, bytes(self.memory[pointer][:nbytes]), nbytes)
        return self._ok()

    def view(self, pointer: int) -> np.ndarray:
        return np.frombuffer(self.memory[pointer], dtype=np.float32)

    def cuLaunchKernel(self, function, gx, gy, gz, bx, by, bz, shared, stream, args, extra):
        values, types = args
        assert types == (ctypes.c_void_p, ctypes.c_void_p) and stream == 0  # addresses, as cuda-python takes ints
        assert all(type(v) is int for v in values)
        self.log.append(("launch", function, values, (gx, gy, gz), (bx, by, bz)))
        parts = SCHEDULE.parts
        if function == "rowsum_partial":
            x = self.view(values[0]).reshape(SPEC.rows, SPEC.cols)
            partial = self.view(values[1]).reshape(SPEC.rows, parts + 1)
            width = -(-SPEC.cols // parts)
            for p in range(parts):
                partial[:, p] = x[:, p * width:(p + 1) * width].sum(axis=1)
        else:
            partial, out = self.view(values[0]).reshape(SPEC.rows, parts + 1), self.view(values[1])
            out[:] = partial[:, :parts].sum(axis=1)
        return self._ok()


@pytest.fixture(scope="module")
def cuda_record() -> dict[str, Any]:
    built = get_target("cuda", gpu=DEVICES["h200"]).compile(ROWSUM.build(SPEC, SCHEDULE, "cpu"))
    assert isinstance(built, Artifact), built
    record = program_result(built, schedule={}, latency_us=1.0, trials_used=1)
    document = {**record.fields(), "target": "cuda", "binary": base64.b64encode(record.binary or b"").decode()}
    return json.loads(json.dumps(document))


@pytest.fixture
def driver(monkeypatch: pytest.MonkeyPatch) -> StandInDriver:
    fake = StandInDriver()
    monkeypatch.setattr(stored_cuda, "cu", fake)
    return fake


class DeviceArray:
    """Device memory of the stand-in driver, shown through ``__cuda_array_interface__``."""

    def __init__(self, driver: StandInDriver, host: np.ndarray, typestr: str | None = None) -> None:
        self.pointer = driver.cuMemAlloc(host.nbytes)[1]
        driver.cuMemcpyHtoD(self.pointer, host.ctypes.data, host.nbytes)
        self.__cuda_array_interface__ = {"shape": host.shape, "typestr": typestr or host.dtype.str,
                                         "data": (self.pointer, False), "strides": None, "version": 3}


def _rowsum_case() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    x = ROWSUM.inputs(SPEC, np.random.default_rng(7))["x"]
    return x, np.full(SPEC.rows, np.nan, np.float32), x.astype(np.float64).sum(axis=1)


def test_a_stored_cuda_program_keeps_each_launchs_cubin(cuda_record) -> None:
    program = stored_program(cuda_record, base64.b64decode(cuda_record["binary"]))
    assert program.target == "cuda" and program.arguments == ("x", "out")
    assert [launch.kernel.entry for launch in program.launches] == ["rowsum_partial", "rowsum_final"]
    assert all(launch.binary[:4] == b"\x7fELF" for launch in program.launches)
    assert [w.name for w in program.workspaces] == ["partial"]
    untold = {k: v for k, v in cuda_record.items() if k != "target"} | {"program": {
        k: v for k, v in cuda_record["program"].items() if k != "target"}}
    assert stored_program(untold, base64.b64decode(cuda_record["binary"])).target == "cuda"  # EM_CUDA


def test_numpy_arguments_are_copied_in_and_out_and_launches_run_in_order(driver, cuda_record) -> None:
    kernel = load_stored(cuda_record, base64.b64decode(cuda_record["binary"]),
                         shapes={"x": (SPEC.rows, SPEC.cols), "out": (SPEC.rows,)})
    (workspace,) = set(driver.memory)
    x, out, expected = _rowsum_case()
    kernel(x, out)
    assert relative_error(out.astype(np.float64), expected) <= 1e-5
    launches = [entry for entry in driver.log if entry[0] == "launch"]
    assert [entry[1] for entry in launches] == ["rowsum_partial", "rowsum_final"]
    assert launches[0][2][1] == launches[1][2][0] == workspace
    assert launches[0][3] == tuple(cuda_record["program"]["launches"][0]["grid"])
    assert set(driver.memory) == {workspace}  # the copies are freed
    del kernel
    assert not driver.memory and ("release",) in driver.log


def test_device_memory_comes_through_the_interface_and_pointers(driver, cuda_record) -> None:
    kernel = load_stored(cuda_record, base64.b64decode(cuda_record["binary"]))
    x, out, expected = _rowsum_case()
    device_x, device_out = DeviceArray(driver, x), DeviceArray(driver, out)
    kernel(x=device_x, out=device_out.pointer)
    assert relative_error(driver.view(device_out.pointer).astype(np.float64), expected) <= 1e-5


def test_an_arrays_own_stream_is_waited_for_before_the_launches(driver, cuda_record) -> None:
    kernel = load_stored(cuda_record, base64.b64decode(cuda_record["binary"]))
    x, out, _ = _rowsum_case()
    device_x, device_out = DeviceArray(driver, x), DeviceArray(driver, out)
    device_x.__cuda_array_interface__["stream"] = 0x7F00
    device_out.__cuda_array_interface__["stream"] = 1  # the legacy default stream: ordered already
    kernel(device_x, device_out)
    syncs = [i for i, entry in enumerate(driver.log) if entry[0] == "stream sync"]
    first_launch = next(i for i, entry in enumerate(driver.log) if entry[0] == "launch")
    assert [driver.log[i] for i in syncs] == [("stream sync", ("stream", 0x7F00))] and syncs[0] < first_launch


def test_device_arguments_are_checked_where_they_say_their_type(driver, cuda_record) -> None:
    kernel = load_stored(cuda_record, base64.b64decode(cuda_record["binary"]), shapes={"out": (SPEC.rows,)})
    x, out, _ = _rowsum_case()
    with pytest.raises(ValueError, match="argument 'x' must have dtype float32, got float16"):
        kernel(DeviceArray(driver, x.astype(np.float16)), out)
    with pytest.raises(ValueError, match=r"argument 'out' must have shape \(11,\), got \(12,\)"):
        kernel(x, DeviceArray(driver, np.zeros(12, np.float32)))
    with pytest.raises(ValueError, match="argument 'out': its DLPack tensor lives on cpu, not a CUDA device"):
        kernel(x, SimpleNamespace(__dlpack__=out.__dlpack__))
    with pytest.raises(ValueError, match="argument 'x': -1 is not a device pointer"):
        kernel(-1, out)
    with pytest.raises(ValueError, match=r"must be device memory .* got str"):
        kernel("x", out)
    assert not [entry for entry in driver.log if entry[0] == "launch"]


def test_a_kernel_fault_is_reported_by_the_call_that_ran_it(driver, cuda_record) -> None:
    from compiler.backends.errors import KernelRunError

    kernel = load_stored(cuda_record, base64.b64decode(cuda_record["binary"]))
    driver.fail = True
    with pytest.raises(KernelRunError, match="rowsum: kernel failed: CUDA_ERROR_LAUNCH_FAILED"):
        kernel(*_rowsum_case()[:2])


def test_dlpack_capsules_are_read_as_the_producer_wrote_them() -> None:
    array = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    view = stored_cuda.dlpack_view(array.__dlpack__())
    assert (view.pointer, view.device_type, view.code, view.bits, view.lanes) == (array.ctypes.data, 1, 2, 32, 1)
    assert view.shape == (2, 3, 4)
    strided = stored_cuda.dlpack_view(array[:, ::2].__dlpack__())
    assert strided.strides == (12, 8, 1)
    assert not stored_cuda._contiguous(strided.shape, strided.strides)
    assert stored_cuda._contiguous(view.shape, view.strides)


@pytest.mark.skipif(bool(detect_gpus().devices), reason="a GPU is here: the driver loads")
def test_without_a_driver_a_cuda_kernel_is_refused_saying_why(cuda_record) -> None:
    with pytest.raises(BackendUnavailableError, match="cannot run a cuda kernel here: no usable CUDA driver"):
        load_stored(cuda_record, base64.b64decode(cuda_record["binary"]))
