"""A stored program's CUBINs run through the CUDA driver (``compiler.backends.stored`` calls this).

An argument is device memory the caller owns, given as an object with ``__cuda_array_interface__`` (CuPy,
Numba, PyTorch), one with ``__dlpack__`` whose tensor lives on a CUDA device, or an int (a device pointer,
taken on trust); dtype, shape (when known) and C-contiguity are checked wherever the object says them. A
numpy array is copied to the device and back around the run, for convenience. The launches go in order on
the legacy default stream, which orders them after work the caller queued on blocking streams, and the call
returns when they are done (a fault is an error here, not at some later call).

The modules, workspaces and the retained primary context of GPU ``device`` live as long as the callable.
"""

from __future__ import annotations

import ctypes
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
from cuda.bindings import driver as cu

from compiler.backends.errors import BackendUnavailableError, KernelRunError
from compiler.backends.stored import StoredProgram, host_array
from compiler.numeric import STORAGE_DTYPES

_SCALAR_CTYPES: Mapping[str, Any] = {"int32": ctypes.c_int32, "uint32": ctypes.c_uint32,
                                     "float32": ctypes.c_float, "bool": ctypes.c_bool}
#: DLPack's (type code, bits) for each parameter dtype: int 0, uint 1, float 2, bfloat 4, bool 6.
_DLPACK_TYPES: Mapping[str, frozenset[tuple[int, int]]] = {
    "float32": frozenset({(2, 32)}), "float16": frozenset({(2, 16)}), "bfloat16": frozenset({(4, 16), (1, 16)}),
    "int32": frozenset({(0, 32)}), "uint32": frozenset({(1, 32)}), "bool": frozenset({(6, 8), (1, 8)}),
}
_DLPACK_CUDA_DEVICES = {2: "cuda", 13: "cuda managed"}
_DLPACK_DEVICE_NAMES = {1: "cpu", 3: "cuda host", 4: "opencl", 7: "vulkan", 8: "metal", 10: "rocm"}


class _DLDevice(ctypes.Structure):
    _fields_ = (("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32))


class _DLDataType(ctypes.Structure):
    _fields_ = (("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16))


class _DLTensor(ctypes.Structure):
    _fields_ = (("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64))


@dataclass(frozen=True)
class DLPackView:
    """What a (legacy, unversioned) DLPack capsule says about its tensor."""

    pointer: int
    device_type: int
    device_id: int
    code: int
    bits: int
    lanes: int
    shape: tuple[int, ...]
    strides: tuple[int, ...] | None  # in elements; None means C-contiguous


def dlpack_view(capsule: Any) -> DLPackView:
    """Read a ``"dltensor"`` capsule (the capsule stays the caller's: it keeps the memory alive)."""
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, (ctypes.py_object, ctypes.c_char_p)
    try:
        address = get(capsule, b"dltensor")
    except ValueError as exc:
        raise ValueError(f"not an unused DLPack tensor capsule: {exc}") from exc
    # DLManagedTensor starts with its DLTensor.
    tensor = _DLTensor.from_address(address)
    shape = tuple(tensor.shape[i] for i in range(tensor.ndim))
    strides = tuple(tensor.strides[i] for i in range(tensor.ndim)) if tensor.strides else None
    return DLPackView((tensor.data or 0) + tensor.byte_offset, tensor.device.device_type, tensor.device.device_id,
                      tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes, shape, strides)


def _contiguous(shape: tuple[int, ...], strides: tuple[int, ...] | None, itemsize: int = 1) -> bool:
    if strides is None:
        return True
    expected = itemsize
    for extent, stride in zip(reversed(shape), reversed(strides), strict=True):
        if extent != 1 and stride != expected:
            return False
        expected *= extent
    return True


def _check_shape(name: str, got: tuple[int, ...], shape: tuple[int, ...] | None) -> None:
    if shape is not None and got != tuple(shape):
        raise ValueError(f"argument {name!r} must have shape {tuple(shape)}, got {got}")


def device_pointer(name: str, value: Any, dtype: str, shape: tuple[int, ...] | None) -> tuple[int, Any]:
    """(device pointer, what must stay alive while it is used) for an argument that is device memory; a
    ValueError saying why ``value`` is not usable as ``dtype`` memory of ``shape``."""
    if isinstance(value, int | np.integer) and not isinstance(value, bool):
        if int(value) <= 0:
            raise ValueError(f"argument {name!r}: {value} is not a device pointer")
        return int(value), None
    interface = getattr(value, "__cuda_array_interface__", None)
    if interface is not None:
        want = STORAGE_DTYPES[dtype]
        if np.dtype(interface["typestr"]) != want:
            raise ValueError(f"argument {name!r} must have dtype {want}, got {np.dtype(interface['typestr'])}")
        got = tuple(int(d) for d in interface["shape"])
        _check_shape(name, got, shape)
        strides = interface.get("strides")
        if not _contiguous(got, None if strides is None else tuple(strides), want.itemsize):
            raise ValueError(f"argument {name!r} must be C-contiguous")
        stream = interface.get("stream")
        if isinstance(stream, int) and stream > 2:
            # The producer's own stream (1 and 2 are the default streams, which the launches' legacy default
            # stream is ordered with already): wait for its pending writes, as version 3 asks of a consumer.
            _ok(cu.cuStreamSynchronize(cu.CUstream(stream)), f"argument {name!r}: cuStreamSynchronize")
        return int(interface["data"][0]), value
    if hasattr(value, "__dlpack__"):
        capsule = value.__dlpack__()
        view = dlpack_view(capsule)
        if view.device_type not in _DLPACK_CUDA_DEVICES:
            where = _DLPACK_DEVICE_NAMES.get(view.device_type, f"device type {view.device_type}")
            raise ValueError(f"argument {name!r}: its DLPack tensor lives on {where}, not a CUDA device")
        if (view.code, view.bits) not in _DLPACK_TYPES[dtype] or view.lanes != 1:
            raise ValueError(f"argument {name!r} must be {dtype}; its DLPack type is code {view.code}, "
                             f"{view.bits} bits, {view.lanes} lanes")
        _check_shape(name, view.shape, shape)
        if not _contiguous(view.shape, view.strides):
            raise ValueError(f"argument {name!r} must be C-contiguous")
        return view.pointer, capsule
    raise ValueError(f"argument {name!r} must be device memory (__cuda_array_interface__, DLPack or a "
                     f"pointer) or a numpy array, got {type(value).__name__}")


def _ok(result: tuple[Any, ...], what: str) -> Any:
    status, *values = result
    if status != cu.CUresult.CUDA_SUCCESS:
        raise KernelRunError(f"{what} failed: {getattr(status, 'name', status)}")
    return None if not values else values[0] if len(values) == 1 else tuple(values)


@dataclass
class _Handles:
    device: Any
    context: Any = None
    modules: list[Any] | None = None
    workspaces: dict[str, Any] | None = None


def _release(handles: _Handles) -> None:
    for pointer in (handles.workspaces or {}).values():
        cu.cuMemFree(pointer)
    for module in handles.modules or ():
        cu.cuModuleUnload(module)
    if handles.context is not None:
        cu.cuDevicePrimaryCtxRelease(handles.device)


def _open(program: StoredProgram, ordinal: int) -> tuple[_Handles, list[Any]]:
    try:
        _ok(cu.cuInit(0), "cuInit")
    except Exception as exc:  # a failing status, or no libcuda at all (the bindings raise then)
        raise BackendUnavailableError(f"cannot run a cuda kernel here: no usable CUDA driver ({exc})") from exc
    handles = _Handles(_ok(cu.cuDeviceGet(ordinal), f"cuDeviceGet({ordinal})"), modules=[], workspaces={})
    handles.context = _ok(cu.cuDevicePrimaryCtxRetain(handles.device), "cuDevicePrimaryCtxRetain")
    functions = []
    try:
        _ok(cu.cuCtxSetCurrent(handles.context), "cuCtxSetCurrent")
        for launch in program.launches:
            kernel = launch.kernel
            module = _ok(cu.cuModuleLoadData(launch.binary), f"{kernel.entry}: cuModuleLoadData")
            handles.modules.append(module)  # type: ignore[union-attr]
            function = _ok(cu.cuModuleGetFunction(module, kernel.entry.encode()),
                           f"{kernel.entry}: cuModuleGetFunction")
            if kernel.shared_bytes > 48 * 1024:
                attribute = cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
                _ok(cu.cuFuncSetAttribute(function, attribute, kernel.shared_bytes), "cuFuncSetAttribute")
            functions.append(function)
        for workspace in program.workspaces:
            nbytes = workspace.elements * STORAGE_DTYPES[workspace.dtype].itemsize
            handles.workspaces[workspace.name] = _ok(cu.cuMemAlloc(nbytes), "cuMemAlloc")  # type: ignore[index]
    except BaseException:
        _release(handles)
        raise
    return handles, functions


def runner(program: StoredProgram, shapes: Mapping[str, tuple[int, ...]] | None,
           ordinal: int) -> Callable[[Mapping[str, Any]], None]:
    """The run function of ``load_stored`` for a cuda program on GPU ``ordinal``."""
    handles, functions = _open(program, ordinal)

    def run(buffers: Mapping[str, Any]) -> None:
        _ok(cu.cuCtxSetCurrent(handles.context), "cuCtxSetCurrent")
        pointers: dict[str, Any] = dict(handles.workspaces or {})
        alive: list[Any] = []
        copies: list[tuple[str, Any, np.ndarray]] = []  # numpy arguments: device copy, host array
        try:
            for name, value in buffers.items():
                shape = (shapes or {}).get(name)
                if isinstance(value, np.ndarray):
                    host = host_array(name, value, program.dtypes[name], shape)
                    pointer = _ok(cu.cuMemAlloc(max(host.nbytes, 1)), "cuMemAlloc")
                    copies.append((name, pointer, host))
                    _ok(cu.cuMemcpyHtoD(pointer, host.ctypes.data, host.nbytes), f"cuMemcpyHtoD {name}")
                else:
                    pointer, keep = device_pointer(name, value, program.dtypes[name], shape)
                    alive.append(keep)
                pointers[name] = pointer
            for launch, function in zip(program.launches, functions, strict=True):
                kernel = launch.kernel
                # Pointers go as plain addresses (c_void_p): an int from an interface, or int(CUdeviceptr).
                values = tuple(int(pointers[cast(str, b)]) if p.pointer else b  # a pointer binds a buffer's name
                               for p, b in zip(kernel.params, launch.bindings, strict=True))
                types = tuple(ctypes.c_void_p if p.pointer else _SCALAR_CTYPES[p.dtype] for p in kernel.params)
                _ok(cu.cuLaunchKernel(function, *kernel.grid, *kernel.block, kernel.shared_bytes, 0,
                                      (values, types), 0), f"{kernel.entry}: cuLaunchKernel")
            _ok(cu.cuCtxSynchronize(), f"{program.name}: kernel")
            for name, pointer, host in copies:
                _ok(cu.cuMemcpyDtoH(host.ctypes.data, pointer, host.nbytes), f"cuMemcpyDtoH {name}")
        finally:
            for _, pointer, _ in copies:
                cu.cuMemFree(pointer)

    weakref.finalize(run, _release, handles)  # the modules and workspaces go with the callable
    return run
