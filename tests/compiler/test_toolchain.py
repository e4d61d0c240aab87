from __future__ import annotations

import importlib.metadata
import os
import stat
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from cuda.bindings import driver
from cuda.pathfinder import DynamicLibNotFoundError

from compiler import toolchain
from compiler.backends.nvrtc import nvrtc_version
from compiler.toolchain import (
    GpuDevice,
    detect_cuda_headers,
    detect_gpus,
    detect_host_compiler,
    detect_nvrtc,
    detect_toolchain,
    warpmap_version,
)

OK = driver.CUresult.CUDA_SUCCESS
ATTR = driver.CUdevice_attribute


def fake_driver(
    *,
    init: Any = OK,
    devices: Sequence[tuple[str, int, int, int]] = (),
    fail_name: bool = False,
) -> SimpleNamespace:
    """A stand-in for ``cuda.bindings.driver`` that reports the given devices."""

    def cu_init(flags: int) -> tuple[Any]:
        assert flags == 0
        if isinstance(init, Exception):
            raise init
        return (init,)

    def attribute(which: Any, device: int) -> tuple[Any, int]:
        _, major, minor, _ = devices[device]
        return OK, {
            ATTR.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: major,
            ATTR.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: minor,
        }[which]

    def name(size: int, device: int) -> tuple[Any, bytes]:
        if fail_name:
            return driver.CUresult.CUDA_ERROR_INVALID_DEVICE, b""
        return OK, devices[device][0].encode().ljust(size, b"\0")

    return SimpleNamespace(
        CUresult=driver.CUresult,
        CUdevice_attribute=ATTR,
        cuInit=cu_init,
        cuGetErrorString=lambda status: (OK, f"description of {status.name}".encode()),
        cuDriverGetVersion=lambda: (OK, 13000),
        cuDeviceGetCount=lambda: (OK, len(devices)),
        cuDeviceGet=lambda index: (OK, index),
        cuDeviceGetName=name,
        cuDeviceGetAttribute=attribute,
        cuDeviceTotalMem=lambda device: (OK, devices[device][3]),
    )


def test_no_driver_library_is_reported() -> None:
    api = fake_driver(init=DynamicLibNotFoundError('"cuda" is an NVIDIA driver library'))
    info = detect_gpus(api)
    assert not info.found and info.devices == () and info.driver_version is None
    assert info.reason is not None
    assert info.reason.startswith("no NVIDIA driver library")
    assert '"cuda" is an NVIDIA driver library' in info.reason


def test_broken_driver_library_is_reported() -> None:
    info = detect_gpus(fake_driver(init=OSError("libcuda.so.1: wrong ELF class")))
    assert info.reason == "the NVIDIA driver library failed to load: libcuda.so.1: wrong ELF class"


def test_driver_without_device_is_reported() -> None:
    info = detect_gpus(fake_driver(init=driver.CUresult.CUDA_ERROR_NO_DEVICE))
    assert not info.found
    assert info.reason == "cuInit failed: CUDA_ERROR_NO_DEVICE (description of CUDA_ERROR_NO_DEVICE)"


def test_zero_devices_is_reported() -> None:
    info = detect_gpus(fake_driver(devices=[]))
    assert not info.found and info.driver_version == "13.0"
    assert info.reason == "the driver reports 0 devices"


def test_devices_are_listed() -> None:
    api = fake_driver(devices=[("NVIDIA H200", 9, 0, 150_000_000_000), ("NVIDIA A100-SXM4-80GB", 8, 0, 85 << 30)])
    info = detect_gpus(api)
    assert info.found and info.reason is None and info.driver_version == "13.0"
    assert info.devices == (
        GpuDevice(0, "NVIDIA H200", (9, 0), 150_000_000_000),
        GpuDevice(1, "NVIDIA A100-SXM4-80GB", (8, 0), 85 << 30),
    )
    assert [d.arch for d in info.devices] == ["sm_90", "sm_80"]


def test_failed_device_query_is_reported() -> None:
    info = detect_gpus(fake_driver(devices=[("x", 9, 0, 1)], fail_name=True))
    assert not info.found
    assert info.reason is not None and "CUDA_ERROR_INVALID_DEVICE" in info.reason


def test_this_machine_gpu_probe_never_raises() -> None:
    info = detect_gpus()
    if info.found:
        assert all(d.compute_capability >= (5, 0) and d.memory_bytes > 0 for d in info.devices)
    else:
        assert info.reason  # the exact reason, e.g. no driver library on a CPU-only machine


def test_nvrtc_probe() -> None:
    info = detect_nvrtc()
    assert info.usable and info.error is None
    assert info.version == "{}.{}".format(*nvrtc_version())
    assert "sm_80" in info.archs and "sm_90" in info.archs
    assert info.smoke_compile_ms is not None and info.smoke_compile_ms > 0


def test_nvrtc_missing_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing() -> tuple[int, int]:
        raise DynamicLibNotFoundError("libnvrtc.so.13 not found")

    monkeypatch.setattr(toolchain, "nvrtc_version", missing)
    info = detect_nvrtc()
    assert (info.usable, info.version, info.archs, info.smoke_compile_ms) == (False, None, (), None)
    assert info.error == "DynamicLibNotFoundError: libnvrtc.so.13 not found"


def test_cuda_headers_found() -> None:
    info = detect_cuda_headers()
    assert info.reason is None and info.path is not None
    assert (info.path / "cuda_fp16.h").is_file()


def test_cuda_headers_missing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(toolchain, "find_nvidia_header_directory", lambda name: None)
    info = detect_cuda_headers()
    assert info.path is None and info.reason is not None and info.reason.startswith("not found")
    (tmp_path / "cuda_fp16.h").write_text("")
    monkeypatch.setattr(toolchain, "find_nvidia_header_directory", lambda name: str(tmp_path))
    info = detect_cuda_headers()
    assert info.path == tmp_path
    assert info.reason == f"incomplete: cuda_bf16.h, mma.h missing from {tmp_path}"


def test_host_compiler_with_openmp() -> None:
    info = detect_host_compiler()
    assert info.path is not None and info.path.name in toolchain.HOST_COMPILERS
    assert info.version is not None and info.version.strip()
    assert info.openmp, info.openmp_detail
    assert info.openmp_detail.startswith("-fopenmp works (")


def test_no_host_compiler() -> None:
    info = detect_host_compiler(("warpmap-no-such-compiler",))
    assert (info.path, info.version, info.openmp) == (None, None, False)
    assert info.openmp_detail == "no host C++ compiler on PATH (tried warpmap-no-such-compiler)"


def test_host_compiler_without_openmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "fakecxx"
    fake.write_text(
        '#!/bin/sh\nif [ "$1" = "--version" ]; then echo "fakecxx 1.0"; echo "second line"; exit 0; fi\n'
        'echo "fakecxx: error: unsupported option -fopenmp" >&2\nexit 1\n'
    )
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    info = detect_host_compiler(("fakecxx",))
    assert (info.path, info.version, info.openmp) == (fake, "fakecxx 1.0", False)
    assert info.openmp_detail == "-fopenmp build failed: fakecxx: error: unsupported option -fopenmp"


def test_versions_and_whole_report() -> None:
    assert warpmap_version() == importlib.metadata.version("warpmap")
    report = detect_toolchain()
    assert report.nvrtc.usable
    assert report.python.count(".") == 2
    assert report.cpu is not None and report.cpu.logical_cores >= 1  # the host CPU is always described
