"""The target interface on each target: compile to a cached artifact, load with workspaces, run by name, time."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from compiler.backends import Artifact, CompileFailure, get_target
from compiler.backends.cpu import CpuConfig
from compiler.backends.emu.target import poison_workspaces
from compiler.backends.errors import BackendUnavailableError, KernelTimeoutError, TimingUnavailableError
from compiler.backends.timing import Protocol
from compiler.cpu_device import detect_cpu
from compiler.device import DEVICES, template_target
from compiler.numeric import poisoned, relative_error
from compiler.ops import get_operator
from compiler.ops.cpu.gemm import SCRATCH_SLOTS
from compiler.ops.cpu.matmul import CpuMatmulSchedule
from compiler.ops.matmul_spec import MatmulSpec
from compiler.program import Program

from .conftest import ROWSUM, CpuRowSum, CudaRowSum, RowSumSpec

H200 = DEVICES["h200"]
QUICK = Protocol(warmup_ms=1, min_repetitions=3, target_ms=1)


@pytest.fixture
def cpu(tmp_path: Path):
    target = get_target("cpu", config=CpuConfig(cache_dir=tmp_path / "cpu"))
    if target.unavailable_reason() is not None:
        pytest.skip(target.unavailable_reason())
    return target


def _run(target, artifact: Artifact, spec: RowSumSpec, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    inputs = ROWSUM.inputs(spec, np.random.default_rng(seed))
    out = poisoned((spec.rows,), "float32")
    target.run(target.load(artifact), {"x": inputs["x"], "out": out}, timeout_s=30)
    return out, ROWSUM.reference(spec, inputs)["out"]


def test_targets_are_chosen_by_name_and_name_their_templates() -> None:
    assert [get_target(n).template_target for n in ("emu", "cuda", "cpu")] == ["cuda", "cuda", "cpu"]
    assert template_target(get_target("cpu").device()) == "cpu" and template_target(H200) == "cuda"
    with pytest.raises(ValueError, match="unknown target 'tpu'; known targets: cpu, cuda, emu"):
        get_target("tpu")
    assert get_target("emu", gpu=DEVICES["a100"]).device() == DEVICES["a100"]


@pytest.mark.parametrize(("rows", "cols", "schedule"), [(37, 101, CpuRowSum(4, 3)), (1, 1, CpuRowSum(1, 1)),
                                                         (5, 2, CpuRowSum(4, 3))])
def test_cpu_runs_a_two_launch_program_with_its_workspace(cpu, rows: int, cols: int, schedule: CpuRowSum) -> None:
    spec = RowSumSpec(rows=rows, cols=cols)
    artifact = cpu.compile(ROWSUM.build(spec, schedule, "cpu"))
    assert isinstance(artifact, Artifact), artifact
    assert [b.source.entry for b in artifact.launches] == ["rowsum_partial", "rowsum_final"]
    assert "#pragma omp parallel for" in artifact.launches[0].source.source  # the host dialect, not CUDA
    got, expected = _run(cpu, artifact, spec)
    assert relative_error(got.astype(np.float64), expected) <= 1e-5


def test_cpu_artifacts_are_content_addressed_and_never_rebuilt(cpu) -> None:
    program = ROWSUM.build(RowSumSpec(rows=7, cols=9), CpuRowSum(4, 3), "cpu")
    first, again = cpu.compile(program), cpu.compile(program)
    assert isinstance(first, Artifact) and isinstance(again, Artifact)
    assert first.key == again.key
    assert [b.binaries["so"].from_cache for b in first.launches] == [False, False]
    assert [b.binaries["so"].from_cache for b in again.launches] == [True, True]
    other = cpu.compile(ROWSUM.build(RowSumSpec(rows=7, cols=10), CpuRowSum(4, 3), "cpu"))
    assert isinstance(other, Artifact) and other.key != first.key


def test_cpu_workspaces_are_aligned_and_poisoned_before_each_run(cpu) -> None:
    spec = RowSumSpec(rows=7, cols=9)
    artifact = cpu.compile(ROWSUM.build(spec, CpuRowSum(4, 3), "cpu"))
    loaded = cpu.load(artifact)
    partial = loaded.workspaces["partial"]
    assert partial.shape == (7, 4) and partial.ctypes.data % 64 == 0 and np.isnan(partial).all()
    x = np.ones((7, 9), np.float32)
    cpu.run(loaded, {"x": x, "out": np.zeros(7, np.float32)}, timeout_s=30)
    assert not np.isnan(partial[:, :3]).any() and np.isnan(partial[:, 3]).all()  # column 3 is never written
    partial[:] = 0.0
    cpu.run(loaded, {"x": x, "out": np.zeros(7, np.float32)}, timeout_s=30)
    assert np.isnan(partial[:, 3]).all()  # poisoned again: a run cannot lean on what the last one left


def test_a_read_of_an_unwritten_workspace_element_shows(cpu) -> None:
    spec = RowSumSpec(rows=6, cols=5, bug="stale")
    got, _ = _run(cpu, cpu.compile(ROWSUM.build(spec, CpuRowSum(4, 3), "cpu")), spec)
    assert np.isnan(got).all()


def test_arguments_are_checked_by_name(cpu) -> None:
    artifact = cpu.compile(ROWSUM.build(RowSumSpec(rows=3, cols=3), CpuRowSum(1, 1), "cpu"))
    loaded = cpu.load(artifact)
    with pytest.raises(ValueError, match=r"takes arguments \['x', 'out'\]; missing \['out'\], unknown \['y'\]"):
        cpu.run(loaded, {"x": np.ones((3, 3), np.float32), "y": np.ones(3, np.float32)}, timeout_s=5)
    with pytest.raises(ValueError, match="must have dtype float32"):
        cpu.run(loaded, {"x": np.ones((3, 3)), "out": np.ones(3, np.float32)}, timeout_s=5)


def test_a_template_bug_the_host_dialect_refuses_is_a_compile_error(cpu) -> None:
    failure = cpu.compile(ROWSUM.build(RowSumSpec(rows=3, cols=3, bug="render"), CpuRowSum(1, 1), "cpu"))
    assert isinstance(failure, CompileFailure) and failure.kind == "compile_error"
    assert "render raised CodegenError" in failure.message and "barrier" in failure.message.lower()


def test_a_cpu_run_past_its_time_limit_fails_as_a_value(cpu) -> None:
    spec = RowSumSpec(rows=1, cols=1, bug="hang")
    artifact = cpu.compile(ROWSUM.build(spec, CpuRowSum(1, 1), "cpu"))
    with pytest.raises(KernelTimeoutError, match=r"still running after 0\.0"):
        cpu.run(cpu.load(artifact), {"x": np.ones((1, 1), np.float32), "out": np.ones(1, np.float32)},
                timeout_s=0.01)


def test_a_bound_call_keeps_its_arrays_alive_and_runs_each_launch(cpu) -> None:
    import gc

    spec = RowSumSpec(rows=37, cols=101)
    inputs = ROWSUM.inputs(spec, np.random.default_rng(3))
    expected = ROWSUM.reference(spec, inputs)["out"]
    out = poisoned((spec.rows,), "float32")
    program = ROWSUM.build(spec, CpuRowSum(4, 3), "cpu")
    launches = cpu.launch_calls(cpu.build(program), {"x": inputs["x"].copy(), "out": out})
    whole = cpu.call(cpu.build(program), {"x": inputs["x"].copy(), "out": out})
    # Nothing but the calls holds the inputs, the loaded kernels or their workspaces now: were the calls
    # to hold raw addresses alone, the memory reused below would feed them other numbers.
    gc.collect()
    _reuse = [np.full_like(inputs["x"], -7.0) for _ in range(8)]
    assert len(launches) == 2
    launches[0]()
    assert np.isnan(out).all()  # the partial sums alone write no output
    launches[1]()
    assert relative_error(out.astype(np.float64), expected) <= 1e-5
    out[:] = np.nan
    whole()
    assert relative_error(out.astype(np.float64), expected) <= 1e-5


def test_building_a_program_that_does_not_compile_raises_with_the_reason(cpu) -> None:
    with pytest.raises(RuntimeError, match="compile_error: render raised CodegenError"):
        cpu.build(ROWSUM.build(RowSumSpec(rows=3, cols=3, bug="render"), CpuRowSum(1, 1), "cpu"))


@pytest.mark.parametrize("flush", [False, True])
def test_cpu_timing_follows_the_protocol(cpu, flush: bool) -> None:
    spec = RowSumSpec(rows=64, cols=64)
    loaded = cpu.load(cpu.compile(ROWSUM.build(spec, CpuRowSum(4, 3), "cpu")))
    protocol = dataclasses.replace(QUICK, flush_caches=flush)
    samples = cpu.time(loaded, {"x": np.ones((64, 64), np.float32), "out": np.zeros(64, np.float32)}, protocol)
    assert len(samples.samples_ns) >= 3 and samples.protocol == protocol
    assert all(s > 0 for s in samples.samples_ns) and samples.p20_ns <= samples.median_ns <= samples.p80_ns


def test_the_emulator_compiles_checks_resources_and_refuses_to_time(tmp_path: Path) -> None:
    emu = get_target("emu", gpu=H200)
    spec = RowSumSpec(rows=37, cols=11)
    artifact = emu.compile(ROWSUM.build(spec, CudaRowSum(32), "cuda"))
    assert isinstance(artifact, Artifact), artifact
    (build,) = artifact.launches
    assert set(build.usage) == {"sm_80", "sm_90"} and build.usage["sm_90"].registers > 0
    assert "__global__" in build.source.source
    got, expected = _run(emu, artifact, spec)
    assert relative_error(got.astype(np.float64), expected) <= 1e-5
    with pytest.raises(TimingUnavailableError, match="the emu target gives no timings"):
        emu.time(emu.load(artifact), {}, QUICK)


def test_a_schedule_past_the_devices_limits_is_invalid_not_an_error() -> None:
    tiny = dataclasses.replace(H200, max_registers_per_block=64)
    for name in ("emu", "cuda"):
        failure = get_target(name, gpu=tiny).compile(ROWSUM.build(RowSumSpec(rows=3, cols=3), CudaRowSum(64), "cuda"))
        assert isinstance(failure, CompileFailure) and failure.kind == "invalid"
        assert "registers x 64 threads > 64" in failure.message
        assert failure.launches and failure.launches[0].usage  # what was built is kept for display


def test_the_cuda_target_builds_the_devices_binary_without_a_gpu() -> None:
    cuda = get_target("cuda", gpu=H200)
    artifact = cuda.compile(ROWSUM.build(RowSumSpec(rows=37, cols=11), CudaRowSum(32), "cuda"))
    assert isinstance(artifact, Artifact), artifact
    (build,) = artifact.launches
    assert set(build.usage) == {"sm_80", "sm_90"} and build.binaries["cubin"][:4] == b"\x7fELF"
    a100 = get_target("cuda", gpu=DEVICES["a100"]).compile(artifact.program)
    assert isinstance(a100, Artifact) and a100.key != artifact.key  # the device's arch is in the address
    if cuda.unavailable_reason() is not None:
        with pytest.raises(BackendUnavailableError, match="no GPU"):
            cuda.load(artifact)


LANES = detect_cpu().f32_lanes
#: 17 x 16 blocks of 4 x LANES, more than SCRATCH_SLOTS: the program declares the most slots it may use.
PACKING = MatmulSpec(m=17 * 4 - 1, n=16 * LANES - 3, k=37)


def _packing_program(pack_a_inside: bool) -> Program:
    schedule = CpuMatmulSchedule(mr=4, nr=LANES, mc=4, kc=16, nc=LANES, pack_b_inside=True,
                                 pack_a_inside=pack_a_inside)
    return get_operator("matmul").build(PACKING, schedule, "cpu")


def _run_matmul(target, program: Program, workers: int) -> tuple[dict[str, np.ndarray], float]:
    """The workspaces ``target`` allocated for ``program`` and the product's error against numpy, the
    output poisoned first."""
    artifact = target.compile(program)
    assert isinstance(artifact, Artifact), artifact
    loaded = target.load(artifact)
    assert all(kernel.workers == workers for kernel in loaded.handles)  # the threads every launch is given
    matmul = get_operator("matmul")
    inputs = matmul.inputs(PACKING, np.random.default_rng(workers))
    c = poisoned((1, PACKING.m, PACKING.n), "float32")
    target.run(loaded, {**inputs, "c": c}, timeout_s=60)
    error = relative_error(c.astype(np.float64), matmul.reference(PACKING, inputs)["c"])
    return loaded.workspaces, error


@pytest.mark.parametrize("pack_a_inside", [False, True], ids=["pack-b-inside", "pack-a-and-b-inside"])
def test_cpu_allocates_a_slot_per_thread_of_its_launches(cpu, pack_a_inside: bool) -> None:
    # The program is built without knowing the host: it declares SCRATCH_SLOTS slots; the target that
    # loads it allocates as many as its launches run threads, and 272 blocks share them correctly.
    program = _packing_program(pack_a_inside)
    scratch = [w for w in program.workspaces if w.per_worker]
    assert sorted(w.name for w in scratch) == (["aw", "bw"] if pack_a_inside else ["bw"])
    assert all(w.shape[0] == SCRATCH_SLOTS for w in scratch)
    assert program.launches[-1].kernel.host_max_workers == SCRATCH_SLOTS
    for workers in (1, 2):
        target = dataclasses.replace(cpu, config=dataclasses.replace(cpu.config, workers=workers))
        workspaces, error = _run_matmul(target, program, workers)
        assert {w.name: workspaces[w.name].shape for w in scratch} == {
            w.name: (workers, *w.shape[1:]) for w in scratch}
        assert error <= 1e-5


def test_cpu_allocates_every_declared_slot_of_a_workspace_without_the_field(cpu) -> None:
    # A program built before workspaces said they have a slot per worker: all of it, as then, and correct.
    program = _packing_program(pack_a_inside=True)
    old = dataclasses.replace(program, workspaces=tuple(dataclasses.replace(w, per_worker=False)
                                                        for w in program.workspaces))
    target = dataclasses.replace(cpu, config=dataclasses.replace(cpu.config, workers=2))
    workspaces, error = _run_matmul(target, old, 2)
    assert workspaces["aw"].shape[0] == workspaces["bw"].shape[0] == SCRATCH_SLOTS
    assert error <= 1e-5


def test_the_emulator_allocates_every_declared_slot_of_a_slot_per_worker() -> None:
    # A GPU target launches no host threads and allocates the declared shape (as cuda's load does too):
    # larger than needed, never smaller than a launch indexes.
    program = _packing_program(pack_a_inside=True)
    assert {name: a.shape for name, a in poison_workspaces(program).items()} == {
        w.name: w.shape for w in program.workspaces}
