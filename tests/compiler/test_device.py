from types import SimpleNamespace
from typing import Any

import pytest
from cuda.bindings import driver
from cuda.pathfinder import DynamicLibNotFoundError

from compiler.device import DEVICES, DeviceSpec, device_preset, local_gpu_spec, spec_from_driver


def test_presets_expose_arch_and_limits():
    a100 = device_preset("A100")
    assert a100.compute_capability == (8, 0)
    assert a100.has_tensor_cores
    assert DEVICES["h200"].max_shared_dynamic == 227 * 1024
    assert device_preset("h100").compute_capability == (9, 0)


def test_unknown_device_lists_known_ones():
    with pytest.raises(ValueError, match="known devices: a100, h100, h200"):
        device_preset("v100")


OK = driver.CUresult.CUDA_SUCCESS
ATTR = driver.CUdevice_attribute
#: What an H200's driver reports (kHz for the memory clock, bits for the bus).
H200_ATTRIBUTES = {
    "COMPUTE_CAPABILITY_MAJOR": 9, "COMPUTE_CAPABILITY_MINOR": 0, "MULTIPROCESSOR_COUNT": 132,
    "MAX_THREADS_PER_BLOCK": 1024, "MAX_SHARED_MEMORY_PER_BLOCK": 48 * 1024,
    "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN": 232_448, "MAX_REGISTERS_PER_BLOCK": 65_536, "WARP_SIZE": 32,
    "L2_CACHE_SIZE": 52_428_800, "MEMORY_CLOCK_RATE": 3_201_000, "GLOBAL_MEMORY_BUS_WIDTH": 6144,
}


def fake_driver(attributes: dict[str, int], *, init: Any = OK, count: int = 1, failing: str | None = None,
                name: str = "NVIDIA H200") -> SimpleNamespace:
    """A stand-in for ``cuda.bindings.driver`` with one device reporting ``attributes``."""
    by_enum = {getattr(ATTR, f"CU_DEVICE_ATTRIBUTE_{key}"): value for key, value in attributes.items()}

    def cu_init(flags: int) -> tuple[Any]:
        if isinstance(init, Exception):
            raise init
        return (init,)

    def attribute(which: Any, device: int) -> tuple[Any, int]:
        assert device == 7  # the handle cuDeviceGet gave, not the ordinal
        if failing is not None and which == getattr(ATTR, f"CU_DEVICE_ATTRIBUTE_{failing}"):
            return driver.CUresult.CUDA_ERROR_INVALID_VALUE, 0
        return OK, by_enum[which]

    return SimpleNamespace(
        CUresult=driver.CUresult,
        CUdevice_attribute=ATTR,
        cuInit=cu_init,
        cuDeviceGetCount=lambda: (OK, count),
        cuDeviceGet=lambda ordinal: (OK, 7),
        cuDeviceGetName=lambda size, device: (OK, name.encode().ljust(size, b"\0")),
        cuDeviceGetAttribute=attribute,
    )


def test_the_real_devices_limits_are_read_from_the_driver() -> None:
    spec = spec_from_driver(fake_driver(H200_ATTRIBUTES))
    assert spec == DeviceSpec(
        name="NVIDIA H200", arch="sm_90", sm_count=132, max_threads_per_block=1024,
        max_shared_static=48 * 1024, max_shared_dynamic=232_448, max_registers_per_block=65_536,
        warp_size=32, l2_bytes=52_428_800, memory_bandwidth_gbs=pytest.approx(4916.7, abs=0.1),
    )
    # The preset agrees on the limits a space reads, so a space is the same on the real device.
    preset = device_preset("h200")
    assert (spec.arch, spec.sm_count, spec.max_shared_dynamic) == (preset.arch, preset.sm_count,
                                                                   preset.max_shared_dynamic)


def test_another_device_gives_its_own_limits() -> None:
    l4 = {**H200_ATTRIBUTES, "COMPUTE_CAPABILITY_MINOR": 9, "COMPUTE_CAPABILITY_MAJOR": 8,
          "MULTIPROCESSOR_COUNT": 58, "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN": 101_376,
          "MEMORY_CLOCK_RATE": 0, "GLOBAL_MEMORY_BUS_WIDTH": 0}
    spec = spec_from_driver(fake_driver(l4, name="NVIDIA L4"))
    assert (spec.name, spec.arch, spec.sm_count, spec.max_shared_dynamic) == ("NVIDIA L4", "sm_89", 58, 101_376)
    assert spec.memory_bandwidth_gbs == 0.0  # not reported: unknown, as in a preset that lacks it


def test_a_failing_query_raises() -> None:
    with pytest.raises(RuntimeError, match="CUDA_ERROR_INVALID_VALUE"):
        spec_from_driver(fake_driver(H200_ATTRIBUTES, failing="L2_CACHE_SIZE"))


@pytest.mark.parametrize("api", [
    fake_driver(H200_ATTRIBUTES, init=DynamicLibNotFoundError("libcuda.so.1 not found")),
    fake_driver(H200_ATTRIBUTES, init=OSError("wrong ELF class")),
    fake_driver(H200_ATTRIBUTES, init=driver.CUresult.CUDA_ERROR_NO_DEVICE),
    fake_driver(H200_ATTRIBUTES, count=0),
    fake_driver(H200_ATTRIBUTES, failing="WARP_SIZE"),
])
def test_no_gpu_means_no_real_spec(api: SimpleNamespace) -> None:
    assert local_gpu_spec(api) is None


def test_a_present_gpu_gives_its_real_spec() -> None:
    assert local_gpu_spec(fake_driver(H200_ATTRIBUTES)) == spec_from_driver(fake_driver(H200_ATTRIBUTES))
    assert local_gpu_spec(fake_driver(H200_ATTRIBUTES), ordinal=1) is None


def test_this_machine_gpu_spec_never_raises() -> None:
    spec = local_gpu_spec()
    assert spec is None or (spec.sm_count > 0 and spec.compute_capability >= (5, 0))
