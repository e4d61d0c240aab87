"""Shuffle lane and offset operands as the hardware reads them: against a Python transcription of the
PTX ISA's shfl.sync pseudo-code (only b[4:0] of the operand counts; the segment and clamp come from
the c operand that CUDA's __shfl_*_sync build from width), for offsets past 31 and negative ones."""

from __future__ import annotations

import numpy as np
import pytest

from compiler.source import Param

OFFSETS = [0, 1, 5, 15, 16, 31, 32, 33, 64 + 3, -1, -3, -32, -33, 1 << 20 | 2]
MODES = ("idx", "up", "down", "bfly")

SHUFFLE_OFFSETS = r"""
extern "C" __global__ void shuffle_offsets(const int* __restrict__ offsets, int* __restrict__ out,
                                           int n_offsets, int width) {
  const int lane = threadIdx.x;
  for (int k = 0; k < n_offsets; ++k) {
    const int off = offsets[k];
    int* o = out + k * 4 * 32;
    o[lane] = __shfl_sync(0xffffffffu, lane, off, width);
    o[32 + lane] = __shfl_up_sync(0xffffffffu, lane, (unsigned int)off, width);
    o[64 + lane] = __shfl_down_sync(0xffffffffu, lane, (unsigned int)off, width);
    o[96 + lane] = (int)__shfl_xor_sync(0xffffffffu, (float)lane, off, width);
  }
}
"""


def ptx_source_lane(mode: str, lane: int, b: int, width: int) -> int:
    """The lane that shfl.sync.{mode} reads for `lane` with operand b, as the PTX ISA specifies it."""
    c = ((32 - width) << 8) | (0 if mode == "up" else 0x1F)
    bval, cval, segmask = b & 0x1F, c & 0x1F, (c >> 8) & 0x1F
    max_lane = (lane & segmask) | (cval & ~segmask & 0x1F)
    min_lane = lane & segmask
    if mode == "up":
        j, ok = lane - bval, lane - bval >= max_lane
    elif mode == "down":
        j, ok = lane + bval, lane + bval <= max_lane
    elif mode == "bfly":
        j, ok = lane ^ bval, (lane ^ bval) <= max_lane
    else:
        j = min_lane | (bval & ~segmask & 0x1F)
        ok = j <= max_lane
    return j if ok else lane


@pytest.mark.parametrize("width", [32, 16, 8])
def test_offsets_use_their_low_five_bits(run_kernel, width: int) -> None:
    offsets = np.array(OFFSETS, np.int32)
    out = np.full(len(OFFSETS) * 4 * 32, -1, np.int32)
    params = [
        Param("offsets", "int32"),
        Param("out", "int32"),
        Param("n_offsets", "int32", False),
        Param("width", "int32", False),
    ]
    run_kernel(SHUFFLE_OFFSETS, "shuffle_offsets", (1, 1, 1), (32, 1, 1), params, [offsets, out, len(OFFSETS), width])
    got = out.reshape(len(OFFSETS), 4, 32)
    want = np.array(
        [[[ptx_source_lane(mode, lane, off, width) for lane in range(32)] for mode in MODES] for off in OFFSETS]
    )
    for k, off in enumerate(OFFSETS):
        for m, mode in enumerate(MODES):
            np.testing.assert_array_equal(got[k, m], want[k, m], err_msg=f"{mode} with offset {off}, width {width}")


def test_model_reads_what_cuda_documents() -> None:
    """The transcription agrees with the CUDA guide's prose for in-range operands."""
    assert [ptx_source_lane("bfly", lane, 33, 32) for lane in (0, 1, 6)] == [1, 0, 7]
    assert ptx_source_lane("up", 3, 5, 32) == 3  # below the segment: own value
    assert ptx_source_lane("down", 13, 3, 16) == 13  # past the end of the 16-lane segment
    assert ptx_source_lane("idx", 20, 35, 16) == 19  # 35 mod 16 = 3, in the second segment
