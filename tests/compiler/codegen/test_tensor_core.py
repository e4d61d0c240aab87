"""A tensor-core tile in the kernel language: ldmatrix and mma through the ``wm_*`` wrappers."""

import numpy as np

from compiler.backends import emu
from compiler.backends.nvrtc import compile_source
from compiler.codegen import render_cuda
from compiler.ir import (
    call,
    extern_call,
    f16,
    f32,
    kernel,
    let,
    lower,
    registers,
    shared,
    sync_threads,
    threadIdx,
    u32,
)
from compiler.mapping import auto_map


def mma_tile_kernel():
    """One warp: D[16, 8] = A[16, 16] @ B[16, 8] in f16 with f32 accumulation (B given transposed)."""
    with kernel("mma_tile", block=32) as k:
        a = k.tensor("a", f16, (16, 16), const=True)
        bt = k.tensor("bt", f16, (8, 16), const=True)
        d = k.tensor("d", f32, (16, 8))
        smem_a = shared("smem_a", f16, (16, 16))
        smem_bt = shared("smem_bt", f16, (8, 16))
        for i, j in auto_map(16, 16, workers=32).on(threadIdx.x):
            smem_a[i, j] = a[i, j]
        for i, j in auto_map(8, 16, workers=32).on(threadIdx.x):
            smem_bt[i, j] = bt[i, j]
        sync_threads()
        frag_a = registers("frag_a", u32, (4,))
        frag_b = registers("frag_b", u32, (2,))
        acc = registers("acc", f32, (4,))
        lane = let("lane", threadIdx.x % 32)
        # Lane 8 * m + r points at row r of 8 x 8 matrix m: A's four quadrants, column-major order.
        call(extern_call("wm_ldmatrix_x4", frag_a.address(0), smem_a.address(lane % 16, lane // 16 * 8)))
        call(extern_call("wm_ldmatrix_x2", frag_b.address(0), smem_bt.address(lane % 8, lane // 8 % 2 * 8)))
        for r in range(4):
            acc[r] = 0.0
        call(extern_call("wm_mma_m16n8k16_f16", acc.address(0), frag_a.address(0), frag_b.address(0),
                         acc.address(0)))
        group, pair = lane // 4, lane % 4 * 2
        for r in range(4):
            d[group + r // 2 * 8, pair + r % 2] = acc[r]
    return render_cuda(lower(k.kernel))


def test_mma_tile_matches_numpy_on_the_emulator():
    rng = np.random.default_rng(11)
    a = rng.standard_normal((16, 16)).astype(np.float16)
    b = rng.standard_normal((16, 8)).astype(np.float16)
    d = np.full((16, 8), np.nan, dtype=np.float32)
    emu.run(mma_tile_kernel(), [a, np.ascontiguousarray(b.T), d])
    np.testing.assert_allclose(d, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-3, atol=1e-3)


def test_mma_tile_builds_for_sm_80():
    source = mma_tile_kernel()
    assert '#include "warpmap/prims.cuh"' in source.source and "#include <cuda_fp16.h>" in source.source
    assert "wm_mma_m16n8k16_f16(&acc[0], &frag_a[0], &frag_b[0], &acc[0]);" in source.source
    result = compile_source(source, "sm_80")
    assert result.ok, result.log
    assert result.usage is not None and result.usage.spill_stores == 0
