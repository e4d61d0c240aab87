"""The CUDA side of warpmap/prims.cuh: every wrapper compiles with NVRTC to a CUBIN for sm_80 and
sm_90 (ptxas runs, so the inline PTX is checked), with no CUDA header on the include path."""

from __future__ import annotations

import pytest

from compiler.backends.emu.build import PRIMS_INCLUDE_DIR

nvrtc = pytest.importorskip("cuda.bindings.nvrtc")

USES_EVERY_WRAPPER = r"""
#include "warpmap/prims.cuh"
extern "C" __global__ void __launch_bounds__(128) prims(const unsigned short* __restrict__ g,
                                             float* __restrict__ out,
                                                        int n) {
  __shared__ __align__(16) unsigned short tile[4][64 * 8];
  const int t = threadIdx.x, lane = t & 31;
  const int left = n - 8 * t;
  wm_cp_async_16(&tile[0][8 * t], g + 8 * t, left >= 8 ? 16 : (left > 0 ? 2 * left : 0));
  wm_cp_async_8(&tile[1][4 * t], g + 4 * t, 8);
  wm_cp_async_4(&tile[2][2 * t], g + 2 * t, 4);
  wm_cp_async_commit();
  wm_cp_async_wait<1>();
  wm_cp_async_wait<0>();
  __syncthreads();
  const void* row = &tile[t >> 5][(lane % 16) * 8 + (lane / 16) * 64];
  unsigned a[4], b[2], x1[1], x2[2], x4[4];
  wm_ldmatrix_x4(a, row);
  wm_ldmatrix_x2_trans(b, row);
  wm_ldmatrix_x1(x1, row); wm_ldmatrix_x2(x2, row); wm_ldmatrix_x4_trans(x4,
                 row); wm_ldmatrix_x1_trans(x1, row);
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  wm_mma_m16n8k16_f16(acc, a, b, acc);
  wm_mma_m16n8k16_bf16(acc, x4, x2, acc);
  out[t] = acc[0] + acc[1] + acc[2] + acc[3] + (float)(x1[0] & 1u);
}
"""


def _compile(arch: str) -> tuple[int, str]:
    err, prog = nvrtc.nvrtcCreateProgram(USES_EVERY_WRAPPER.encode(), b"prims.cu", 0, [], [])
    assert err == nvrtc.nvrtcResult.NVRTC_SUCCESS
    try:
        opts = [f"-arch={arch}".encode(), f"-I{PRIMS_INCLUDE_DIR}".encode(), b"-Xptxas=-v"]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        _, log_size = nvrtc.nvrtcGetProgramLogSize(prog)
        log = bytearray(log_size)
        nvrtc.nvrtcGetProgramLog(prog, log)
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            return 0, log.decode(errors="replace")
        _, size = nvrtc.nvrtcGetCUBINSize(prog)
        return size, log.decode(errors="replace")
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_prims_compile_to_cubin(arch: str) -> None:
    size, log = _compile(arch)
    assert size > 0, log
    assert "prims" in log and "registers" in log  # ptxas ran on the inline PTX
