"""Backends that run kernels, chosen by name: ``emu`` (CPU emulation) and ``cuda`` (an NVIDIA GPU).

Each backend module defines ``RUNNER``, an object with the :class:`Runner` shape. Nothing else in the
code base asks which backend it talks to.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from compiler.source import KernelSource

#: Backend name -> the module that defines its ``RUNNER``.
BACKENDS: dict[str, str] = {
    "emu": "compiler.backends.emu.runner",
    "cuda": "compiler.backends.cuda",
}


class Runner(Protocol):
    name: str

    def unavailable_reason(self) -> str | None:
        """None when kernels can run here, else a sentence saying why they cannot."""
        ...

    def fingerprint(self) -> dict[str, str]:
        """What enters cache keys: toolchain versions and flags, and the device's identity where there is
        one. Raises :class:`~compiler.backends.errors.BackendUnavailableError` where the target cannot run."""
        ...

    def prepare(self, kernel: KernelSource) -> None:
        """Do the slow, parallel-safe part of a first launch (compiling) ahead of time; may be a no-op."""
        ...

    def run(self, kernel: KernelSource, args: Sequence[np.ndarray | int | float], *, timeout_s: float) -> None:
        """Launch ``kernel`` once; pointer arguments are updated in place.

        Raises :class:`~compiler.backends.errors.KernelRunError` (or its ``KernelTimeoutError``) when
        the kernel does not complete.
        """
        ...


def get_runner(name: str) -> Runner:
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; known backends: {', '.join(sorted(BACKENDS))}")
    runner: Runner = importlib.import_module(BACKENDS[name]).RUNNER
    return runner
