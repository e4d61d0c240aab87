"""Every fault is an EmulationError with a message naming kernel, block and thread — never a hang,
a crash of the interpreter or a silently wrong result."""

from __future__ import annotations

import time

import numpy as np
import pytest

from compiler.backends import emu
from compiler.source import KernelSource, Param

X_Y = [Param("x", "float32"), Param("y", "float32")]

DIVERGENT_RETURN = r"""
extern "C" __global__ void early_exit(const float* __restrict__ x, float* __restrict__ y) {
  __shared__ float s[64];
  const int t = threadIdx.x;
  if (blockIdx.x == 1 && t == 3) return;
  s[t] = x[t];
  __syncthreads();
  y[blockIdx.x * 64 + t] = s[63 - t];
}
"""

DIVERGENT_BARRIER = r"""
extern "C" __global__ void half_barrier(const float* __restrict__ x, float* __restrict__ y) {
  const int t = threadIdx.x;
  if (t >= 16) __syncthreads();
  y[t] = x[t];
}
"""

WARP_DEADLOCK = r"""
extern "C" __global__ void warp_deadlock(const float* __restrict__ x, float* __restrict__ y) {
  const int t = threadIdx.x;
  if (t == 0) __syncwarp();
  else __syncthreads();
  y[t] = x[t];
}
"""


def _xy(n: int = 256) -> list[np.ndarray]:
    return [np.arange(n, dtype=np.float32), np.full(n, np.nan, np.float32)]


def test_return_before_a_barrier_names_kernel_and_block(run_kernel) -> None:
    with pytest.raises(emu.BarrierDivergenceError) as info:
        run_kernel(DIVERGENT_RETURN, "early_exit", (3, 1, 1), (64, 1, 1), X_Y, _xy())
    msg = str(info.value)
    assert "kernel 'early_exit' block (1,0,0)" in msg and "__syncthreads" in msg
    assert info.value.kernel == "early_exit"


def test_barrier_reached_by_half_the_block(run_kernel) -> None:
    with pytest.raises(
        emu.BarrierDivergenceError,
        match=r"half_barrier' block \(0,0,0\) thread \(16,0,0\): __syncthreads reached after 16 of 32",
    ):
        run_kernel(DIVERGENT_BARRIER, "half_barrier", (1, 1, 1), (32, 1, 1), X_Y, _xy())


def test_threads_waiting_on_each_other_are_a_deadlock(run_kernel) -> None:
    with pytest.raises(
        emu.DeadlockError, match=r"deadlock in kernel 'warp_deadlock'.*31 threads wait at __syncthreads"
    ):
        run_kernel(WARP_DEADLOCK, "warp_deadlock", (1, 1, 1), (32, 1, 1), X_Y, _xy())


OOB = r"""
extern "C" __global__ void oob(const float* __restrict__ x, float* __restrict__ y, int read_shift,
                               int write_shift) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  y[i + write_shift] = x[i + read_shift];
}
"""
OOB_PARAMS = [*X_Y, Param("read_shift", "int32", False), Param("write_shift", "int32", False)]


def test_read_past_the_end_names_parameter_and_element(run_kernel) -> None:
    with pytest.raises(emu.OutOfBoundsError) as info:
        run_kernel(OOB, "oob", (4, 1, 1), (256, 1, 1), OOB_PARAMS, [*_xy(1024), 1, 0])
    msg = str(info.value)
    assert "out-of-bounds read of parameter 'x'" in msg
    assert "element 1024 (byte offset 4096), but it holds 1024 float32 elements" in msg
    assert "kernel 'oob' block (3,0,0) thread (255,0,0)" in msg


def test_write_past_the_end_and_before_the_start(run_kernel) -> None:
    with pytest.raises(emu.OutOfBoundsError, match="out-of-bounds write of parameter 'y'"):
        run_kernel(OOB, "oob", (4, 1, 1), (256, 1, 1), OOB_PARAMS, [*_xy(1024), 0, 300])
    with pytest.raises(emu.OutOfBoundsError, match=r"read of parameter 'x' .*element -100 "):
        run_kernel(OOB, "oob", (4, 1, 1), (256, 1, 1), OOB_PARAMS, [*_xy(1024), -100, 0])


def test_in_bounds_launch_of_the_same_kernel_passes(run_kernel) -> None:
    x, y = _xy(1024)
    run_kernel(OOB, "oob", (4, 1, 1), (256, 1, 1), OOB_PARAMS, [x, y, 0, 0])
    np.testing.assert_array_equal(x, y)


SPIN = r"""
extern "C" __global__ void spin(const float* __restrict__ x, float* __restrict__ y) {
  volatile int forever = 1;
  while (forever) {}
  y[0] = x[0];
}
"""


def test_a_hang_is_stopped_at_the_time_limit(run_kernel) -> None:
    start = time.perf_counter()
    with pytest.raises(emu.EmulationTimeoutError, match=r"kernel 'spin' ran past its 0.5 s limit"):
        run_kernel(SPIN, "spin", (1, 1, 1), (32, 1, 1), X_Y, _xy(), timeout_s=0.5)
    assert time.perf_counter() - start < 5.0


DIV_ZERO = r"""
extern "C" __global__ void div_zero(int* __restrict__ y, int d) {
  y[threadIdx.x] = 100 / (d + (int)threadIdx.x - 5);
}
"""


def test_a_crash_is_reported_with_its_thread(run_kernel) -> None:
    y = np.zeros(32, np.int32)
    with pytest.raises(emu.EmulationCrashError, match=r"arithmetic exception .* thread \(5,0,0\)"):
        run_kernel(
            DIV_ZERO,
            "div_zero",
            (1, 1, 1),
            (32, 1, 1),
            [Param("y", "int32"), Param("d", "int32", False)],
            [y, 0],
        )


BIG_LOCALS = r"""
extern "C" __global__ void big_locals(const float* __restrict__ x, float* __restrict__ y) {
  float scratch[40000];
  for (int i = 0; i < 40000; ++i) scratch[i] = x[(i + threadIdx.x) & 255];
  y[threadIdx.x] = scratch[(int)x[threadIdx.x] * 97 % 40000];
}
"""


def test_fiber_stack_overflow_is_reported(run_kernel) -> None:
    with pytest.raises(emu.StackOverflowError, match=r"stack overflow in kernel 'big_locals'.*64 KiB"):
        run_kernel(BIG_LOCALS, "big_locals", (1, 1, 1), (32, 1, 1), X_Y, _xy())


BAD_WIDTH = r"""
extern "C" __global__ void bad_width(const float* __restrict__ x, float* __restrict__ y) {
  y[threadIdx.x] = __shfl_down_sync(0xffffffffu, x[threadIdx.x], 1, 12);
}
"""


def test_misused_shuffle_width(run_kernel) -> None:
    with pytest.raises(emu.KernelMisuseError, match="width 12: it must be a power of two"):
        run_kernel(BAD_WIDTH, "bad_width", (1, 1, 1), (32, 1, 1), X_Y, _xy())


def test_compile_error_carries_the_compiler_log(emu_config) -> None:
    k = KernelSource(
        "broken",
        'extern "C" __global__ void broken(float* y) {\n  y[0] = undefined_name;\n}\n',
        (1, 1, 1),
        (1, 1, 1),
        (Param("y", "float32"),),
    )
    with pytest.raises(emu.EmulationCompileError, match="broken: host compile failed") as info:
        emu.compile_kernel(k, config=emu_config)
    assert "broken.cu:2" in info.value.log and "undefined_name" in info.value.log


RACY = r"""
extern "C" __global__ void neighbours(const float* __restrict__ x, float* __restrict__ y) {
  __shared__ float before[16];
  __shared__ float s[64];
  const int t = threadIdx.x;
  if (t < 16) before[t] = 1.0f;
  s[t] = x[t];
  BARRIER
  y[t] = s[(t + 1) % 64];
}
"""


def test_race_detector_reports_a_missing_barrier(run_kernel) -> None:
    src = RACY.replace("BARRIER", "")
    with pytest.raises(emu.SharedMemoryRaceError) as info:
        run_kernel(src, "neighbours", (1, 1, 1), (64, 1, 1), X_Y, _xy(64), detect_races=True)
    msg = str(info.value)
    assert "shared-memory race in kernel 'neighbours' block (0,0,0)" in msg
    # Thread 0 read s[1] before thread 1 wrote it: a read-write race on byte offset 4.
    assert "thread (1,0,0): it writes __shared__ 's' at byte 4 of 256, which thread (0,0,0) read" in msg
    # Without the detector the same kernel runs (and reads the poisoned, never-written value).
    x, y = _xy(64)
    run_kernel(src, "neighbours", (1, 1, 1), (64, 1, 1), X_Y, [x, y])
    assert np.isnan(y[:63]).all()


DYNAMIC_RACE = r"""
extern "C" __global__ void dyn_race(const float* __restrict__ x, float* __restrict__ y) {
  extern __shared__ __align__(16) float d[];
  d[threadIdx.x] = x[threadIdx.x];
  y[threadIdx.x] = d[63 - threadIdx.x];
}
"""


def test_race_detector_covers_dynamic_shared_memory(run_kernel) -> None:
    with pytest.raises(
        emu.SharedMemoryRaceError,
        match=r"\(32,0,0\): it writes extern __shared__ memory at byte 128, which thread \(31,0,0\) read",
    ):
        run_kernel(DYNAMIC_RACE, "dyn_race", (1, 1, 1), (64, 1, 1), X_Y, _xy(64), 256, detect_races=True)


def test_race_detector_accepts_barriers_and_warp_synchronisation(run_kernel) -> None:
    x, y = _xy(64)
    run_kernel(
        RACY.replace("BARRIER", "__syncthreads();"),
        "neighbours",
        (1, 1, 1),
        (64, 1, 1),
        X_Y,
        [x, y],
        detect_races=True,
    )
    np.testing.assert_array_equal(y, np.roll(x, -1))
    warp_local = RACY.replace("BARRIER", "__syncwarp();").replace("(t + 1) % 64", "(t & 32) | ((t + 1) & 31)")
    run_kernel(warp_local, "neighbours", (1, 1, 1), (64, 1, 1), X_Y, [x, y], detect_races=True)
    np.testing.assert_array_equal(y, np.concatenate([np.roll(x[:32], -1), np.roll(x[32:], -1)]))


DYN_OVERRUN = r"""
extern "C" __global__ void dyn_overrun(const float* __restrict__ x, float* __restrict__ y) {
  extern __shared__ __align__(16) float d[];
  d[threadIdx.x] = x[threadIdx.x];
  __syncthreads();
  y[threadIdx.x] = d[threadIdx.x];
}
"""


def test_dynamic_shared_memory_past_shared_bytes(run_kernel) -> None:
    with pytest.raises(
        emu.OutOfBoundsError, match=r"write of dynamic shared memory .*byte 4000, .*shared_bytes = 4000"
    ):
        run_kernel(DYN_OVERRUN, "dyn_overrun", (1, 1, 1), (1024, 1, 1), X_Y, _xy(1024), 4000)
    x, y = _xy(1024)
    run_kernel(DYN_OVERRUN, "dyn_overrun", (1, 1, 1), (1024, 1, 1), X_Y, [x, y], 4 * 1024)
    np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize(("n", "write_shift", "element"), [(1021, 1, 1021), (1000, -1, -1)])
def test_writes_short_of_the_guard_pages_are_found_after_the_launch(run_kernel, n, write_shift, element) -> None:
    # 1021 floats are 4084 bytes, rounded to 4096: the element past the end lies before the guard page.
    # 1000 floats start 96 bytes into their first page: the element before them lies in that page.
    with pytest.raises(emu.OutOfBoundsError) as info:
        run_kernel(OOB, "oob", (1, 1, 1), (n, 1, 1), OOB_PARAMS, [*_xy(n), 0, write_shift])
    msg = str(info.value)
    assert f"out-of-bounds write of parameter 'y' in kernel 'oob': element {element} " in msg
    assert f"but it holds {n} float32 elements (found after the launch" in msg


def test_a_kernel_that_stays_inside_odd_sized_arrays_passes(run_kernel) -> None:
    x, y = _xy(1021)
    run_kernel(OOB, "oob", (1, 1, 1), (1021, 1, 1), OOB_PARAMS, [x, y, 0, 0])
    np.testing.assert_array_equal(y, x)
