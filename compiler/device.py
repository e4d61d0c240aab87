"""What a schedule space needs to know about a device: its limits, as data.

A ``DeviceSpec`` names the architecture a kernel is compiled for and the resource limits that decide
whether a candidate can launch at all. Presets cover the GPUs we tune for; a real GPU's figures come
from the driver at run time (:func:`spec_from_driver`) and replace the preset's whenever the GPU is
present. The host CPU's description is ``compiler.cpu_device.CpuDevice``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from compiler.cpu_device import CpuDevice

KIB = 1024


@dataclass(frozen=True)
class DeviceSpec:
    """Launch limits and headline figures of one device.

    >>> DEVICES["h200"].arch, DEVICES["h200"].max_shared_dynamic // 1024
    ('sm_90', 227)
    """

    name: str
    arch: str
    sm_count: int
    max_threads_per_block: int = 1024
    max_shared_static: int = 48 * KIB
    max_shared_dynamic: int = 48 * KIB
    max_registers_per_thread: int = 255
    max_registers_per_block: int = 64 * KIB
    warp_size: int = 32
    memory_bandwidth_gbs: float = 0.0
    l2_bytes: int = 0

    @property
    def compute_capability(self) -> tuple[int, int]:
        digits = self.arch.removeprefix("sm_").rstrip("a")
        return int(digits[:-1]), int(digits[-1])

    @property
    def has_tensor_cores(self) -> bool:
        return self.compute_capability >= (8, 0)


DEVICES: dict[str, DeviceSpec] = {
    "a100": DeviceSpec(
        name="NVIDIA A100-SXM4-80GB",
        arch="sm_80",
        sm_count=108,
        max_shared_dynamic=163 * KIB,
        memory_bandwidth_gbs=2039.0,
        l2_bytes=40 * KIB * KIB,
    ),
    "h100": DeviceSpec(
        name="NVIDIA H100 80GB HBM3",
        arch="sm_90",
        sm_count=132,
        max_shared_dynamic=227 * KIB,
        memory_bandwidth_gbs=3350.0,
        l2_bytes=50 * KIB * KIB,
    ),
    "h200": DeviceSpec(
        name="NVIDIA H200",
        arch="sm_90",
        sm_count=132,
        max_shared_dynamic=227 * KIB,
        memory_bandwidth_gbs=4800.0,
        l2_bytes=50 * KIB * KIB,
    ),
}


#: The preset whose limits shape a CUDA space where this machine has no GPU.
DEFAULT_GPU = "h200"


def device_preset(name: str) -> DeviceSpec:
    """The preset called ``name`` (case-insensitive), or a ValueError listing the known ones."""
    try:
        return DEVICES[name.lower()]
    except KeyError:
        known = ", ".join(sorted(DEVICES))
        raise ValueError(f"unknown device {name!r}; known devices: {known}") from None


#: DeviceSpec field -> the driver attribute it is read from (``CU_DEVICE_ATTRIBUTE_`` + this).
_ATTRIBUTES = {
    "sm_count": "MULTIPROCESSOR_COUNT",
    "max_threads_per_block": "MAX_THREADS_PER_BLOCK",
    "max_shared_static": "MAX_SHARED_MEMORY_PER_BLOCK",
    "max_shared_dynamic": "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN",
    "max_registers_per_block": "MAX_REGISTERS_PER_BLOCK",
    "warp_size": "WARP_SIZE",
    "l2_bytes": "L2_CACHE_SIZE",
}


def spec_from_driver(api: Any, ordinal: int = 0) -> DeviceSpec:
    """The real limits of GPU ``ordinal``, read through the driver API ``api`` (a stand-in in tests).

    The driver must be initialised (``cuInit``). Peak memory bandwidth is derived from the memory
    clock (kHz, double data rate) and the bus width (bits); a driver that reports neither leaves it
    0.0, as a preset that does not know it. Raises RuntimeError when a query fails.
    """
    device = _call(api, api.cuDeviceGet(ordinal))

    def attribute(name: str) -> int:
        which = getattr(api.CUdevice_attribute, f"CU_DEVICE_ATTRIBUTE_{name}")
        return int(_call(api, api.cuDeviceGetAttribute(which, device)))

    raw = _call(api, api.cuDeviceGetName(256, device))
    name = raw.split(b"\0", 1)[0].decode() if isinstance(raw, bytes) else str(raw)
    major, minor = attribute("COMPUTE_CAPABILITY_MAJOR"), attribute("COMPUTE_CAPABILITY_MINOR")
    clock_khz, bus_bits = attribute("MEMORY_CLOCK_RATE"), attribute("GLOBAL_MEMORY_BUS_WIDTH")
    return DeviceSpec(
        name=name,
        arch=f"sm_{major}{minor}",
        memory_bandwidth_gbs=2 * clock_khz * 1e3 * bus_bits / 8 / 1e9,
        **{field: attribute(which) for field, which in _ATTRIBUTES.items()},
    )


def local_gpu_spec(api: Any = None, ordinal: int = 0) -> DeviceSpec | None:
    """:func:`spec_from_driver` for this machine's GPU ``ordinal``, or None when there is none.

    ``api`` defaults to ``cuda.bindings.driver``; no driver library, no device, or a failing query
    all mean "no GPU here", a normal state.
    """
    if api is None:
        from cuda.bindings import driver  # only a caller that wants the GPU pays for the import

        api = driver
    try:
        (status,) = api.cuInit(0)
        if status != api.CUresult.CUDA_SUCCESS or _call(api, api.cuDeviceGetCount()) <= ordinal:
            return None
        return spec_from_driver(api, ordinal)
    except (RuntimeError, OSError):  # DynamicLibNotFoundError is a RuntimeError
        return None


def _call(api: Any, result: tuple[Any, ...]) -> Any:
    status, value = result
    if status != api.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"CUDA driver call failed: {getattr(status, 'name', status)}")
    return value


@functools.lru_cache(maxsize=1)
def gpu_device() -> DeviceSpec:
    """This machine's GPU as the driver reports it, else the :data:`DEFAULT_GPU` preset (asked once per
    process: a GPU does not come or go under a running process)."""
    return local_gpu_spec() or device_preset(DEFAULT_GPU)


def template_target(device: DeviceSpec | CpuDevice) -> str:
    """Which templates serve ``device``: ``cuda`` for a GPU's description, ``cpu`` for the host's.

    >>> template_target(DEVICES["h200"])
    'cuda'
    """
    if isinstance(device, DeviceSpec):
        return "cuda"
    if isinstance(device, CpuDevice):
        return "cpu"
    raise TypeError(f"not a device description: {type(device).__name__}")
