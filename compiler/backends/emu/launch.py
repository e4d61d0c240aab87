"""Launch a compiled kernel in a child of the launch server and bring its outputs back.

Each launch lays the arguments out in a shared memory file (status page, launch description,
arguments), hands it with the kernel library to this process's launch server (``server.py``), which
forks a child, and waits with the time limit, killing the child when the limit passes. The child maps
the file, loads the kernel, runs all blocks on ``workers`` OS threads and exits; this process copies
the arguments back. A crash, a hang or a fiber stack overflow therefore costs one child, never this
interpreter, and launches may come from several threads at once.

With ``check_bounds`` each argument's data ends where an inaccessible guard region starts (data
sizes are rounded up to 16 bytes), with another guard region below its first page; a hit is reported
as :class:`OutOfBoundsError` naming the parameter, element, block and thread. The few bytes between
the data and the guards (the rounding above it, the rest of its first page below it) hold a canary
pattern: a write there is reported after the launch, naming the parameter and element; a read there
is not seen.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import signal
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from compiler.numeric import STORAGE_DTYPES
from compiler.source import KernelSource, Param

from . import errors
from .abi import DESC_OFFSET, REQUEST_MAGIC, BufferEntry, LaunchDesc, SharedFile, Status
from .build import ENTRY_SYMBOL, EmuBinary, EmuConfig, compile_kernel
from .server import SERVERS
from .symbols import describe_shared_locations

MAX_THREADS_PER_BLOCK = 1024
_PAGE = mmap.PAGESIZE
_GUARD = 64 << 10
#: Fills the bytes between an array and its guard pages, so that writes there are found afterwards.
_CANARY = 0xA5

#: Element dtypes of pointer arguments; bfloat16 travels as uint16 bit patterns.
NUMPY_DTYPES = STORAGE_DTYPES

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


@dataclass(frozen=True)
class LaunchStats:
    """``kernel_s``: time the child spent running blocks; ``cpu_s``: the child's CPU time (all its
    threads); ``wall_s``: the whole launch, as seen here."""

    kernel_s: float
    wall_s: float
    cpu_s: float = 0.0


@dataclass(frozen=True)
class _Slot:
    """Where one pointer argument lives inside the shared file (offsets from its start)."""

    data: int
    nbytes: int
    alloc: int
    guard_lo: int
    guard_hi: int


def _round_up(n: int, to: int) -> int:
    return (n + to - 1) // to * to


def _layout(sizes: Sequence[int], check_bounds: bool, start: int) -> tuple[list[_Slot], int]:
    slots, offset = [], start
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


def _canaries(slot: _Slot) -> tuple[tuple[int, int], tuple[int, int]]:
    """The accessible bytes around a buffer's data, as (offset, count): below it, from the start of its
    first page, and above it, up to the guard (the rounding to 16 bytes)."""
    first = slot.guard_lo + _GUARD
    end = slot.data + slot.nbytes
    return (first, slot.data - first), (end, slot.guard_hi - end)


def _check_canaries(kernel: KernelSource, shared: SharedFile, arrays: Sequence[_Array],
                    slots: Sequence[_Slot]) -> None:
    """Writes that landed next to an array but short of its guard pages, found after the launch."""
    for array, slot in zip(arrays, slots, strict=True):
        below, above = _canaries(slot)
        written = [offset + int(i) - slot.data for offset, count in (below, above)
                   for i in np.flatnonzero(shared.array(offset, np.dtype(np.uint8), count) != _CANARY)]
        if written:
            # Report the write closest to the array: the first byte past its end, or the last before it.
            nearest = min(written, key=lambda b: b - slot.nbytes if b >= 0 else -b)
            itemsize = array.array.dtype.itemsize
            raise errors.OutOfBoundsError(
                kernel.entry,
                f"out-of-bounds write of parameter '{array.name}' in kernel '{kernel.entry}': element "
                f"{nearest // itemsize} (byte offset {nearest}), but it holds {array.array.size} {array.dtype} "
                "elements (found after the launch, beside the array and short of its guard pages, so the "
                "block and thread are unknown)",
            )


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


class _Header:
    """The launch description, buffer table, argument vector, scalars and strings that follow the
    status page, as offsets from the start of the shared file."""

    def __init__(self, nargs: int, nbufs: int, strings: Sequence[str], nblocks: int = 0) -> None:
        offset = DESC_OFFSET + ctypes.sizeof(LaunchDesc)
        self.bufs = _round_up(offset, 8)
        self.argv = self.bufs + nbufs * ctypes.sizeof(BufferEntry)
        self.scalars = self.argv + 8 * nargs
        self.block_ids = self.scalars + 8 * nargs
        offset = self.block_ids + _round_up(4 * nblocks, 8)
        self.strings: dict[str, int] = {}
        self.blob = bytearray()
        for text in strings:
            if text not in self.strings:
                self.strings[text] = offset + len(self.blob)
                self.blob += text.encode() + b"\0"
        self.end = _round_up(offset + len(self.blob), _PAGE)
        self._blob_at = offset

    def write_strings(self, shared: SharedFile) -> None:
        shared.write(self._blob_at, bytes(self.blob))


@dataclass(frozen=True)
class _Array:
    """One distinct array among the pointer arguments: the first parameter that points to it names it."""

    array: np.ndarray
    name: str
    dtype: str


def _view(a: np.ndarray) -> tuple[object, ...]:
    """What makes two arrays the same view of memory."""
    return a.__array_interface__["data"][0], a.shape, a.strides, a.dtype


def _distinct_arrays(kernel: KernelSource, args: Sequence[object]) -> tuple[list[_Array], list[int | None]]:
    """The arrays behind the pointer arguments, and for each parameter the index of its array (None for
    scalars). The same memory passed twice (the same array, or identical views) is one buffer in the
    child, as on the GPU, so an in-place kernel sees its own writes; a partial overlap is refused."""
    arrays: list[_Array] = []
    index: list[int | None] = []
    for p, a in zip(kernel.params, args, strict=True):
        if not p.pointer:
            index.append(None)
            continue
        assert isinstance(a, np.ndarray)
        for i, known in enumerate(arrays):
            if not np.may_share_memory(a, known.array):
                continue
            if _view(a) == _view(known.array):
                index.append(i)
                break
            if np.shares_memory(a, known.array):
                raise errors.EmulationArgumentError(
                    kernel.entry, f"{kernel.entry}: parameters {known.name!r} and {p.name!r} overlap in part; "
                    "pass the same array for both, or arrays that do not overlap")
        else:
            index.append(len(arrays))
            arrays.append(_Array(a, p.name, p.dtype))
    return arrays, index


def _request(kernel: KernelSource, config: EmuConfig, nblocks: int) -> bytes:
    """The fixed part of a launch request (``wm_request``): layout checks, and the fiber stacks to map.

    It asks for at most one worker per block; the server maps stacks for as many of those as the
    process's mapping limit allows, and the child runs on that many (the only clamp on the count).
    """
    return struct.pack("<IIIIIIQ", REQUEST_MAGIC, ctypes.sizeof(LaunchDesc), ctypes.sizeof(BufferEntry),
                       _workers(config, nblocks), kernel.threads_per_block, 0, config.stack_bytes)


def _workers(config: EmuConfig, nblocks: int) -> int:
    """Workers to ask for: more than one per block would have nothing to do."""
    return max(1, min(config.workers, nblocks))


def _block_ids(kernel: KernelSource, blocks: Sequence[int] | None) -> list[int]:
    """The linear block indices to run (x fastest), all of the grid's when ``blocks`` is None."""
    total = kernel.grid[0] * kernel.grid[1] * kernel.grid[2]
    if blocks is None:
        return []
    ids = sorted(set(blocks))
    if not ids or ids[0] < 0 or ids[-1] >= total:
        raise errors.EmulationArgumentError(
            kernel.entry, f"{kernel.entry}: blocks must be a non-empty subset of 0..{total - 1}, got {list(blocks)}")
    return ids


def launch(
    binary: EmuBinary,
    args: Sequence[np.ndarray | int | float],
    *,
    config: EmuConfig | None = None,
    timeout_s: float = 60.0,
    check_bounds: bool = True,
    blocks: Sequence[int] | None = None,
) -> LaunchStats:
    """Run every block of ``binary``'s kernel once (or only ``blocks``, linear indices with x fastest:
    ``blockIdx`` and ``gridDim`` stay those of the whole grid); pointer arguments are updated in place.

    Safe to call from several threads at once.
    """
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
    arrays, array_of_param = _distinct_arrays(kernel, args)
    block_ids = _block_ids(kernel, blocks)
    nblocks = len(block_ids) or kernel.grid[0] * kernel.grid[1] * kernel.grid[2]
    header = _Header(len(kernel.params), len(arrays),
                     [ENTRY_SYMBOL, kernel.entry, *(s for a in arrays for s in (a.name, a.dtype))], len(block_ids))
    slots, total = _layout([a.array.nbytes for a in arrays], check_bounds, header.end)
    start = time.perf_counter()
    shared = SharedFile(total)
    try:
        views = [shared.array(s.data, a.array.dtype, a.array.size) for a, s in zip(arrays, slots, strict=True)]
        for a, view in zip(arrays, views, strict=True):
            view[...] = a.array.reshape(-1)
        _write_description(shared, header, binary, args, arrays, array_of_param, slots, cfg, check_bounds)
        _write_blocks(shared, header, block_ids, _workers(cfg, nblocks))
        library = _open_binary(binary, cfg)
        try:
            running = SERVERS.start(cfg, _request(kernel, cfg, nblocks), (shared.fd, library))
        finally:
            os.close(library)
        try:
            wait_status = running.wait(timeout_s)
        finally:
            running.close()
        status = Status.from_address(shared.address)
        _raise_on_failure(binary, wait_status, status, timeout_s)
        if check_bounds:
            _check_canaries(kernel, shared, arrays, slots)
        kernel_s, cpu_s = status.elapsed_s, status.cpu_s
        for a, view in zip(arrays, views, strict=True):
            if a.array.flags.writeable:
                np.copyto(a.array, view.reshape(a.array.shape))
    finally:
        shared.close()
    return LaunchStats(kernel_s=kernel_s, wall_s=time.perf_counter() - start, cpu_s=cpu_s)


def _write_description(shared: SharedFile, header: _Header, binary: EmuBinary, args: Sequence[object],
                       arrays: Sequence[_Array], array_of_param: Sequence[int | None], slots: Sequence[_Slot],
                       config: EmuConfig, check_bounds: bool) -> None:
    """The launch description, buffer table, argument vector, scalars, strings and canaries, as the
    child reads them (every address an offset into the shared file)."""
    kernel, base = binary.kernel, shared.address
    header.write_strings(shared)
    bufs = (BufferEntry * max(1, len(arrays))).from_address(base + header.bufs)
    for i, (a, s) in enumerate(zip(arrays, slots, strict=True)):
        if check_bounds:
            for offset, count in _canaries(s):
                shared.fill(offset, count, _CANARY)
        bufs[i] = BufferEntry(s.data, s.nbytes, s.alloc, a.array.dtype.itemsize,
                          s.guard_lo if check_bounds else 0, s.guard_hi if check_bounds else 0,
                          _GUARD if check_bounds else 0, header.strings[a.name], header.strings[a.dtype])
    argv = (ctypes.c_uint64 * max(1, len(kernel.params))).from_address(base + header.argv)
    for i, (p, arg) in enumerate(zip(kernel.params, args, strict=True)):
        which = array_of_param[i]
        if which is not None:
            argv[i] = slots[which].data
        else:
            shared.write(header.scalars + 8 * i, _scalar_bytes(kernel, p, arg))
            argv[i] = header.scalars + 8 * i
    desc = LaunchDesc.from_address(base + DESC_OFFSET)
    desc.entry_symbol = header.strings[ENTRY_SYMBOL]
    desc.kernel_name = header.strings[kernel.entry]
    desc.grid[:] = kernel.grid
    desc.block[:] = kernel.block
    desc.dyn_shared = kernel.shared_bytes
    desc.argv, desc.nargs = header.argv, len(kernel.params)
    desc.bufs, desc.nbufs = header.bufs, len(arrays)
    desc.check_bounds = int(check_bounds)
    desc.detect_races = int(binary.detect_races)
    desc.stack_bytes = config.stack_bytes
    desc.status = 0


def _write_blocks(shared: SharedFile, header: _Header, block_ids: Sequence[int], workers: int) -> None:
    """Which blocks the child runs (none listed: all), and on how many workers."""
    desc = LaunchDesc.from_address(shared.address + DESC_OFFSET)
    desc.block_ids, desc.nblock_ids = header.block_ids, len(block_ids)
    if block_ids:
        shared.write(header.block_ids, struct.pack(f"<{len(block_ids)}I", *block_ids))
    desc.workers = workers


def _raise_on_failure(binary: EmuBinary, wait_status: int | None, status: Status, timeout_s: float) -> None:
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
