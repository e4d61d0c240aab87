"""The emulator as a :class:`compiler.backends.Runner`: its faults become the common backend errors."""

from __future__ import annotations

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
from compiler.backends.emu.build import toolchain_problem
from compiler.backends.errors import KernelRunError, KernelTimeoutError
from compiler.source import KernelSource


@dataclass(frozen=True)
class EmuRunner:
    """``config``: the emulator's settings (``EmuConfig.default()`` when None, read at each call)."""

    name: str = "emu"
    config: EmuConfig | None = None

    def _config(self) -> EmuConfig:
        return self.config or EmuConfig.default()

    def unavailable_reason(self) -> str | None:
        return toolchain_problem(self._config())

    def prepare(self, kernel: KernelSource) -> None:
        try:
            compile_kernel(kernel, config=self._config())
        except EmulationCompileError as exc:
            raise KernelRunError(f"{exc}\n{exc.log}") from exc

    def run(self, kernel: KernelSource, args: Sequence[np.ndarray | int | float], *, timeout_s: float) -> None:
        try:
            run(kernel, args, timeout_s=timeout_s, config=self._config())
        except EmulationTimeoutError as exc:
            raise KernelTimeoutError(str(exc)) from exc
        except EmulationCompileError as exc:
            raise KernelRunError(f"{exc}\n{exc.log}") from exc
        except EmulationError as exc:
            raise KernelRunError(str(exc)) from exc


RUNNER = EmuRunner()
