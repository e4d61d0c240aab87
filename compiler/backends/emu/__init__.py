"""The ``emu`` backend: run the exact CUDA C++ that codegen emits on the CPU, to check it without a GPU.

Example::

    >>> import numpy as np
    >>> from compiler.backends import emu
    >>> from compiler.source import KernelSource, Param
    >>> src = '''extern "C" __global__ void scale(float* x, int n) {
    ...   int i = blockIdx.x * blockDim.x + threadIdx.x;
    ...   if (i < n) x[i] *= 2.0f;
    ... }'''
    >>> k = KernelSource("scale", src, grid=(4, 1, 1), block=(256, 1, 1),
    ...                  params=(Param("x", "float32"), Param("n", "int32", pointer=False)))
    >>> x = np.arange(1000, dtype=np.float32)
    >>> stats = emu.run(k, [x, 1000])      # x is updated in place
    >>> x[:3], x[-2:]
    (array([0., 2., 4.], dtype=float32), array([1996., 1998.], dtype=float32))

``compile_kernel`` and ``launch`` are the two halves of ``run``.

How it works:

- **Compile** (``build.py``): g++ compiles the source itself against ``include/wm_emu.h`` (forced
  include: CUDA qualifiers, built-ins, shuffles, atomics, math, vector, ``__half``/``__nv_bfloat16``),
  which includes only C headers; ``cuda_fp16.h``, ``cuda_bf16.h`` and ``warpmap/prims.cuh`` resolve to
  their emulation versions. Shared objects are cached by (source, flags, emulator sources' digest) in
  an LRU directory capped in bytes (``EmuConfig.cache_dir``, ``$WARPMAP_CACHE_DIR/emu`` by default).
- **Threads** (``runtime/``): each CUDA thread is a fiber with its own stack (64 KiB, guard page
  below); x86-64 switches with six pushes and a stack swap, other machines use ucontext. A block runs
  wholly on one OS thread (its static ``__shared__`` arrays are that thread's TLS); blocks are spread
  over ``EmuConfig.workers`` OS threads (fewer where the stacks' mappings would pass
  ``vm.max_map_count``: about 30 workers of 1024-thread blocks by default). ``__syncthreads`` and
  warp-level operations are rendezvous between fibers; warp collectives (shuffles, mma, ldmatrix)
  gather all lanes' operands first.
- **Garbage, not zeros**: locals without an initialiser start as GCC's 0xFE byte pattern
  (``-ftrivial-auto-var-init=pattern``: f32 -1.7e38, int -16843010) and shared memory as 0xFF bytes
  (NaN) at every block's start, so a kernel that reads what it never wrote fails its comparison.
- **Launch** (``launch.py``): a small launch server (the runtime, an executable; one per process)
  forks one child per launch, so this interpreter never forks and launches may come from any thread;
  arguments live in a memory file shared with the child, each between inaccessible guard pages, so a
  crash, overrun or hang ends only the child and comes back as an :class:`EmulationError` subclass
  with kernel, block and thread in its message.
- **Races** (``detect_races``): the kernel is built with GCC's call-mode address instrumentation,
  and every shared-memory access is checked against the accesses since the last barrier. Every
  verification on the emulator (the ``emu`` target, ``target.py``) also runs this build over a sample
  of blocks, the grid's corners, edges and centre (``race_blocks``; all of a small grid).
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
    blocks: Sequence[int] | None = None,
) -> LaunchStats:
    """Compile (cached) and launch ``kernel`` over its grid; pointer arguments are written back.

    Raises an :class:`EmulationError` subclass on any fault: compile error, barrier divergence or
    deadlock, out-of-bounds global access (``check_bounds``), a shared-memory race (``detect_races``,
    an instrumented and slower build), a crash of the launch process, or a run past ``timeout_s``.
    ``blocks`` (linear indices, x fastest) runs only those blocks of the grid.
    """
    cfg = config or EmuConfig.default()
    binary = compile_kernel(kernel, config=cfg, detect_races=detect_races)
    return launch(binary, args, config=cfg, timeout_s=timeout_s, check_bounds=check_bounds, blocks=blocks)
