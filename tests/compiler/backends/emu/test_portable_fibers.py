"""The portable (ucontext) fiber switch, used where there is no assembly switch, runs kernels
correctly too, in the same process as the default switch (each has its own launch server)."""

from __future__ import annotations

import numpy as np

from compiler.backends import emu


def test_portable_fibers_run_a_matmul_with_barriers(tiled_matmul, tmp_path, emu_config: emu.EmuConfig) -> None:
    rng = np.random.default_rng(3)
    m, n, k = 67, 45, 83
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    for config in (emu.EmuConfig(cache_dir=tmp_path, portable_fibers=True), emu_config):
        c = np.full((m, n), np.nan, np.float32)
        emu.run(tiled_matmul(m, n, k), [a, b, c, m, n, k], config=config)
        np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    portable = emu.build.build_runtime(emu.EmuConfig(cache_dir=tmp_path, portable_fibers=True)).read_bytes()
    assert b"swapcontext" in portable and b"wm_ctx_switch" not in portable
    assert b"wm_ctx_switch" in emu.build.build_runtime(emu_config).read_bytes()
