"""The emulator as a target: it says why it cannot run where its compiler is missing, and what
enters its cache keys."""

from __future__ import annotations

import pytest

from compiler.backends import emu, get_target
from compiler.backends.emu.target import EmuTarget
from compiler.backends.errors import BackendUnavailableError


def test_the_emulator_can_run_here(tmp_path) -> None:
    assert EmuTarget(config=emu.EmuConfig(cache_dir=tmp_path)).unavailable_reason() is None


def test_a_missing_compiler_is_the_reason_it_cannot_run(tmp_path) -> None:
    runner = EmuTarget(config=emu.EmuConfig(cache_dir=tmp_path, cxx="no-such-g++-42"))
    reason = runner.unavailable_reason()
    assert reason is not None and "'no-such-g++-42' is not on PATH" in reason and "\n" not in reason


def test_an_empty_path_leaves_the_default_runner_without_g_plus_plus(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("WARPMAP_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))
    reason = get_target("emu").unavailable_reason()
    assert reason is not None and "'g++' is not on PATH" in reason


def test_a_compiler_that_is_not_gcc_is_refused(tmp_path) -> None:
    fake = tmp_path / "fake-cxx"
    fake.write_text("#!/bin/sh\necho 'clang version 17.0.1'\n")
    fake.chmod(0o755)
    reason = EmuTarget(config=emu.EmuConfig(cache_dir=tmp_path, cxx=str(fake))).unavailable_reason()
    assert reason is not None and "needs GCC 12 or later" in reason and "clang version 17" in reason


def test_the_fingerprint_names_the_compiler_and_flags_and_follows_the_config(tmp_path) -> None:
    plain = EmuTarget(config=emu.EmuConfig(cache_dir=tmp_path)).fingerprint()
    assert plain["target"] == "emu" and plain["cxx"].startswith("g++") and "-O2" in plain["flags"].split()
    assert all(not flag.startswith("-I") for flag in plain["flags"].split())  # the install path is no key
    assert EmuTarget(config=emu.EmuConfig(cache_dir=tmp_path / "other")).fingerprint() == plain
    faster = EmuTarget(config=emu.EmuConfig(cache_dir=tmp_path, opt_level="-O3")).fingerprint()
    assert faster["flags"] != plain["flags"] and faster["emulator"] == plain["emulator"]


def test_no_fingerprint_without_a_compiler(tmp_path) -> None:
    runner = EmuTarget(config=emu.EmuConfig(cache_dir=tmp_path, cxx="no-such-g++-42"))
    with pytest.raises(BackendUnavailableError, match="'no-such-g\\+\\+-42' is not on PATH"):
        runner.fingerprint()


def test_the_cuda_fingerprint_needs_a_gpu() -> None:
    cuda = get_target("cuda")
    if cuda.unavailable_reason() is None:
        fingerprint = cuda.fingerprint()
        assert fingerprint["arch"].startswith("sm_") and fingerprint["nvrtc"]
    else:
        with pytest.raises(BackendUnavailableError, match="no GPU"):
            cuda.fingerprint()
