"""The CPU description, read from fixture trees of four machines and from this one."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import pytest

from compiler.cpu_device import (
    PROCESS_CPUS,
    CpuDevice,
    cpu_quota,
    describe_cpu,
    detect_cpu,
    parse_cpu_list,
    parse_size,
    usable_cpus,
)

DATA = Path(__file__).with_name("data") / "cpu"
K = 1024

#: (level, type, size, shared_cpu_list) per cache index, as sysfs spells them; lines are 64 bytes.
Caches = tuple[tuple[int, str, str, str], ...]
#: The real files of the EPYC (family 26) host these fixtures were made on.
ZEN5_CACHES: Caches = ((1, "Data", "48K", "0"), (1, "Instruction", "32K", "0"), (2, "Unified", "1024K", "0"),
                       (3, "Unified", "32768K", "0-1"))
ZEN3_CACHES: Caches = ((1, "Data", "32K", "0"), (1, "Instruction", "32K", "0"), (2, "Unified", "512K", "0"),
                       (3, "Unified", "32768K", "0-1"))
XEON_CACHES: Caches = ((1, "Data", "48K", "0-1"), (1, "Instruction", "32K", "0-1"), (2, "Unified", "2048K", "0-1"),
                       (3, "Unified", "107520K", "0-3"))
N1_CACHES: Caches = ((1, "Data", "64K", "0"), (1, "Instruction", "64K", "0"), (2, "Unified", "1024K", "0"),
                     (3, "Unified", "32768K", "0-3"))


def machine_tree(root: Path, cpuinfo: str, caches: Caches, cores: Mapping[int, str],
                 max_khz: int | None = None) -> Path:
    """A ``/proc`` + ``/sys`` tree: ``cores`` maps each CPU to its ``core_cpus_list``."""
    (root / "proc").mkdir(parents=True)
    (root / "proc" / "cpuinfo").write_text((DATA / cpuinfo).read_text())
    for cpu, siblings in cores.items():
        base = root / "sys/devices/system/cpu" / f"cpu{cpu}"
        (base / "topology").mkdir(parents=True)
        (base / "topology" / "core_cpus_list").write_text(siblings + "\n")
        for index, (level, kind, size, shared) in enumerate(caches):
            directory = base / "cache" / f"index{index}"
            directory.mkdir(parents=True)
            for name, value in (("level", level), ("type", kind), ("size", size), ("coherency_line_size", 64),
                                ("shared_cpu_list", shared)):
                (directory / name).write_text(f"{value}\n")
        if max_khz is not None:
            (base / "cpufreq").mkdir()
            (base / "cpufreq" / "cpuinfo_max_freq").write_text(f"{max_khz}\n")
    return root


def test_epyc_zen3_has_avx2_and_fma_but_no_avx512(tmp_path: Path) -> None:
    root = machine_tree(tmp_path, "epyc-zen3-avx2.cpuinfo", ZEN3_CACHES, {0: "0", 1: "1"})
    cpu = describe_cpu(root, {0, 1}, "x86_64")
    assert cpu.model == "AMD EPYC 7B13" and cpu.vendor == "AuthenticAMD"
    assert cpu.features == ("sse4.2", "avx", "avx2", "fma", "f16c")
    assert not any(f.startswith("avx512") for f in cpu.features)
    assert cpu.f32_lanes == 8 and cpu.isa_summary == "avx2 fma, 8 f32 lanes"
    assert (cpu.logical_cores, cpu.physical_cores) == (2, 2)
    assert cpu.l1d is not None and cpu.l1d.size_bytes == 32 * K and cpu.l1d.line_bytes == 64
    assert cpu.l2 is not None and cpu.l2.size_bytes == 512 * K and cpu.l2.shared_cpus == 1
    assert cpu.l3 is not None and cpu.l3.size_bytes == 32 * K * K and cpu.l3.shared_cpus == 2
    assert (cpu.clock_ghz, cpu.clock_source) == (pytest.approx(2.445406), "/proc/cpuinfo cpu MHz")
    # 2 FMA pipes x 8 lanes x 2 flops x 2 cores x 2.445 GHz: the formula, not a measurement.
    assert cpu.peak_gflops_f32 == pytest.approx(2 * 8 * 2 * 2 * 2.445406)
    assert cpu.compile_flags == ("-march=native",)


def test_epyc_zen5_of_this_kind_of_host_has_avx512(tmp_path: Path) -> None:
    root = machine_tree(tmp_path, "epyc-zen5-avx512.cpuinfo", ZEN5_CACHES, {0: "0", 1: "1"})
    cpu = describe_cpu(root, {0, 1}, "x86_64")
    assert cpu.model == "AMD EPYC"
    assert {"avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq"} <= set(cpu.features)
    assert cpu.f32_lanes == 16 and cpu.isa_summary == "avx512f fma, 16 f32 lanes"
    assert cpu.fma_pipes == 2  # family 26: full-width 512-bit FMA units
    assert [c.size_bytes for c in (cpu.l1d, cpu.l2, cpu.l3) if c] == [48 * K, 1024 * K, 32 * K * K]
    # GCC tunes many AVX-512 parts to 256-bit vectors: a 16-lane schedule must not be compiled as 2 x 8.
    assert cpu.compile_flags == ("-march=native", "-mprefer-vector-width=512")


def test_zen4_counts_one_512_bit_fma_a_cycle(tmp_path: Path) -> None:
    text = (DATA / "epyc-zen5-avx512.cpuinfo").read_text().replace("cpu family\t: 26", "cpu family\t: 25")
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "cpuinfo").write_text(text)
    cpu = describe_cpu(tmp_path, {0}, "x86_64")
    assert (cpu.f32_lanes, cpu.fma_pipes) == (16, 1)
    assert cpu.physical_cores == 1  # no sysfs topology: cpuinfo's (physical id, core id) of CPU 0


def test_xeon_with_avx512_amx_smt_and_cpufreq(tmp_path: Path) -> None:
    root = machine_tree(tmp_path, "xeon-spr-avx512.cpuinfo", XEON_CACHES, {0: "0-1", 1: "0-1", 2: "2-3", 3: "2-3"},
                        max_khz=3_800_000)
    cpu = describe_cpu(root, {0, 1, 2, 3}, "x86_64")
    assert cpu.model == "Intel(R) Xeon(R) Platinum 8480+"
    assert {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512fp16", "amx-tile", "amx-bf16"} <= set(cpu.features)
    assert cpu.isa_summary == "avx512f fma amx, 16 f32 lanes"
    assert (cpu.logical_cores, cpu.physical_cores, cpu.peak_cores) == (4, 2, 2)
    assert (cpu.clock_ghz, cpu.clock_source) == (3.8, "cpufreq max")
    assert cpu.peak_gflops_f32 == pytest.approx(2 * 16 * 2 * 2 * 3.8)
    assert cpu.l2 is not None and cpu.l2.shared_cpus == 2  # the SMT siblings share it
    # An affinity mask of one SMT pair: one core, whose caches are read from that CPU.
    pinned = describe_cpu(root, {2, 3}, "x86_64")
    assert (pinned.logical_cores, pinned.physical_cores) == (2, 1)


def test_aarch64_neoverse_n1_names_its_part_and_has_neon(tmp_path: Path) -> None:
    root = machine_tree(tmp_path, "graviton2-neoverse-n1.cpuinfo", N1_CACHES, {c: str(c) for c in range(4)})
    cpu = describe_cpu(root, {0, 1, 2, 3}, "aarch64")
    assert cpu.model == "ARM Neoverse-N1" and cpu.vendor == "0x41"
    assert cpu.features == ("neon", "fp16", "neon-fp16", "dotprod")
    assert cpu.f32_lanes == 4 and cpu.isa_summary == "neon, 4 f32 lanes"
    assert cpu.physical_cores == 4
    assert cpu.l1d is not None and cpu.l1d.size_bytes == 64 * K
    # Neither cpuinfo nor cpufreq gives a clock here, so there is no peak figure rather than a guess.
    assert (cpu.clock_ghz, cpu.clock_source, cpu.peak_gflops_f32) == (None, "unknown", None)


def test_a_machine_with_nothing_readable_is_described_not_raised(tmp_path: Path) -> None:
    cpu = describe_cpu(tmp_path, {0}, "riscv64")
    assert cpu == CpuDevice("riscv64", "", "riscv64", (), 1, 1, None, (), None, "unknown", 1)
    assert cpu.isa_summary == "riscv64, 1 f32 lanes"


def test_half_described_cache_is_left_out(tmp_path: Path) -> None:
    root = machine_tree(tmp_path, "epyc-zen3-avx2.cpuinfo", ZEN3_CACHES, {0: "0"})
    (root / "sys/devices/system/cpu/cpu0/cache/index3/size").unlink()
    assert describe_cpu(root, {0}, "x86_64").l3 is None


@pytest.mark.parametrize(("text", "cpus"),
                         [("0", {0}), ("0-3", {0, 1, 2, 3}), ("0,2,4-5\n", {0, 2, 4, 5}), ("", set())])
def test_cpu_lists(text: str, cpus: set[int]) -> None:
    assert parse_cpu_list(text) == cpus


def test_cache_sizes() -> None:
    assert [parse_size(s) for s in ("48K", "32768K", "2M", "64")] == [48 * K, 32 * K * K, 2 * K * K, 64]


def test_this_machine() -> None:
    cpu = detect_cpu()
    assert cpu.f32_lanes in (4, 8, 16)
    assert cpu.logical_cores >= 1
    assert cpu.physical_cores is None or 1 <= cpu.physical_cores <= cpu.logical_cores
    assert cpu.f32_lanes == 16 if cpu.has("avx512f") else cpu.f32_lanes <= 8
    sizes = [c.size_bytes for c in (cpu.l1d, cpu.l2, cpu.l3) if c is not None]
    assert sizes == sorted(sizes) and len(set(sizes)) == len(sizes)
    assert all(c.line_bytes in (32, 64, 128, 256) for c in cpu.caches)
    if cpu.clock_ghz is not None:
        assert 0.5 < cpu.clock_ghz < 7 and cpu.peak_gflops_f32 is not None and cpu.peak_gflops_f32 > 0


def cgroup_tree(root: Path, membership: str, files: Mapping[str, str]) -> Path:
    """``/proc/self/cgroup`` saying ``membership``, and control files under ``/sys/fs/cgroup``."""
    (root / "proc" / "self").mkdir(parents=True)
    (root / "proc" / "self" / "cgroup").write_text(membership)
    for name, text in files.items():
        path = root / "sys" / "fs" / "cgroup" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
    return root


@pytest.mark.parametrize(("membership", "files", "quota"), [
    # cgroup v2, the tightest quota along the path wins (a pod's, under an unlimited node and container)
    ("0::/kubepods/pod1/c1\n", {"kubepods/cpu.max": "max 100000", "kubepods/pod1/cpu.max": "250000 100000",
                                "kubepods/pod1/c1/cpu.max": "max 100000"}, 2.5),
    # v2 in a container with its own namespace: the group is the mount's root
    ("0::/\n", {"cpu.max": "200000 100000"}, 2.0),
    # v2, the host's path is not under the container's mount: its root is the group
    ("0::/system.slice/docker-1.scope\n", {"cpu.max": "50000 100000"}, 0.5),
    # v1 (docker --cpus 1.5), an unlimited root above
    ("12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n", {
        "cpu,cpuacct/cpu.cfs_quota_us": "-1", "cpu,cpuacct/cpu.cfs_period_us": "100000",
        "cpu,cpuacct/docker/abc/cpu.cfs_quota_us": "150000", "cpu,cpuacct/docker/abc/cpu.cfs_period_us": "100000"},
     1.5),
    # no quota anywhere, in either version
    ("0::/user.slice\n", {"cpu.max": "max 100000", "user.slice/cpu.max": "max 100000"}, None),
    ("4:cpu,cpuacct:/\n", {"cpu,cpuacct/cpu.cfs_quota_us": "-1", "cpu,cpuacct/cpu.cfs_period_us": "100000"}, None),
    # nothing readable, or nothing to read
    ("0::/\n", {}, None),
    ("garbage\n", {"cpu.max": "100000 100000"}, None),
])
def test_the_cpu_quota_of_the_process_control_group(tmp_path: Path, membership: str, files: Mapping[str, str],
                                                    quota: float | None) -> None:
    assert cpu_quota(cgroup_tree(tmp_path, membership, files)) == quota


def test_no_proc_means_no_quota(tmp_path: Path) -> None:
    assert cpu_quota(tmp_path) is None


@pytest.mark.parametrize(("quota", "usable"), [(None, {0, 2, 4, 6}), (8.0, {0, 2, 4, 6}), (2.5, {0, 2, 4}),
                                               (2.0, {0, 2}), (0.5, {0})])
def test_a_launch_spreads_over_as_many_cpus_as_the_quota_pays_for(quota: float | None, usable: set[int]) -> None:
    assert usable_cpus({6, 2, 4, 0}, quota) == usable


def test_this_process_runs_its_kernels_on_its_usable_cpus() -> None:
    assert usable_cpus(os.sched_getaffinity(0), cpu_quota()) == PROCESS_CPUS
    assert detect_cpu().logical_cores == len(PROCESS_CPUS)
