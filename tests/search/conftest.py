"""Hand-written CUDA in verification tests: bugs the kernel IR cannot express (an uninitialised
accumulator, a 16-bit index, a syntax error) still go through ``search.verify`` unchanged otherwise.

A test operator builds a program of ordinary IR kernels (their parameters and launch shapes are what
the target sees); the ``rewrite_cuda`` fixture makes the CUDA targets render the kernels it names with
their text rewritten (``compiler.backends.cuda_build`` is where both render).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from types import ModuleType

import pytest

import compiler.backends.cuda_build
from compiler.codegen import render_program
from compiler.program import Program
from compiler.source import KernelSource

#: Kernel name -> how to rewrite its rendered CUDA text.
Rewrites = Mapping[str, Callable[[str], str]]


@pytest.fixture
def rewrite_cuda(monkeypatch: pytest.MonkeyPatch) -> Callable[[Rewrites], None]:
    return lambda rewrites: _patch(monkeypatch, rewrites)


def _patch(monkeypatch: pytest.MonkeyPatch, rewrites: Rewrites) -> None:
    def render(program: Program) -> tuple[KernelSource, ...]:
        return tuple(replace(s, source=rewrites[s.entry](s.source)) if s.entry in rewrites else s
                     for s in render_program(program))

    monkeypatch.setattr(compiler.backends.cuda_build, "render_program", render)


BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture
def load_bench(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Callable[[str], ModuleType]:
    """A script of ``bench/`` imported as when it runs (its folder on the path, so it imports its
    siblings), building into a fresh kernel cache."""
    monkeypatch.setenv("WARPMAP_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.syspath_prepend(str(BENCH))
    return importlib.import_module
