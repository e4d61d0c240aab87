"""The portable (ucontext) fiber switch, used where there is no assembly switch, runs kernels
correctly too. It runs in a child interpreter: a process loads only one emulator runtime."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_portable_fibers_run_a_matmul_with_barriers(tmp_path) -> None:
    script = textwrap.dedent(
        f"""
        import numpy as np
        from pathlib import Path
        from compiler.backends import emu
        from compiler.backends.emu.samples import tiled_matmul

        cfg = emu.EmuConfig(cache_dir=Path({str(tmp_path)!r}), portable_fibers=True)
        rng = np.random.default_rng(3)
        m, n, k = 67, 45, 83
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        c = np.full((m, n), np.nan, np.float32)
        emu.run(tiled_matmul(m, n, k), [a, b, c, m, n, k], config=cfg)
        np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
        runtime = emu.build.build_runtime(cfg).read_bytes()
        assert b"swapcontext" in runtime and b"wm_ctx_switch" not in runtime
        print("ok")
        """
    )
    cmd = [sys.executable, "-c", script]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr
