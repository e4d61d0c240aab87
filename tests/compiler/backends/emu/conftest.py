from __future__ import annotations

import importlib.util
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest

from compiler.backends import emu
from compiler.source import KernelSource, Param


@pytest.fixture(scope="session")
def emu_config(tmp_path_factory: pytest.TempPathFactory) -> emu.EmuConfig:
    return emu.EmuConfig(cache_dir=tmp_path_factory.mktemp("emu-cache"), workers=2)


SAMPLES = Path(__file__).with_name("samples.py")


@pytest.fixture(scope="session")
def tiled_matmul() -> Callable[..., KernelSource]:
    """``samples.tiled_matmul``: the hand-written shared-memory matmul (test data, not in the package)."""
    spec = importlib.util.spec_from_file_location("emu_test_samples", SAMPLES)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.tiled_matmul  # type: ignore[no-any-return]


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(20261129)


RunKernel = Callable[..., emu.LaunchStats]


@pytest.fixture
def run_kernel(emu_config: emu.EmuConfig) -> RunKernel:
    """run_kernel(source, entry, grid, block, params, args, shared_bytes=0, **launch options)."""

    def run(
        source: str,
        entry: str,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        params: Sequence[Param],
        args: Sequence[object],
        shared_bytes: int = 0,
        **options: object,
    ) -> emu.LaunchStats:
        kernel = KernelSource(entry, source, grid, block, tuple(params), shared_bytes)
        return emu.run(kernel, args, config=emu_config, **options)  # type: ignore[arg-type]

    return run
