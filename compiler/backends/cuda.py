"""The ``cuda`` target: the CUDA templates' programs built by NVRTC for the GPU, loaded and launched through
the driver, timed with CUDA events.

``compile`` renders each launch as CUDA and builds it for sm_80 and sm_90 (ptxas's report held against
the device's limits, as on the emulator) and for the device's own arch, whose CUBIN the artifact keeps.
Deliberately small otherwise: one device (ordinal 0), its primary context, plain ``cuMemAlloc``
buffers, launches in order on the default stream, polled against a time limit. A kernel that faults
leaves the context unusable, so callers that must survive faults run launches in a child process.

Timing follows ``compiler.backends.timing``'s protocol with a CUDA event pair around each repetition
(the program's launches, back to back); cold caches mean writing a buffer of at least twice the L2
before each repetition, outside the events.
"""

from __future__ import annotations

import ctypes
import time as _time
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from cuda.bindings import driver as cu

from compiler.backends import cuda_build
from compiler.backends.errors import BackendUnavailableError, KernelRunError, KernelTimeoutError
from compiler.backends.nvrtc import DEFAULT_ARCHS, nvrtc_version
from compiler.backends.target import Artifact, CompileFailure, Loaded, artifact_key, program_buffers
from compiler.backends.timing import Protocol, Samples, measure_each
from compiler.device import DeviceSpec, gpu_device
from compiler.diskcache import DiskCache, default_cache_root
from compiler.numeric import poisoned
from compiler.program import Program
from compiler.source import KernelSource
from compiler.toolchain import detect_gpus

_SCALAR_CTYPES: dict[str, Any] = {
    "int32": ctypes.c_int32,
    "uint32": ctypes.c_uint32,
    "float32": ctypes.c_float,
    "bool": ctypes.c_bool,
}
CUBIN_CACHE_BYTES = 512 << 20
#: The L2 flush writes this many times the L2 (and this much when the driver reports no L2 size).
FLUSH_FACTOR = 2
_FALLBACK_FLUSH_BYTES = 256 << 20


def _ok(result: tuple[Any, ...], what: str) -> Any:
    status, *values = result
    if status != cu.CUresult.CUDA_SUCCESS:
        raise KernelRunError(f"{what} failed: {status.name}")
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


@dataclass
class _Handles:
    """What ``load`` opened: the context, one module and function per launch, the workspaces on the GPU."""

    context: Any
    modules: list[Any] = field(default_factory=list)
    functions: list[Any] = field(default_factory=list)
    workspaces: dict[str, Any] = field(default_factory=dict)


def _release(handles: _Handles) -> None:
    for pointer in handles.workspaces.values():
        cu.cuMemFree(pointer)
    for module in handles.modules:
        cu.cuModuleUnload(module)


@dataclass(frozen=True)
class CudaTarget:
    """``gpu``: the device whose limits decide what fits (this machine's GPU by default); ``archs``: what
    NVRTC checks each launch for, besides the device's own arch; ``cubin_cache``: where builds are kept."""

    name: str = "cuda"
    template_target: str = "cuda"
    gpu: DeviceSpec | None = None
    archs: tuple[str, ...] = DEFAULT_ARCHS
    cubin_cache: DiskCache | None = None

    def unavailable_reason(self) -> str | None:
        gpus = detect_gpus()
        return None if gpus.devices else f"no GPU: {gpus.reason}"

    def device(self) -> DeviceSpec:
        return self.gpu or gpu_device()

    def fingerprint(self) -> dict[str, str]:
        """What decides a build and its timings, for cache keys: NVRTC's version and the GPU (ordinal 0),
        its compute capability and the driver."""
        gpus = detect_gpus()
        if not gpus.devices:
            raise BackendUnavailableError(f"no GPU: {gpus.reason}")
        device = gpus.devices[0]
        return {"target": self.name, "nvrtc": ".".join(map(str, nvrtc_version())), "device": device.name,
                "arch": device.arch, "driver": gpus.driver_version or "unknown"}

    def compile(self, program: Program) -> Artifact | CompileFailure:
        sources = cuda_build.render(program)
        if isinstance(sources, CompileFailure):
            return sources
        device = self.device()
        cache = self.cubin_cache or DiskCache(default_cache_root() / "cubin", CUBIN_CACHE_BYTES)
        launches = cuda_build.build_launches(sources, device, self.archs, cache, keep=device.arch)
        if isinstance(launches, CompileFailure):
            return launches
        fingerprint = {"nvrtc": ".".join(map(str, nvrtc_version())), "arch": device.arch, "device": device.name}
        return Artifact(self.name, program, artifact_key(self.name, fingerprint, sources), launches)

    def load(self, artifact: Artifact) -> Loaded:
        """Each launch's CUBIN as a module in the primary context of GPU 0, and the workspaces allocated."""
        reason = self.unavailable_reason()
        if reason is not None:
            raise BackendUnavailableError(reason)
        _ok(cu.cuInit(0), "cuInit")
        device = _ok(cu.cuDeviceGet(0), "cuDeviceGet")
        handles = _Handles(_ok(cu.cuDevicePrimaryCtxRetain(device), "cuDevicePrimaryCtxRetain"))
        _ok(cu.cuCtxSetCurrent(handles.context), "cuCtxSetCurrent")
        try:
            for build in artifact.launches:
                kernel = build.source
                module = _ok(cu.cuModuleLoadData(build.binaries["cubin"]), f"{kernel.entry}: cuModuleLoadData")
                handles.modules.append(module)
                function = _ok(cu.cuModuleGetFunction(module, kernel.entry.encode()), "cuModuleGetFunction")
                if kernel.shared_bytes > 48 * 1024:
                    attribute = cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
                    _ok(cu.cuFuncSetAttribute(function, attribute, kernel.shared_bytes), "cuFuncSetAttribute")
                handles.functions.append(function)
            for workspace in artifact.program.workspaces:
                nbytes = poisoned(workspace.shape, workspace.dtype).nbytes
                handles.workspaces[workspace.name] = _ok(cu.cuMemAlloc(nbytes), "cuMemAlloc")
        except BaseException:
            _release(handles)
            raise
        loaded = Loaded(artifact, dict(handles.workspaces), handles)
        weakref.finalize(loaded, _release, handles)  # modules and workspaces go with the loaded program
        return loaded

    def run(self, loaded: Loaded, buffers: Mapping[str, np.ndarray], *, timeout_s: float) -> None:
        """Copy the arguments in, poison the workspaces, launch in order, wait, copy the arguments back."""
        handles: _Handles = loaded.handles
        _ok(cu.cuCtxSetCurrent(handles.context), "cuCtxSetCurrent")
        program_buffers(loaded, buffers)
        for workspace in loaded.artifact.program.workspaces:
            host = poisoned(workspace.shape, workspace.dtype)
            _ok(cu.cuMemcpyHtoD(handles.workspaces[workspace.name], host.ctypes.data, host.nbytes), "cuMemcpyHtoD")
        device_buffers = _upload(buffers)
        try:
            self._launch_all(loaded, device_buffers)
            _wait(loaded.artifact.program.name, timeout_s)
            for name, (pointer, host) in device_buffers.items():
                _ok(cu.cuMemcpyDtoH(host.ctypes.data, pointer, host.nbytes), f"cuMemcpyDtoH {name}")
        finally:
            for pointer, _ in device_buffers.values():
                cu.cuMemFree(pointer)

    def time(self, loaded: Loaded, buffers: Mapping[str, np.ndarray], protocol: Protocol) -> Samples:
        """Samples of the whole program (its launches back to back), each between two CUDA events."""
        handles: _Handles = loaded.handles
        _ok(cu.cuCtxSetCurrent(handles.context), "cuCtxSetCurrent")
        program_buffers(loaded, buffers)
        device_buffers = _upload(buffers)
        flush_bytes = FLUSH_FACTOR * self.device().l2_bytes or _FALLBACK_FLUSH_BYTES
        scratch = _ok(cu.cuMemAlloc(flush_bytes), "cuMemAlloc") if protocol.flush_caches else None
        start = _ok(cu.cuEventCreate(cu.CUevent_flags.CU_EVENT_DEFAULT), "cuEventCreate")
        stop = _ok(cu.cuEventCreate(cu.CUevent_flags.CU_EVENT_DEFAULT), "cuEventCreate")
        rounds = [0]

        def flush() -> None:
            rounds[0] += 1  # a different value each time: every line of the L2 is dirtied anew
            _ok(cu.cuMemsetD32(scratch, rounds[0], flush_bytes // 4), "cuMemsetD32")

        def timed() -> int:
            _ok(cu.cuEventRecord(start, 0), "cuEventRecord")
            self._launch_all(loaded, device_buffers)
            _ok(cu.cuEventRecord(stop, 0), "cuEventRecord")
            _ok(cu.cuEventSynchronize(stop), "cuEventSynchronize")
            return round(_ok(cu.cuEventElapsedTime(start, stop), "cuEventElapsedTime") * 1e6)

        try:
            return measure_each(timed, protocol, flush=flush if scratch is not None else None)
        finally:
            cu.cuEventDestroy(start)
            cu.cuEventDestroy(stop)
            if scratch is not None:
                cu.cuMemFree(scratch)
            for pointer, _ in device_buffers.values():
                cu.cuMemFree(pointer)

    @staticmethod
    def _launch_all(loaded: Loaded, device_buffers: Mapping[str, tuple[Any, np.ndarray]]) -> None:
        handles: _Handles = loaded.handles
        pointers = {**handles.workspaces, **{name: pointer for name, (pointer, _) in device_buffers.items()}}
        for build, launch, function in zip(loaded.artifact.launches, loaded.artifact.program.launches,
                                           handles.functions, strict=True):
            kernel = build.source
            values, types = _arguments(kernel, launch.bindings, pointers)
            _ok(cu.cuLaunchKernel(function, *kernel.grid, *kernel.block, kernel.shared_bytes, 0, (values, types), 0),
                f"{kernel.entry}: cuLaunchKernel")


def _upload(buffers: Mapping[str, np.ndarray]) -> dict[str, tuple[Any, np.ndarray]]:
    """Each argument copied to a fresh device buffer: name -> (device pointer, host array)."""
    out: dict[str, tuple[Any, np.ndarray]] = {}
    try:
        for name, host in buffers.items():
            if not isinstance(host, np.ndarray) or not host.flags.c_contiguous:
                raise ValueError(f"argument {name!r} must be a C-contiguous numpy array")
            pointer = _ok(cu.cuMemAlloc(max(host.nbytes, 1)), "cuMemAlloc")
            out[name] = (pointer, host)
            _ok(cu.cuMemcpyHtoD(pointer, host.ctypes.data, host.nbytes), "cuMemcpyHtoD")
    except BaseException:
        for pointer, _ in out.values():
            cu.cuMemFree(pointer)
        raise
    return out


def _arguments(kernel: KernelSource, bindings: Sequence[str | int | float],
               pointers: Mapping[str, Any]) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """cuLaunchKernel's (values, types): a device pointer (type None) per buffer, a ctypes scalar else."""
    values: list[Any] = []
    types: list[Any] = []
    for param, binding in zip(kernel.params, bindings, strict=True):
        if param.pointer:
            values.append(pointers[str(binding)])
            types.append(None)
        else:
            values.append(binding)
            types.append(_SCALAR_CTYPES[param.dtype])
    return tuple(values), tuple(types)


def _wait(what: str, timeout_s: float) -> None:
    event = _ok(cu.cuEventCreate(cu.CUevent_flags.CU_EVENT_DISABLE_TIMING), "cuEventCreate")
    try:
        _ok(cu.cuEventRecord(event, 0), "cuEventRecord")
        deadline = _time.monotonic() + timeout_s
        while True:
            (status,) = cu.cuEventQuery(event)
            if status == cu.CUresult.CUDA_SUCCESS:
                return
            if status != cu.CUresult.CUDA_ERROR_NOT_READY:
                raise KernelRunError(f"{what}: kernel failed: {status.name}")
            if _time.monotonic() > deadline:
                raise KernelTimeoutError(f"{what}: still running after {timeout_s:.1f} s")
            _time.sleep(1e-4)
    finally:
        cu.cuEventDestroy(event)


TARGET = CudaTarget()
