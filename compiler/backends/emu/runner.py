"""The emulator as a :class:`compiler.backends.Runner`: its faults become the common backend errors.

Every run also looks for shared-memory races (``detect_races``, on by default): a missing
``__syncthreads()`` often gives the right numbers in the emulator's fixed fiber order, so the output
comparison alone would pass it. The race detector's build calls a hook on every memory access (about
7x slower to run, 1.5x to compile), so on a large grid it runs only :func:`race_blocks`, the blocks
whose guards differ (corners, edges) and one from the middle, on copies of the arguments, and the
plain build computes the outputs. A grid no larger than that sample runs only the checked build.
"""

from __future__ import annotations

import itertools
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from compiler.backends.emu import (
    EmuConfig,
    EmulationCompileError,
    EmulationError,
    EmulationTimeoutError,
    compile_kernel,
    run,
)
from compiler.backends.emu.build import compile_flags, toolchain_digest, toolchain_problem
from compiler.backends.errors import BackendUnavailableError, KernelRunError, KernelTimeoutError
from compiler.source import KernelSource


def race_blocks(grid: tuple[int, int, int]) -> list[int]:
    """Linear indices (x fastest) of the first, middle and last block along each grid dimension, and
    every combination of them: at most 27 blocks.

    >>> race_blocks((4, 1, 1))
    [0, 2, 3]
    >>> len(race_blocks((100, 100, 100)))
    27
    """
    picks = [sorted({0, g // 2, g - 1}) for g in grid]
    return sorted(x + grid[0] * (y + grid[1] * z) for x, y, z in itertools.product(*picks))


def _copies(args: Sequence[np.ndarray | int | float]) -> list[np.ndarray | int | float]:
    """The arguments with each array copied once, so an array passed twice stays one buffer."""
    copied: dict[int, np.ndarray] = {}
    out: list[np.ndarray | int | float] = []
    for a in args:
        if isinstance(a, np.ndarray):
            if id(a) not in copied:
                copied[id(a)] = a.copy()
            out.append(copied[id(a)])
        else:
            out.append(a)
    return out


@dataclass(frozen=True)
class EmuRunner:
    """``config``: the emulator's settings (``EmuConfig.default()`` when None, read at each call);
    ``detect_races``: look for shared-memory races in every run (see the module's docstring)."""

    name: str = "emu"
    config: EmuConfig | None = None
    detect_races: bool = True

    def _config(self) -> EmuConfig:
        return self.config or EmuConfig.default()

    def _whole_grid_checked(self, kernel: KernelSource) -> bool:
        grid = kernel.grid
        return self.detect_races and len(race_blocks(grid)) == grid[0] * grid[1] * grid[2]

    def unavailable_reason(self) -> str | None:
        return toolchain_problem(self._config())

    def fingerprint(self) -> dict[str, str]:
        """What decides the emulator's builds, for cache keys: its own sources, the host compiler's
        version and the kernel flags (include paths left out: they name where warpmap is installed)."""
        cfg = self._config()
        problem = toolchain_problem(cfg)
        if problem is not None:
            raise BackendUnavailableError(problem)
        version = subprocess.run([cfg.cxx, "--version"], capture_output=True, text=True, timeout=30, check=False)
        flags = [f for f in compile_flags(cfg, detect_races=False) if not f.startswith("-I")]
        return {"target": self.name, "emulator": toolchain_digest(), "cxx": version.stdout.splitlines()[0],
                "flags": " ".join(flags)}

    def prepare(self, kernel: KernelSource) -> None:
        cfg = self._config()
        try:
            if not self._whole_grid_checked(kernel):
                compile_kernel(kernel, config=cfg)
            if self.detect_races:
                compile_kernel(kernel, config=cfg, detect_races=True)
        except EmulationCompileError as exc:
            raise KernelRunError(f"{exc}\n{exc.log}") from exc

    def run(self, kernel: KernelSource, args: Sequence[np.ndarray | int | float], *, timeout_s: float) -> None:
        cfg = self._config()
        try:
            if self._whole_grid_checked(kernel):
                run(kernel, args, timeout_s=timeout_s, config=cfg, detect_races=True)
                return
            if self.detect_races:
                run(kernel, _copies(args), timeout_s=timeout_s, config=cfg, detect_races=True,
                    blocks=race_blocks(kernel.grid))
            run(kernel, args, timeout_s=timeout_s, config=cfg)
        except EmulationTimeoutError as exc:
            raise KernelTimeoutError(str(exc)) from exc
        except EmulationCompileError as exc:
            raise KernelRunError(f"{exc}\n{exc.log}") from exc
        except EmulationError as exc:
            raise KernelRunError(str(exc)) from exc


RUNNER = EmuRunner()
