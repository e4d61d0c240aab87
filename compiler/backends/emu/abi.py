"""The launch ABI shared with the emulator runtime: ctypes mirrors of ``runtime/wm_internal.h`` and the
memory file a launch is described in.

The file holds the status page at offset 0, the launch description at ``DESC_OFFSET`` with the buffer
table, argument vector, scalars and strings after it, then the arguments. Every address in it is an
offset from the file's start: the launch child maps the file and relocates them.
"""

from __future__ import annotations

import ctypes
import mmap
import os

import numpy as np

DESC_OFFSET = 4096  # WM_DESC_OFFSET
REQUEST_MAGIC = 0x776D3032  # WM_REQUEST_MAGIC, "wm02"


class Status(ctypes.Structure):
    _fields_ = (
        ("code", ctypes.c_int32),
        ("reserved", ctypes.c_int32),
        ("elapsed_s", ctypes.c_double),
        ("cpu_s", ctypes.c_double),
        ("message", ctypes.c_char * 2048),
    )


# Mirrors of wm_buffer and wm_launch_desc (wm_internal.h) as written into the shared file: every
# pointer is an offset from the file's start, which the child turns into an address.
class BufferEntry(ctypes.Structure):
    _fields_ = (
        ("data", ctypes.c_uint64),
        ("nbytes", ctypes.c_uint64),
        ("alloc_bytes", ctypes.c_uint64),
        ("elem_bytes", ctypes.c_uint64),
        ("guard_lo", ctypes.c_uint64),
        ("guard_hi", ctypes.c_uint64),
        ("guard_bytes", ctypes.c_uint64),
        ("name", ctypes.c_uint64),
        ("dtype", ctypes.c_uint64),
    )


class LaunchDesc(ctypes.Structure):
    _fields_ = (
        ("so_path", ctypes.c_uint64),
        ("entry_symbol", ctypes.c_uint64),
        ("kernel_name", ctypes.c_uint64),
        ("grid", ctypes.c_uint32 * 3),
        ("block", ctypes.c_uint32 * 3),
        ("dyn_shared", ctypes.c_uint64),
        ("argv", ctypes.c_uint64),
        ("nargs", ctypes.c_int32),
        ("nbufs", ctypes.c_int32),
        ("bufs", ctypes.c_uint64),
        ("check_bounds", ctypes.c_int32),
        ("workers", ctypes.c_int32),
        ("detect_races", ctypes.c_int32),
        ("reserved", ctypes.c_int32),
        ("stack_bytes", ctypes.c_uint64),
        ("status", ctypes.c_uint64),
        ("block_ids", ctypes.c_uint64),
        ("nblock_ids", ctypes.c_int32),
        ("reserved2", ctypes.c_int32),
    )


class SharedFile:
    """A memory file shared with the launch child, mapped here and unmapped explicitly so that numpy
    views into it never pin it (a Python ``mmap`` refuses to close while views exist)."""

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
        self.fd = os.memfd_create("warpmap-launch", os.MFD_CLOEXEC)
        try:
            os.ftruncate(self.fd, nbytes)
            addr = self._libc.mmap(None, nbytes, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED, self.fd, 0)
            if addr in (None, ctypes.c_void_p(-1).value):
                raise OSError(ctypes.get_errno(), f"cannot map {nbytes} bytes of shared memory")
        except BaseException:
            os.close(self.fd)
            raise
        self.address: int = addr
        self.nbytes = nbytes

    def array(self, offset: int, dtype: np.dtype, count: int) -> np.ndarray:
        raw = (ctypes.c_uint8 * (count * dtype.itemsize)).from_address(self.address + offset)
        return np.frombuffer(memoryview(raw), dtype=dtype, count=count)

    def write(self, offset: int, data: bytes) -> None:
        ctypes.memmove(self.address + offset, data, len(data))

    def fill(self, offset: int, count: int, value: int) -> None:
        ctypes.memset(self.address + offset, value, count)

    def close(self) -> None:
        self._libc.munmap(self.address, self.nbytes)
        os.close(self.fd)
