"""The ``emu`` backend: run the exact CUDA C++ that codegen emits on the CPU, to check it without a GPU.

Example::

    >>> k = KernelSource("scale", src, grid=(4, 1, 1), block=(256, 1, 1),
    ...                  params=(Param("x", "float32"), Param("n", "int32", pointer=False)))
    >>> x = np.random.rand(1000).astype(np.float32)
    >>> emu.run(k, [x, 1000])              # x is updated in place

``compile_kernel`` and ``launch`` are the two halves of ``run``; compiled kernels are cached on disk.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from compiler.source import KernelSource

from .build import EmuBinary, EmuConfig, compile_kernel, prepare_source, toolchain_digest
from .errors import (
    BarrierDivergenceError,
    DeadlockError,
    EmulationArgumentError,
    EmulationCompileError,
    EmulationCrashError,
    EmulationError,
    EmulationLoadError,
    EmulationTimeoutError,
    KernelMisuseError,
    OutOfBoundsError,
    SharedMemoryRaceError,
    StackOverflowError,
)
from .launch import NUMPY_DTYPES, LaunchStats, launch

__all__ = [
    "NUMPY_DTYPES",
    "BarrierDivergenceError",
    "DeadlockError",
    "EmuBinary",
    "EmuConfig",
    "EmulationArgumentError",
    "EmulationCompileError",
    "EmulationCrashError",
    "EmulationError",
    "EmulationLoadError",
    "EmulationTimeoutError",
    "KernelMisuseError",
    "LaunchStats",
    "OutOfBoundsError",
    "SharedMemoryRaceError",
    "StackOverflowError",
    "compile_kernel",
    "launch",
    "prepare_source",
    "run",
    "toolchain_digest",
]


def run(
    kernel: KernelSource,
    args: Sequence[np.ndarray | int | float],
    *,
    timeout_s: float = 60.0,
    check_bounds: bool = True,
    detect_races: bool = False,
    config: EmuConfig | None = None,
) -> LaunchStats:
    """Compile (cached) and launch ``kernel`` over its grid; pointer arguments are written back.

    Raises an :class:`EmulationError` subclass on any fault: compile error, barrier divergence or
    deadlock, out-of-bounds global access (``check_bounds``), a shared-memory race (``detect_races``,
    an instrumented and slower build), a crash of the launch process, or a run past ``timeout_s``.
    """
    cfg = config or EmuConfig.default()
    binary = compile_kernel(kernel, config=cfg, detect_races=detect_races)
    return launch(binary, args, config=cfg, timeout_s=timeout_s, check_bounds=check_bounds)
