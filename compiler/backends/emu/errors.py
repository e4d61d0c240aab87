"""What can go wrong when a kernel is emulated: one exception class per fault, all ``EmulationError``.

Every message names the kernel, and where it applies the block and thread, e.g.::

    BarrierDivergenceError: barrier divergence in kernel 'mm' block (1,0,0) thread (5,0,0): __syncthreads
    reached after 4 of 256 threads of the block returned
"""

from __future__ import annotations


class EmulationError(RuntimeError):
    """A kernel could not be emulated to completion. ``kernel`` is the entry name."""

    def __init__(self, kernel: str, message: str) -> None:
        super().__init__(message)
        self.kernel = kernel
        self.message = message


class EmulationArgumentError(EmulationError, ValueError):
    """The arguments do not match the kernel's parameters (count, dtype, kind)."""


class EmulationCompileError(EmulationError):
    """The host compiler rejected the kernel source; ``log`` holds its diagnostics."""

    def __init__(self, kernel: str, message: str, log: str) -> None:
        super().__init__(kernel, message)
        self.log = log


class EmulationLoadError(EmulationError):
    """The compiled kernel library could not be loaded in the launch process."""


class BarrierDivergenceError(EmulationError):
    """A ``__syncthreads`` (or warp-level operation) that not every thread of the block reaches."""


class DeadlockError(BarrierDivergenceError):
    """Every live thread of a block waits for something no other thread will do."""


class OutOfBoundsError(EmulationError):
    """A global-memory access outside the argument it was derived from (a guard page was hit)."""


class KernelMisuseError(EmulationError):
    """A CUDA operation used against its rules: bad shuffle width or mask, misaligned cp.async, ..."""


class SharedMemoryRaceError(EmulationError):
    """Two threads touched one shared-memory word with no barrier between, at least one writing."""


class EmulationCrashError(EmulationError):
    """The launch process died: a segmentation fault, an arithmetic exception, a signal."""


class StackOverflowError(EmulationCrashError):
    """An emulated thread overflowed its fiber stack (large local arrays or deep recursion)."""


class EmulationTimeoutError(EmulationError):
    """The launch ran past its time limit and was killed."""
