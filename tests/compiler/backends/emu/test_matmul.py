"""The hand-written tiled f32 matmul (256-thread blocks, 4x4 register tiles) at awkward shapes, the
compile cache, and the race detector on a correct kernel (no false positives)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from compiler.backends import emu


def _matmul(rng: np.random.Generator, m: int, n: int, k: int) -> tuple[np.ndarray, ...]:
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    return a, b, np.full((m, n), np.nan, np.float32)


@pytest.mark.parametrize(("m", "n", "k"), [(128, 128, 128), (67, 45, 83), (130, 64, 17), (1, 200, 5)])
def test_tiled_matmul_matches_numpy(tiled_matmul, emu_config, rng, m: int, n: int, k: int) -> None:
    a, b, c = _matmul(rng, m, n, k)
    kernel = tiled_matmul(m, n, k)
    assert kernel.block == (256, 1, 1)
    emu.run(kernel, [a, b, c, m, n, k], config=emu_config)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "tiles",
    [{"bm": 32, "bn": 64, "bk": 8, "tm": 2, "tn": 4}, {"bm": 128, "bn": 32, "bk": 32, "tm": 8, "tn": 2}],
)
def test_other_tilings(tiled_matmul, emu_config, rng, tiles: dict[str, int]) -> None:
    m, n, k = 97, 70, 41
    a, b, c = _matmul(rng, m, n, k)
    emu.run(tiled_matmul(m, n, k, **tiles), [a, b, c, m, n, k], config=emu_config)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


def test_race_detector_passes_a_correct_matmul(tiled_matmul, emu_config, rng) -> None:
    m, n, k = 40, 72, 35
    a, b, c = _matmul(rng, m, n, k)
    emu.run(tiled_matmul(m, n, k), [a, b, c, m, n, k], config=emu_config, detect_races=True)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


def test_compiled_kernels_are_cached_by_source_and_flags(tiled_matmul, tmp_path) -> None:
    cfg = emu.EmuConfig(cache_dir=tmp_path / "cache")
    first = emu.compile_kernel(tiled_matmul(64, 64, 64), config=cfg)
    again = emu.compile_kernel(tiled_matmul(64, 64, 64), config=cfg)
    other_grid = emu.compile_kernel(tiled_matmul(128, 128, 128), config=cfg)  # same source, other launch
    other_source = emu.compile_kernel(tiled_matmul(64, 64, 64, bk=8), config=cfg)
    racy_build = emu.compile_kernel(tiled_matmul(64, 64, 64), config=cfg, detect_races=True)
    assert first.path == again.path == other_grid.path
    assert len({first.path, other_source.path, racy_build.path}) == 3
    assert all(p.is_relative_to(tmp_path / "cache") for p in (first.path, other_source.path))


def test_cache_stays_under_its_size_cap(tiled_matmul, tmp_path, rng) -> None:
    cfg = emu.EmuConfig(cache_dir=tmp_path / "cache", cache_bytes=1)
    paths = [emu.compile_kernel(tiled_matmul(64, 64, 64, bk=bk), config=cfg).path for bk in (4, 8)]
    assert not paths[0].exists() and paths[1].exists()  # the older entry was evicted
    a, b, c = _matmul(rng, 64, 64, 64)
    emu.run(tiled_matmul(64, 64, 64, bk=4), [a, b, c, 64, 64, 64], config=cfg)  # rebuilt on demand
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


def test_default_cache_location_follows_the_environment(tmp_path) -> None:
    cfg = emu.EmuConfig.default({"WARPMAP_CACHE_DIR": str(tmp_path)})
    assert cfg.cache_dir == tmp_path / "emu"
    assert dataclasses.replace(cfg, workers=3).workers == 3
    with pytest.raises(ValueError, match="workers must be >= 1"):
        dataclasses.replace(cfg, workers=0)


def test_launch_without_guard_pages(tiled_matmul, emu_config, rng) -> None:
    m, n, k = 33, 70, 19
    a, b, c = _matmul(rng, m, n, k)
    stats = emu.run(tiled_matmul(m, n, k), [a, b, c, m, n, k], config=emu_config, check_bounds=False)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    assert 0 < stats.kernel_s <= stats.wall_s
