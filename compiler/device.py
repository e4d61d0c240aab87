"""What a schedule space needs to know about a device: its limits, as data.

A ``DeviceSpec`` names the architecture a kernel is compiled for and the resource limits that decide
whether a candidate can launch at all. Presets cover the GPUs we tune for; a real GPU's figures come
from the driver at run time and replace the preset's.
"""

from __future__ import annotations

from dataclasses import dataclass

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


def device_preset(name: str) -> DeviceSpec:
    """The preset called ``name`` (case-insensitive), or a ValueError listing the known ones."""
    try:
        return DEVICES[name.lower()]
    except KeyError:
        known = ", ".join(sorted(DEVICES))
        raise ValueError(f"unknown device {name!r}; known devices: {known}") from None
