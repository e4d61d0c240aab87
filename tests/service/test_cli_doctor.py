from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from compiler.backends.emu.build import EmuConfig
from compiler.cpu_device import CacheLevel, CpuDevice
from compiler.toolchain import (
    HOST_COMPILERS,
    GpuDevice,
    GpuInfo,
    HeadersInfo,
    HostCompilerInfo,
    NvrtcInfo,
    ToolchainReport,
)
from service.cli import doctor, main
from service.cli.table import format_table

NVRTC = NvrtcInfo(True, "13.5", ("sm_80", "sm_90"), 41.6)
HEADERS = HeadersInfo(Path("/opt/cuda/include"))
HOST = HostCompilerInfo(Path("/usr/bin/c++"), "c++ (Debian 12.2.0) 12.2.0", True, "-fopenmp works (16 threads)")
ZEN3 = CpuDevice(
    model="AMD EPYC 7B13", vendor="AuthenticAMD", machine="x86_64", features=("sse4.2", "avx", "avx2", "fma"),
    f32_lanes=8, logical_cores=2, physical_cores=2,
    caches=(CacheLevel(1, "Data", 32 << 10, 64, 1), CacheLevel(1, "Instruction", 32 << 10, 64, 1),
            CacheLevel(2, "Unified", 512 << 10, 64, 1), CacheLevel(3, "Unified", 32 << 20, 64, 2)),
    clock_ghz=2.445, clock_source="/proc/cpuinfo cpu MHz", fma_pipes=2,
)
NO_GPU = GpuInfo((), None, "no NVIDIA driver library (libcuda) on this machine: not found")
TWO_GPUS = GpuInfo(
    (GpuDevice(0, "NVIDIA H200", (9, 0), 150_000_000_000), GpuDevice(1, "NVIDIA L4", (8, 9), 24 << 30)),
    "13.0",
)


def report(**changes: object) -> ToolchainReport:
    fields: dict[str, object] = {
        "warpmap_version": "0.1.0",
        "python": "3.11.7",
        "nvrtc": NVRTC,
        "headers": HEADERS,
        "host_compiler": HOST,
        "gpu": NO_GPU,
        "cpu": ZEN3,
    }
    fields.update(changes)
    return ToolchainReport(**fields)  # type: ignore[arg-type]


def test_table_without_gpu() -> None:
    table = format_table(doctor.HEADER, doctor.report_rows(report()))
    assert table.splitlines() == [
        "component     state  detail",
        "------------- ------ " + "-" * 80,
        "warpmap       ok     0.1.0 (Python 3.11.7)",
        "NVRTC         ok     13.5, smoke compile to sm_80 in 42 ms",
        "NVRTC archs   ok     sm_80 sm_90",
        "CUDA headers  ok     /opt/cuda/include",
        "host C++      ok     /usr/bin/c++: c++ (Debian 12.2.0) 12.2.0",
        "OpenMP        ok     -fopenmp works (16 threads)",
        "emulator      ok     its C and C++ compilers are GCC 12 or later",
        "CPU           ok     AMD EPYC 7B13, avx2 fma, 8 f32 lanes, 2 cores, L1d 32 KiB, L2 512 KiB, L3 32 MiB",
        "GPU           none   no NVIDIA driver library (libcuda) on this machine: not found",
    ]


def test_cpu_row_counts_smt_and_leaves_out_unknown_caches() -> None:
    xeon = dataclasses.replace(ZEN3, model="Xeon", features=("avx2", "fma", "avx512f", "amx-tile"), f32_lanes=16,
                               logical_cores=4, caches=ZEN3.caches[:1])
    assert doctor.cpu_detail(xeon) == "Xeon, avx512f fma amx, 16 f32 lanes, 4 cores (2 physical), L1d 32 KiB"
    assert ("CPU", "none", "not probed") in doctor.report_rows(report(cpu=None))
    limited = dataclasses.replace(xeon, logical_cores=2, cpu_quota=1.5)
    assert doctor.cpu_detail(limited) == ("Xeon, avx512f fma amx, 16 f32 lanes, 2 cores "
                                          "(a CPU quota of 1.5), L1d 32 KiB")


def test_an_emulator_without_its_compilers_fails_the_doctor() -> None:
    problem = "the emulator's C compiler 'gcc' is not on PATH (install GCC 12 or later, or set EmuConfig.cc)"
    broken = report(emulator_problem=problem)
    assert ("emulator", "FAIL", problem) in doctor.report_rows(broken)
    assert doctor.exit_status(broken) == 1
    assert doctor.exit_status(report()) == 0


def test_rows_with_gpus() -> None:
    rows = doctor.report_rows(report(gpu=TWO_GPUS))
    assert rows[-2:] == [
        ("GPU 0", "ok", "NVIDIA H200, sm_90, 139.7 GiB, driver 13.0"),
        ("GPU 1", "ok", "NVIDIA L4, sm_89, 24.0 GiB, driver 13.0"),
    ]
    assert not any(row[0] == "GPU" for row in rows)


def test_rows_for_missing_pieces() -> None:
    broken = report(
        nvrtc=NvrtcInfo(False, None, (), None, "DynamicLibNotFoundError: nvrtc not found"),
        headers=HeadersInfo(None, "not found: install the CUDA header wheels"),
        host_compiler=HostCompilerInfo(None, None, False, "no host C++ compiler on PATH (tried c++)"),
    )
    rows = {name: (state, detail) for name, state, detail in doctor.report_rows(broken)}
    assert rows["NVRTC"] == ("FAIL", "DynamicLibNotFoundError: nvrtc not found")
    assert rows["NVRTC archs"] == ("FAIL", "none reported")
    assert rows["CUDA headers"] == ("missing", "not found: install the CUDA header wheels")
    assert rows["host C++"] == ("missing", "no host C++ compiler on PATH (tried c++)")
    assert rows["OpenMP"][0] == "missing"
    assert doctor.exit_status(broken) == 1
    assert doctor.exit_status(report()) == 0  # no GPU is a normal state


@pytest.mark.parametrize("missing", [
    {"headers": HeadersInfo(None, "not found: install the CUDA header wheels")},
    {"headers": HeadersInfo(Path("/opt/cuda/include"), "incomplete: mma.h missing from /opt/cuda/include")},
    {"host_compiler": HostCompilerInfo(None, None, False, "no host C++ compiler on PATH (tried g++)")},
])
def test_a_missing_required_piece_exits_1(missing: dict[str, object]) -> None:
    assert doctor.exit_status(report(**missing)) == 1


def test_the_host_compiler_reported_is_the_one_the_emulator_runs() -> None:
    assert (EmuConfig.cxx,) == HOST_COMPILERS


def test_doctor_exits_1_on_a_host_without_the_emulators_compiler(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A PATH with only clang++ and c++ on it: neither is what the emulator runs.
    for name in ("clang++", "c++"):
        fake = tmp_path / name
        fake.write_text("#!/bin/sh\necho fake 1.0\n")
        fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert run_doctor(["doctor"]) == 1
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("host C++"))
    assert "missing" in row and EmuConfig.cxx in row


def test_json_shape() -> None:
    data = doctor.report_json(report(gpu=TWO_GPUS))
    assert json.loads(json.dumps(data)) == data
    assert data["gpu"]["found"] is True
    assert data["gpu"]["devices"][0] == {
        "index": 0,
        "name": "NVIDIA H200",
        "compute_capability": [9, 0],
        "memory_bytes": 150_000_000_000,
        "arch": "sm_90",
    }
    assert data["headers"] == {"path": "/opt/cuda/include", "reason": None}
    assert data["nvrtc"]["archs"] == ["sm_80", "sm_90"]
    cpu = data["cpu"]
    assert cpu["model"] == "AMD EPYC 7B13" and cpu["features"] == ["sse4.2", "avx", "avx2", "fma"]
    assert cpu["caches"][2] == {"level": 2, "kind": "Unified", "size_bytes": 512 << 10, "line_bytes": 64,
                                "shared_cpus": 1}
    assert (cpu["isa_summary"], cpu["compile_flags"]) == ("avx2 fma, 8 f32 lanes", ["-march=native"])
    # The estimate travels with its inputs: fma_pipes x f32_lanes x 2 x peak_cores x clock_ghz.
    assert cpu["peak_gflops_f32"] == pytest.approx(2 * 8 * 2 * 2 * 2.445)
    assert (cpu["fma_pipes"], cpu["peak_cores"], cpu["clock_ghz"], cpu["clock_source"]) == (
        2, 2, 2.445, "/proc/cpuinfo cpu MHz")
    assert doctor.report_json(report(cpu=None))["cpu"] is None
    assert doctor.report_json(report())["gpu"] == {
        "devices": [],
        "driver_version": None,
        "reason": NO_GPU.reason,
        "found": False,
    }


def run_doctor(argv: list[str]) -> int:
    return main(argv)


def test_doctor_on_this_machine(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_doctor(["doctor"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["component", "state", "detail"]
    names = [line[:14].strip() for line in lines[2:]]
    assert names[:6] == ["warpmap", "NVRTC", "NVRTC archs", "CUDA headers", "host C++", "OpenMP"]
    assert "CPU" in names and " f32 lanes" in lines[2 + names.index("CPU")]
    assert [name for name in names if name.startswith("target")] == ["target cpu", "target cuda", "target emu"]
    assert " ok " in lines[2 + names.index("target emu")] and " ok " in lines[2 + names.index("target cpu")]
    gpu_lines = [line for line in lines if line.startswith("GPU")]
    assert gpu_lines
    # Either devices, or one line giving the reason there are none.
    assert all(" ok " in line for line in gpu_lines) or (len(gpu_lines) == 1 and " none " in gpu_lines[0])


def test_doctor_json_on_this_machine(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_doctor(["doctor", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["nvrtc"]["usable"] is True
    assert "sm_90" in data["nvrtc"]["archs"]
    assert data["gpu"]["found"] == bool(data["gpu"]["devices"])
    assert data["gpu"]["found"] or data["gpu"]["reason"]
    assert data["cpu"]["f32_lanes"] in (4, 8, 16) and data["cpu"]["logical_cores"] >= 1
    assert set(data["targets"]) == {"cpu", "cuda", "emu"} and data["targets"]["emu"] == {"available": True,
                                                                                        "reason": None}
    assert data["targets"]["cuda"]["available"] == data["gpu"]["found"]


def test_target_rows_say_what_runs_or_why_not() -> None:
    rows = doctor.report_rows(report(), {"cpu": None, "cuda": "no GPU: no driver library"})
    assert rows[-2:] == [("target cpu", "ok", doctor.TARGET_ROLES["cpu"]),
                         ("target cuda", "none", "no GPU: no driver library")]
    data = doctor.report_json(report(), {"cuda": "no GPU"})
    assert data["targets"] == {"cuda": {"available": False, "reason": "no GPU"}}


SCRIPT = Path(sys.executable).with_name("warpmap")


@pytest.mark.skipif(not SCRIPT.exists(), reason="the warpmap console script is not installed")
def test_console_script() -> None:
    completed = subprocess.run([SCRIPT, "doctor", "--json"], capture_output=True, text=True, timeout=120)
    assert completed.returncode == 0, completed.stderr
    assert json.loads(completed.stdout)["nvrtc"]["usable"] is True


def test_doctor_exits_1_without_nvrtc(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    broken = report(nvrtc=NvrtcInfo(False, None, (), None, "DynamicLibNotFoundError: nvrtc not found"))
    monkeypatch.setattr(doctor, "detect_toolchain", lambda: broken)
    assert run_doctor(["doctor"]) == 1
    out = capsys.readouterr().out
    assert "NVRTC         FAIL   DynamicLibNotFoundError: nvrtc not found" in out
    assert run_doctor(["doctor", "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["nvrtc"]["usable"] is False


def test_the_measured_peak_sits_after_the_cpu_row_beside_the_estimate() -> None:
    rows = doctor.report_rows(report(), {"cpu": None}, peak=301.4)
    names = [name for name, _, _ in rows]
    assert names[names.index("CPU") + 1] == "CPU peak"
    assert rows[names.index("CPU peak")] == (
        "CPU peak", "ok", "301 GFLOP/s FP32, measured by a kernel of FMAs on every core "
        "(the estimate from the OS clock: 156)")
    failed = doctor.report_rows(report(cpu=None), {"cpu": None}, peak="the peak kernel did not build: no g++")
    assert ("CPU peak", "FAIL", "the peak kernel did not build: no g++") in failed
    # Without a runnable cpu target there is nothing to measure with: missing, as its own row says.
    unrunnable = doctor.report_rows(report(), {"cpu": "no host C++ compiler"},
                                    peak=doctor.measure_peak("no host C++ compiler"))
    assert ("CPU peak", "missing", "the cpu target cannot run here: no host C++ compiler") in unrunnable
    assert "CPU peak" not in [name for name, _, _ in doctor.report_rows(report())]
    assert doctor.report_json(report(), peak=301.4)["measured_peak"] == {"gflops_f32": 301.4, "reason": None}
    assert doctor.report_json(report(), peak="no")["measured_peak"] == {"gflops_f32": None, "reason": "no"}
    assert "measured_peak" not in doctor.report_json(report())
    assert doctor.measure_peak("no host C++ compiler") == "the cpu target cannot run here: no host C++ compiler"


def test_the_measured_bandwidth_follows_the_peak() -> None:
    rows = doctor.report_rows(report(), {"cpu": None}, peak=301.4, bandwidth=35.44)
    names = [name for name, _, _ in rows]
    assert names[names.index("CPU peak") + 1] == "CPU memory"
    _, state, detail = rows[names.index("CPU memory")]
    assert state == "ok" and detail.startswith("35.4 GB/s read from memory")
    unrunnable = doctor.report_rows(report(), {"cpu": "no host C++ compiler"},
                                    bandwidth=doctor.measure_bandwidth("no host C++ compiler"))
    assert ("CPU memory", "missing", "the cpu target cannot run here: no host C++ compiler") in unrunnable
    failed = doctor.report_rows(report(), {"cpu": None}, bandwidth="the bandwidth kernel did not build: no g++")
    assert ("CPU memory", "FAIL", "the bandwidth kernel did not build: no g++") in failed
    assert doctor.report_json(report(), bandwidth=35.4)["measured_bandwidth"] == {"gbs": 35.4, "reason": None}
    assert doctor.report_json(report(), bandwidth="no")["measured_bandwidth"] == {"gbs": None, "reason": "no"}
    assert "measured_bandwidth" not in doctor.report_json(report(), peak=301.4)


def test_doctor_measures_the_peak_on_this_machine(capsys: pytest.CaptureFixture[str]) -> None:
    from compiler.backends import get_target

    if get_target("cpu").unavailable_reason() is not None:
        pytest.skip("no host compiler")
    assert run_doctor(["doctor", "--json", "--peak"]) == 0
    data = json.loads(capsys.readouterr().out)
    peak = data["measured_peak"]
    # At least one FMA a cycle on one lane of one core at 100 MHz; the FMA kernel itself is tested with
    # the cpu target (tests/compiler/backends/test_cpu_peak.py).
    assert peak["reason"] is None and peak["gflops_f32"] > 0.2
    # A byte a second would be a probe that measured nothing; the kernel is tested in test_cpu_bandwidth.py.
    bandwidth = data["measured_bandwidth"]
    assert bandwidth["reason"] is None and bandwidth["gbs"] > 1e-9
