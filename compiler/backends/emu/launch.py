"""Launch a compiled kernel in a forked child process and bring its outputs back.

Process model: the runtime library is loaded once into this process; each launch lays the arguments
out in an anonymous shared mapping, and the runtime forks. The child loads the kernel, runs all
blocks on ``workers`` OS threads and exits; this process waits on the child's pidfd with the time
limit, kills it when the limit passes, and copies the arguments back from the shared mapping. A
crash, a hang or a fiber stack overflow therefore costs one child, never this interpreter, and a
launch costs one fork (about a millisecond) instead of a process start.

With ``check_bounds`` each argument's data ends exactly where an inaccessible guard region starts
(data sizes are rounded up to 16 bytes, so an overrun by less than that is not seen), with another
guard region below its first page; a hit is reported as :class:`OutOfBoundsError` naming the parameter
and element.

Threads: launches may run from several threads at once, but not beside a multithreaded BLAS call in
another thread. ``fork`` runs OpenBLAS's fork handler, which stops OpenBLAS's worker threads even in
the middle of another thread's computation, whose result is then silently wrong (a matmul reference, a
``np.linalg.norm``). :func:`search.verify.check_schedules` therefore launches and compares in one
thread, and :func:`compiler.numeric.relative_error` avoids BLAS altogether.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import select
import signal
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from compiler.numeric import STORAGE_DTYPES
from compiler.source import KernelSource, Param

from . import errors
from .build import ENTRY_SYMBOL, EmuBinary, EmuConfig, build_runtime, compile_kernel, runtime_key
from .symbols import describe_shared_locations

MAX_THREADS_PER_BLOCK = 1024
_PAGE = mmap.PAGESIZE
_GUARD = 64 << 10
_STATUS_BYTES = _PAGE

#: Element dtypes of pointer arguments; bfloat16 travels as uint16 bit patterns.
NUMPY_DTYPES = STORAGE_DTYPES

#: Runtime libraries loaded into this process, by build (see ``_runtime``).
_RUNTIMES: dict[str, ctypes.CDLL] = {}
_RUNTIMES_LOCK = threading.Lock()

_ERRORS: dict[int, type[errors.EmulationError]] = {
    1: errors.EmulationLoadError,
    2: errors.BarrierDivergenceError,
    3: errors.OutOfBoundsError,
    4: errors.DeadlockError,
    5: errors.StackOverflowError,
    6: errors.EmulationCrashError,
    7: errors.KernelMisuseError,
    8: errors.SharedMemoryRaceError,
}


class _Status(ctypes.Structure):
    _fields_ = (
        ("code", ctypes.c_int32),
        ("reserved", ctypes.c_int32),
        ("elapsed_s", ctypes.c_double),
        ("message", ctypes.c_char * 2048),
    )


class _Buffer(ctypes.Structure):
    _fields_ = (
        ("data", ctypes.c_void_p),
        ("nbytes", ctypes.c_uint64),
        ("alloc_bytes", ctypes.c_uint64),
        ("elem_bytes", ctypes.c_uint64),
        ("guard_lo", ctypes.c_void_p),
        ("guard_hi", ctypes.c_void_p),
        ("guard_bytes", ctypes.c_uint64),
        ("name", ctypes.c_char_p),
        ("dtype", ctypes.c_char_p),
    )


class _Desc(ctypes.Structure):
    _fields_ = (
        ("so_path", ctypes.c_char_p),
        ("entry_symbol", ctypes.c_char_p),
        ("kernel_name", ctypes.c_char_p),
        ("grid", ctypes.c_uint32 * 3),
        ("block", ctypes.c_uint32 * 3),
        ("dyn_shared", ctypes.c_uint64),
        ("argv", ctypes.POINTER(ctypes.c_void_p)),
        ("nbufs", ctypes.c_int32),
        ("check_bounds", ctypes.c_int32),
        ("bufs", ctypes.POINTER(_Buffer)),
        ("workers", ctypes.c_int32),
        ("detect_races", ctypes.c_int32),
        ("stack_bytes", ctypes.c_uint64),
        ("status", ctypes.c_void_p),
    )


@dataclass(frozen=True)
class LaunchStats:
    """``kernel_s``: time the child spent running blocks; ``wall_s``: the whole launch, fork included."""

    kernel_s: float
    wall_s: float


@dataclass(frozen=True)
class _Slot:
    """Where one pointer argument lives inside the shared mapping (offsets from its start)."""

    data: int
    nbytes: int
    alloc: int
    guard_lo: int
    guard_hi: int


class _SharedRegion:
    """Anonymous memory shared with forked children, mapped and unmapped explicitly so that numpy views
    into it never pin it (a Python ``mmap`` refuses to close while views exist)."""

    _libc = ctypes.CDLL(None, use_errno=True)
    _libc.mmap.restype = ctypes.c_void_p
    _libc.mmap.argtypes = (
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_long,
    )
    _libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)

    def __init__(self, nbytes: int) -> None:
        addr = self._libc.mmap(
            None, nbytes, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED | mmap.MAP_ANONYMOUS, -1, 0
        )
        if addr in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), f"cannot map {nbytes} bytes of shared memory")
        self.address: int = addr
        self.nbytes = nbytes

    def array(self, offset: int, dtype: np.dtype, count: int) -> np.ndarray:
        raw = (ctypes.c_uint8 * (count * dtype.itemsize)).from_address(self.address + offset)
        return np.frombuffer(raw, dtype=dtype, count=count)

    def close(self) -> None:
        self._libc.munmap(self.address, self.nbytes)


def _runtime(config: EmuConfig) -> ctypes.CDLL:
    """The runtime library, loaded once per process and runtime build, whatever the cache folder.

    A second copy of the same build must never be loaded: kernel libraries bind (RTLD_GLOBAL) to the
    first copy's symbols, while the second copy would keep its own guard-page registry, so a bounds
    fault would reach no handler that knows the guards.
    """
    key = runtime_key(config)
    with _RUNTIMES_LOCK:
        if key not in _RUNTIMES:
            lib = ctypes.CDLL(str(build_runtime(config)), mode=os.RTLD_NOW | os.RTLD_GLOBAL)
            lib.wm_launch_fork.restype = ctypes.c_long
            lib.wm_launch_fork.argtypes = (ctypes.POINTER(_Desc),)
            _RUNTIMES[key] = lib
        return _RUNTIMES[key]


def _round_up(n: int, to: int) -> int:
    return (n + to - 1) // to * to


def _layout(sizes: Sequence[int], check_bounds: bool) -> tuple[list[_Slot], int]:
    slots, offset = [], _STATUS_BYTES
    for nbytes in sizes:
        alloc = max(16, _round_up(nbytes, 16))
        if check_bounds:
            pages = _round_up(alloc, _PAGE)
            guard_lo = offset
            guard_hi = offset + _GUARD + pages
            slots.append(_Slot(guard_hi - alloc, nbytes, alloc, guard_lo, guard_hi))
            offset = guard_hi + _GUARD
        else:
            slots.append(_Slot(offset, nbytes, alloc, 0, 0))
            offset += _round_up(alloc, 64)
    return slots, _round_up(offset, _PAGE)


def _check_args(kernel: KernelSource, args: Sequence[object]) -> None:
    if len(args) != len(kernel.params):
        names = ", ".join(p.name for p in kernel.params)
        raise errors.EmulationArgumentError(
            kernel.entry,
            f"{kernel.entry}: expected {len(kernel.params)} arguments ({names}), got {len(args)}",
        )
    for p, a in zip(kernel.params, args, strict=True):
        if p.pointer:
            want = NUMPY_DTYPES[p.dtype]
            if not isinstance(a, np.ndarray) or a.dtype != want:
                got = f"array of {a.dtype}" if isinstance(a, np.ndarray) else type(a).__name__
                raise errors.EmulationArgumentError(
                    kernel.entry,
                    f"{kernel.entry}: parameter {p.name!r} needs a numpy array of {want} "
                    f"({p.dtype}), got {got}",
                )
        elif isinstance(a, np.ndarray) or not isinstance(a, int | float | np.integer | np.floating | bool):
            raise errors.EmulationArgumentError(
                kernel.entry,
                f"{kernel.entry}: parameter {p.name!r} is a {p.dtype} scalar, got {type(a).__name__}",
            )


def _scalar_bytes(kernel: KernelSource, p: Param, value: object) -> bytes:
    dtype = NUMPY_DTYPES[p.dtype]
    try:
        arr = np.array(value, dtype=dtype) if dtype.kind != "f" else np.array(value).astype(dtype)
    except (OverflowError, ValueError) as exc:
        raise errors.EmulationArgumentError(
            kernel.entry, f"{kernel.entry}: parameter {p.name!r}: {value!r} does not fit {p.dtype}"
        ) from exc
    if dtype.kind in "iu" and int(arr) != value:
        raise errors.EmulationArgumentError(
            kernel.entry, f"{kernel.entry}: parameter {p.name!r}: {value!r} does not fit {p.dtype}"
        )
    return arr.tobytes().ljust(8, b"\0")


def _open_binary(binary: EmuBinary, config: EmuConfig) -> int:
    """A descriptor for the kernel library; the child loads it through /proc/self/fd, so a concurrent
    cache eviction after this point cannot pull it away. Rebuilt if it was evicted already."""
    try:
        return os.open(binary.path, os.O_RDONLY)
    except FileNotFoundError:
        rebuilt = compile_kernel(binary.kernel, config=config, detect_races=binary.detect_races)
        return os.open(rebuilt.path, os.O_RDONLY)


def _wait(pid: int, timeout_s: float) -> int | None:
    """The child's wait status, or None if it ran past ``timeout_s`` (it is then killed and reaped)."""
    pidfd = os.pidfd_open(pid)
    try:
        ready, _, _ = select.select([pidfd], [], [], timeout_s)
    except BaseException:  # an interrupt must not leave the child running
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise
    finally:
        os.close(pidfd)
    if not ready:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        return None
    return os.waitpid(pid, 0)[1]


def launch(
    binary: EmuBinary,
    args: Sequence[np.ndarray | int | float],
    *,
    config: EmuConfig | None = None,
    timeout_s: float = 60.0,
    check_bounds: bool = True,
) -> LaunchStats:
    """Run every block of ``binary``'s kernel once; pointer arguments are updated in place."""
    cfg = config or EmuConfig.default()
    kernel = binary.kernel
    _check_args(kernel, args)
    if timeout_s <= 0:
        raise ValueError(f"{kernel.entry}: timeout_s must be positive, got {timeout_s}")
    if kernel.threads_per_block > MAX_THREADS_PER_BLOCK:
        raise errors.EmulationArgumentError(
            kernel.entry,
            f"{kernel.entry}: block {kernel.block} has {kernel.threads_per_block} threads; "
            f"CUDA allows at most {MAX_THREADS_PER_BLOCK}",
        )
    lib = _runtime(cfg)
    pointers = [(p, a) for p, a in zip(kernel.params, args, strict=True) if p.pointer]
    slots, total = _layout([a.nbytes for _, a in pointers], check_bounds)  # type: ignore[union-attr]
    start = time.perf_counter()
    shm = _SharedRegion(total)
    base = shm.address
    views: list[np.ndarray] = []
    try:
        bufs = (_Buffer * max(1, len(pointers)))()
        for i, ((p, a), s) in enumerate(zip(pointers, slots, strict=True)):
            arr = a  # type: ignore[assignment]
            view = shm.array(s.data, arr.dtype, arr.size)
            view[...] = arr.reshape(-1)
            views.append(view)
            bufs[i] = _Buffer(
                base + s.data,
                s.nbytes,
                s.alloc,
                arr.dtype.itemsize,
                base + s.guard_lo if check_bounds else None,
                base + s.guard_hi if check_bounds else None,
                _GUARD if check_bounds else 0,
                p.name.encode(),
                p.dtype.encode(),
            )
        scalars = ctypes.create_string_buffer(8 * max(1, len(kernel.params)))
        argv = (ctypes.c_void_p * max(1, len(kernel.params)))()
        addr_scalars = ctypes.addressof(scalars)
        slot_iter = iter(slots)
        for i, (p, a) in enumerate(zip(kernel.params, args, strict=True)):
            if p.pointer:
                argv[i] = base + next(slot_iter).data
            else:
                ctypes.memmove(addr_scalars + 8 * i, _scalar_bytes(kernel, p, a), 8)
                argv[i] = addr_scalars + 8 * i
        fd = _open_binary(binary, cfg)
        try:
            desc = _Desc(
                f"/proc/self/fd/{fd}".encode(),
                ENTRY_SYMBOL.encode(),
                kernel.entry.encode(),
                (ctypes.c_uint32 * 3)(*kernel.grid),
                (ctypes.c_uint32 * 3)(*kernel.block),
                kernel.shared_bytes,
                argv,
                len(pointers),
                int(check_bounds),
                bufs,
                cfg.workers,
                int(binary.detect_races),
                cfg.stack_bytes,
                base,
            )
            pid = lib.wm_launch_fork(ctypes.byref(desc))
            if pid < 0:
                raise errors.EmulationCrashError(
                    kernel.entry, f"{kernel.entry}: fork failed: {os.strerror(-pid)}"
                )
            wait_status = _wait(pid, timeout_s)
        finally:
            os.close(fd)
        status = _Status.from_address(base)
        _raise_on_failure(binary, wait_status, status, timeout_s)
        kernel_s = status.elapsed_s
        for (_, a), view in zip(pointers, views, strict=True):
            arr = a  # type: ignore[assignment]
            if arr.flags.writeable:
                np.copyto(arr, view.reshape(arr.shape))
    finally:
        shm.close()
    return LaunchStats(kernel_s=kernel_s, wall_s=time.perf_counter() - start)


def _raise_on_failure(binary: EmuBinary, wait_status: int | None, status: _Status, timeout_s: float) -> None:
    name = binary.kernel.entry
    if wait_status is None:
        raise errors.EmulationTimeoutError(
            name,
            f"kernel '{name}' ran past its {timeout_s:g} s limit and was stopped (a hang, or too much work "
            "for the emulator)",
        )
    message = describe_shared_locations(status.message.decode(errors="replace"), binary.path)
    if status.code in _ERRORS:
        raise _ERRORS[status.code](name, message)
    if os.WIFSIGNALED(wait_status):
        sig = os.WTERMSIG(wait_status)
        raise errors.EmulationCrashError(
            name, f"kernel '{name}': the launch process died of signal {sig} ({signal.Signals(sig).name})"
        )
    if not os.WIFEXITED(wait_status) or os.WEXITSTATUS(wait_status) != 0 or status.code != 0:
        raise errors.EmulationCrashError(
            name, f"kernel '{name}': the launch process ended without a result (wait status {wait_status})"
        )
