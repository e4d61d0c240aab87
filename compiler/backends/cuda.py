"""The ``cuda`` backend: build with NVRTC for the GPU's arch, load the CUBIN and launch it through the driver.

Deliberately small: one device (ordinal 0), its primary context, plain ``cuMemAlloc`` buffers, one
launch on the default stream, polled against a time limit. A kernel that faults leaves the context
unusable, so callers that must survive faults run launches in a child process.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from cuda.bindings import driver as cu

from compiler.backends.errors import BackendUnavailableError, KernelRunError, KernelTimeoutError
from compiler.backends.nvrtc import compile_source, nvrtc_version
from compiler.diskcache import DiskCache, default_cache_root
from compiler.source import KernelSource, Param
from compiler.toolchain import detect_gpus

_SCALAR_CTYPES: dict[str, Any] = {
    "int32": ctypes.c_int32,
    "uint32": ctypes.c_uint32,
    "float32": ctypes.c_float,
    "bool": ctypes.c_bool,
}
_CACHE_BYTES = 512 << 20


def _ok(result: tuple[Any, ...], what: str) -> Any:
    status, *values = result
    if status != cu.CUresult.CUDA_SUCCESS:
        raise KernelRunError(f"{what} failed: {status.name}")
    return values[0] if len(values) == 1 else tuple(values)


def _arch(device: Any) -> str:
    attribute = cu.CUdevice_attribute
    major = _ok(cu.cuDeviceGetAttribute(attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device), "cc")
    minor = _ok(cu.cuDeviceGetAttribute(attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device), "cc")
    return f"sm_{major}{minor}"


@dataclass(frozen=True)
class CudaRunner:
    name: str = "cuda"

    def unavailable_reason(self) -> str | None:
        gpus = detect_gpus()
        return None if gpus.devices else f"no GPU: {gpus.reason}"

    def fingerprint(self) -> dict[str, str]:
        """What decides a build and its timings, for cache keys: NVRTC's version and the GPU (ordinal 0),
        its compute capability and the driver."""
        gpus = detect_gpus()
        if not gpus.devices:
            raise BackendUnavailableError(f"no GPU: {gpus.reason}")
        device = gpus.devices[0]
        return {"target": self.name, "nvrtc": ".".join(map(str, nvrtc_version())), "device": device.name,
                "arch": device.arch, "driver": gpus.driver_version or "unknown"}

    def prepare(self, kernel: KernelSource) -> None:
        """Nothing to do ahead: the build needs the device's arch, known once a context exists."""

    def run(self, kernel: KernelSource, args: Sequence[np.ndarray | int | float], *, timeout_s: float) -> None:
        reason = self.unavailable_reason()
        if reason is not None:
            raise BackendUnavailableError(reason)
        if len(args) != len(kernel.params):
            raise ValueError(f"{kernel.entry}: expected {len(kernel.params)} arguments, got {len(args)}")
        device = _ok(cu.cuDeviceGet(0), "cuDeviceGet")
        context = _ok(cu.cuDevicePrimaryCtxRetain(device), "cuDevicePrimaryCtxRetain")
        _ok(cu.cuCtxSetCurrent(context), "cuCtxSetCurrent")
        build = compile_source(kernel, _arch(device), cache=DiskCache(default_cache_root() / "cubin", _CACHE_BYTES))
        if not build.ok or build.binary is None:
            message = build.error.message if build.error else "no binary"
            raise KernelRunError(f"{kernel.entry}: NVRTC build failed: {message}")
        module = _ok(cu.cuModuleLoadData(build.binary), "cuModuleLoadData")
        buffers: list[tuple[Any, np.ndarray]] = []
        try:
            function = _ok(cu.cuModuleGetFunction(module, kernel.entry.encode()), "cuModuleGetFunction")
            if kernel.shared_bytes > 48 * 1024:
                attribute = cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
                _ok(cu.cuFuncSetAttribute(function, attribute, kernel.shared_bytes), "cuFuncSetAttribute")
            values, types = self._arguments(kernel.params, args, buffers)
            _ok(
                cu.cuLaunchKernel(function, *kernel.grid, *kernel.block, kernel.shared_bytes, 0, (values, types), 0),
                "cuLaunchKernel",
            )
            self._wait(kernel.entry, timeout_s)
            for pointer, host in buffers:
                _ok(cu.cuMemcpyDtoH(host.ctypes.data, pointer, host.nbytes), "cuMemcpyDtoH")
        finally:
            for pointer, _ in buffers:
                cu.cuMemFree(pointer)
            cu.cuModuleUnload(module)

    @staticmethod
    def _arguments(
        params: Sequence[Param], args: Sequence[np.ndarray | int | float], buffers: list[tuple[Any, np.ndarray]]
    ) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        values: list[Any] = []
        types: list[Any] = []
        for param, arg in zip(params, args, strict=True):
            if param.pointer:
                if not isinstance(arg, np.ndarray) or not arg.flags.c_contiguous:
                    raise ValueError(f"argument {param.name!r} must be a C-contiguous numpy array")
                pointer = _ok(cu.cuMemAlloc(max(arg.nbytes, 1)), "cuMemAlloc")
                buffers.append((pointer, arg))
                _ok(cu.cuMemcpyHtoD(pointer, arg.ctypes.data, arg.nbytes), "cuMemcpyHtoD")
                values.append(pointer)
                types.append(None)
            else:
                values.append(arg)
                types.append(_SCALAR_CTYPES[param.dtype])
        return tuple(values), tuple(types)

    @staticmethod
    def _wait(entry: str, timeout_s: float) -> None:
        event = _ok(cu.cuEventCreate(cu.CUevent_flags.CU_EVENT_DISABLE_TIMING), "cuEventCreate")
        try:
            _ok(cu.cuEventRecord(event, 0), "cuEventRecord")
            deadline = time.monotonic() + timeout_s
            while True:
                (status,) = cu.cuEventQuery(event)
                if status == cu.CUresult.CUDA_SUCCESS:
                    return
                if status != cu.CUresult.CUDA_ERROR_NOT_READY:
                    raise KernelRunError(f"{entry}: kernel failed: {status.name}")
                if time.monotonic() > deadline:
                    raise KernelTimeoutError(f"{entry}: still running after {timeout_s:.1f} s")
                time.sleep(1e-4)
        finally:
            cu.cuEventDestroy(event)


RUNNER = CudaRunner()
