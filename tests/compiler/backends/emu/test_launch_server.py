"""Launches go through a launch server, so that this process never forks: from any number of threads,
beside BLAS work, after the server died, and in a forked copy of this process."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

from compiler.backends import emu
from compiler.backends.emu.server import SERVERS
from compiler.source import KernelSource, Param

SCALE = r"""
extern "C" __global__ void scale(const float* __restrict__ x, float* __restrict__ y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = 2.0f * x[i];
}
"""
HANG = r"""
extern "C" __global__ void hang(float* y) {
  volatile int spin = 1;
  while (spin) {}
  y[0] = 1.0f;
}
"""
N = 5000
PARAMS = (Param("x", "float32"), Param("y", "float32"), Param("n", "int32", pointer=False))


def scale_kernel() -> KernelSource:
    return KernelSource("scale", SCALE, (-(-N // 128), 1, 1), (128, 1, 1), PARAMS)


def run_scale(config: emu.EmuConfig, rng: np.random.Generator) -> bool:
    x = rng.standard_normal(N).astype(np.float32)
    y = np.full(N, np.nan, np.float32)
    emu.run(scale_kernel(), [x, y, N], config=config)
    return bool(np.array_equal(y, 2.0 * x))


def test_launches_from_several_threads_leave_blas_work_in_other_threads_intact(emu_config: emu.EmuConfig) -> None:
    # A fork in this process would run OpenBLAS's fork handler, which stops its worker threads in the
    # middle of whatever product another thread is computing: wrong products, or a deadlock. Daemon
    # threads with a deadline, so that such a regression fails instead of hanging the run.
    a = np.random.default_rng(1).standard_normal((400, 400))
    want = a @ a
    wrong: list[str] = []

    def work(seed: int) -> None:
        rng = np.random.default_rng(seed)
        for i in range(25):
            if not run_scale(emu_config, rng):
                wrong.append(f"thread {seed} launch {i}: wrong kernel output")
            if not np.allclose(a @ a, want, rtol=1e-12, atol=1e-9):
                wrong.append(f"thread {seed} product {i}: wrong BLAS result")

    threads = [threading.Thread(target=work, args=(seed,), daemon=True) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads), "launches beside BLAS work deadlocked"
    assert not wrong, wrong


MIXED = {
    "oob": 'extern "C" __global__ void k(const float* x, float* y, int n) { y[n + 16 + threadIdx.x] = x[0]; }',
    "crash": 'extern "C" __global__ void k(const float* x, float* y, int n) { float* p = 0; p[threadIdx.x] = 1.0f; }',
    "hang": 'extern "C" __global__ void k(const float* x, float* y, int n) { volatile int s = 1; while (s) {} }',
}


def test_concurrent_launches_each_get_their_own_outcome_and_leave_nothing_behind(emu_config: emu.EmuConfig) -> None:
    faulty = {name: KernelSource("k", src, (1, 1, 1), (32, 1, 1), PARAMS) for name, src in MIXED.items()}
    expected = {"oob": emu.OutOfBoundsError, "crash": emu.EmulationCrashError, "hang": emu.EmulationTimeoutError}
    for kernel in faulty.values():
        emu.compile_kernel(kernel, config=emu_config)
    outcomes: list[str] = []

    def work(seed: int) -> None:
        rng = np.random.default_rng(seed)
        for i in range(12):
            name = ("ok", "oob", "ok", "crash", "ok", "hang")[(i + seed) % 6]
            if name == "ok":
                outcomes.append("ok" if run_scale(emu_config, rng) else f"{seed}/{i}: wrong output")
                continue
            try:
                emu.run(faulty[name], [np.ones(N, np.float32), np.zeros(N, np.float32), N], config=emu_config,
                        timeout_s=0.5)
                outcomes.append(f"{seed}/{i}: {name} raised nothing")
            except emu.EmulationError as exc:
                ok = isinstance(exc, expected[name])
                outcomes.append("ok" if ok else f"{seed}/{i}: {name} raised {exc!r}")

    threads = [threading.Thread(target=work, args=(seed,), daemon=True) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert [o for o in outcomes if o != "ok"] == [] and len(outcomes) == 48
    assert _children(SERVERS.get(emu_config).process.pid) == []


def test_a_dead_server_is_replaced(emu_config: emu.EmuConfig, rng: np.random.Generator) -> None:
    assert run_scale(emu_config, rng)
    server = SERVERS.get(emu_config)
    server.process.kill()
    server.process.wait()
    assert run_scale(emu_config, rng)
    assert SERVERS.get(emu_config) is not server


def test_a_server_dying_mid_launch_fails_that_launch_and_kills_its_child(emu_config: emu.EmuConfig) -> None:
    kernel = KernelSource("hang", HANG, (1, 1, 1), (32, 1, 1), (Param("y", "float32"),))
    emu.compile_kernel(kernel, config=emu_config)
    server = SERVERS.get(emu_config)
    children_before = _children(server.process.pid)

    def kill_server_soon() -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and len(_children(server.process.pid)) <= len(children_before):
            time.sleep(0.01)
        server.process.kill()

    killer = threading.Thread(target=kill_server_soon)
    killer.start()
    started = time.monotonic()
    with pytest.raises(emu.EmulationCrashError, match="launch server went away"):
        emu.run(kernel, [np.zeros(1, np.float32)], config=emu_config, timeout_s=30)
    killer.join()
    assert time.monotonic() - started < 10
    orphans = set(_children(server.process.pid)) - set(children_before)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(_alive(pid) for pid in orphans):
        time.sleep(0.05)
    assert not any(_alive(pid) for pid in orphans)


def test_a_server_that_cannot_start_is_a_clear_error(tmp_path, monkeypatch, rng: np.random.Generator) -> None:
    config = emu.EmuConfig(cache_dir=tmp_path, cc="cc")  # another runtime key: not the session's server
    not_executable = tmp_path / "wm_runtime"
    not_executable.write_text("not a program")
    monkeypatch.setattr("compiler.backends.emu.server.build_runtime", lambda _config: not_executable)
    with pytest.raises(emu.EmulationLoadError, match=r"cannot start the emulator's launch server .*noexec"):
        run_scale(config, rng)


def test_a_forked_copy_of_this_process_gets_its_own_server(emu_config: emu.EmuConfig) -> None:
    parent_server = SERVERS.get(emu_config)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child reports through the pipe and never returns into pytest
        code = 1
        try:
            ok = run_scale(emu_config, np.random.default_rng(2))
            own = SERVERS.get(emu_config) is not parent_server
            code = 0 if ok and own else 2
        finally:
            os.write(write, bytes([code]))
            os._exit(0)
    os.close(write)
    try:
        result = os.read(read, 1)
    finally:
        os.close(read)
        os.waitpid(pid, 0)
    assert result == b"\0"
    assert parent_server.alive()


def test_the_server_and_its_launches_end_when_its_process_is_killed(tmp_path) -> None:
    script = textwrap.dedent(
        f"""
        import threading, time
        from pathlib import Path
        import numpy as np
        from compiler.backends import emu
        from compiler.backends.emu.server import SERVERS
        from compiler.source import KernelSource, Param
        cfg = emu.EmuConfig(cache_dir=Path({str(tmp_path)!r}))
        hang = KernelSource("hang", {HANG!r}, (1, 1, 1), (32, 1, 1), (Param("y", "float32"),))
        emu.compile_kernel(hang, config=cfg)
        server = SERVERS.get(cfg)
        y = np.zeros(1, np.float32)
        threading.Thread(target=emu.run, args=(hang, [y]), kwargs={{"config": cfg}}, daemon=True).start()
        print(server.process.pid, flush=True)
        time.sleep(60)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        server_pid = int(proc.stdout.readline())
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not _children(server_pid):
            time.sleep(0.01)
        launches = _children(server_pid)
        assert _alive(server_pid) and launches
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(_alive(pid) for pid in (server_pid, *launches)):
        time.sleep(0.05)
    assert not any(_alive(pid) for pid in (server_pid, *launches))


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as children:
            text = children.read()
    except OSError:
        return []
    return [int(c) for c in text.split()]


def _alive(pid: int) -> bool:
    """Running (not gone, not a zombie waiting for a reaper)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_launch_waits_on_descriptors_past_1024(emu_config: emu.EmuConfig, rng: np.random.Generator) -> None:
    # A long-lived process (a service, a test run) may hold over a thousand files; the launch's reply
    # socket and pidfd then get numbers select() refuses. The time limit must still work there.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 1200
    if hard != resource.RLIM_INFINITY and hard < want:
        pytest.skip(f"RLIMIT_NOFILE hard limit {hard} < {want}")
    assert run_scale(emu_config, rng)  # the server and its socket first, at a low number
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, want), hard))
    held: list[int] = []
    try:
        while not held or held[-1] < 1100:  # every lower number taken, so new sockets land above
            held.append(os.open(os.devnull, os.O_RDONLY))
        assert run_scale(emu_config, rng)
        kernel = KernelSource("hang", HANG, (1, 1, 1), (32, 1, 1), (Param("y", "float32"),))
        with pytest.raises(emu.EmulationTimeoutError):
            emu.run(kernel, [np.zeros(1, np.float32)], config=emu_config, timeout_s=0.3)
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
