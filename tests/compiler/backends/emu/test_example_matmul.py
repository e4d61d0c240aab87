"""The compiler's generated example matmul (examples/efficient_matmul.py) on the emulator vs numpy,
including a shape that is a multiple of none of its tiles, with the race detector on."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from compiler.backends import emu

EXAMPLE = Path(__file__).resolve().parents[4] / "examples" / "efficient_matmul.py"


@pytest.fixture(scope="module")
def example() -> ModuleType:
    if not EXAMPLE.exists():
        pytest.skip(f"{EXAMPLE} is not in this checkout")
    spec = importlib.util.spec_from_file_location("efficient_matmul_for_emu", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("m", "n", "k", "races"), [(128, 128, 128, False), (67, 45, 83, False), (67, 45, 83, True)])
def test_generated_matmul_matches_numpy(emu_config, rng, example, m: int, n: int, k: int, races: bool) -> None:
    source = example.efficient_matmul_source(m, n, k)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    c = np.full((m, n), np.nan, np.float32)
    emu.run(source, [a, b, c], config=emu_config, detect_races=races)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
