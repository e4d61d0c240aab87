"""``search.records.cache_identity``: what files a kernel apart in the cache."""

from __future__ import annotations

import pytest

from compiler.backends import cpu
from compiler.cpu_device import detect_cpu
from search.records import cache_identity


@pytest.mark.skipif(cpu.unavailable_reason() is not None, reason="no host compiler to fingerprint")
def test_the_host_with_another_thread_count_is_another_device_of_the_same_arch(tmp_path) -> None:
    host = detect_cpu()
    two, sixteen = (cache_identity(cpu.fingerprint(cpu.CpuConfig(cache_dir=tmp_path, workers=n), host), "0.1.0")
                    for n in (2, 16))
    assert two[0].name == f"{host.model}, 2 threads" and sixteen[0].name == f"{host.model}, 16 threads"
    assert two[0].key != sixteen[0].key and two[0].arch == sixteen[0].arch
    assert two[1] == sixteen[1]  # the same toolchain


def test_a_gpu_is_its_name_arch_and_driver() -> None:
    device, toolchain = cache_identity({"device": "NVIDIA H100 80GB HBM3", "arch": "sm_90", "driver": "550.54",
                                        "nvrtc": "12.4", "compiler": "g++ 12"}, "0.1.0")
    assert (device.name, device.arch, device.driver) == ("NVIDIA H100 80GB HBM3", "sm_90", "550.54")
    assert toolchain.nvrtc == "12.4"
