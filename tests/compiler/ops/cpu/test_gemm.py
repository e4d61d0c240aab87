"""The packed GEMM's contract: the packed layouts, shared operands, C strides, nothing else of C written."""

from __future__ import annotations

import numpy as np
import pytest

from compiler.cpu_device import detect_cpu
from compiler.ops.base import TensorSpec
from compiler.ops.cpu import gemm
from compiler.program import Launch, Program, Workspace

LANES = detect_cpu().f32_lanes
TILE = gemm.GemmTile(mr=6, nr=2 * LANES, mc=12, kc=16, nc=4 * LANES)


def test_packed_layouts_are_the_contract(run_on_cpu) -> None:
    batch, m, n, k = 2, 7, LANES + 3, 5
    rng = np.random.default_rng(0)
    a = rng.standard_normal((batch, k, m)).astype(np.float32)  # column-major A
    b = rng.standard_normal((batch, n, k)).astype(np.float32)  # column-major B
    ap_shape, bp_shape = gemm.packed_a_shape(batch, m, k, TILE), gemm.packed_b_shape(batch, k, n, TILE)
    assert ap_shape == (batch, 2, k, 6) and bp_shape == (batch, 1, k, 2 * LANES)
    pack_a = gemm.pack_a_kernel("pa", batch=batch, m=m, k=k, tile=TILE, layout="col")
    pack_b = gemm.pack_b_kernel("pb", batch=batch, k=k, n=n, tile=TILE, layout="col")
    program = Program("packs", ("a", "b", "ap", "bp"), (Launch(pack_a, ("a", "ap")), Launch(pack_b, ("b", "bp"))))
    got = run_on_cpu(program, {"a": a, "b": b},
                     (TensorSpec("ap", ap_shape, "float32"), TensorSpec("bp", bp_shape, "float32")))
    a_rows = np.zeros((batch, 12, k), np.float32)
    a_rows[:, :m] = a.transpose(0, 2, 1)
    expected_ap = a_rows.reshape(batch, 2, 6, k).transpose(0, 1, 3, 2)
    b_cols = np.zeros((batch, k, 2 * LANES), np.float32)
    b_cols[:, :, :n] = b.transpose(0, 2, 1)
    np.testing.assert_array_equal(got["ap"], expected_ap)
    np.testing.assert_array_equal(got["bp"], b_cols[:, None])


@pytest.mark.parametrize(("a_batched", "b_batched"), [(True, False), (False, True), (False, False)])
def test_shared_operands_and_c_strides(run_on_cpu, a_batched: bool, b_batched: bool) -> None:
    batch, m, n, k = 3, 13, 2 * LANES + 5, 35
    row_stride, batch_stride = n + 3, (m + 2) * (n + 3)
    rng = np.random.default_rng(1)
    a = rng.standard_normal((batch if a_batched else 1, m, k)).astype(np.float32)
    b = rng.standard_normal((batch if b_batched else 1, k, n)).astype(np.float32)
    ba, bb = a.shape[0], b.shape[0]
    launches = (
        Launch(gemm.pack_a_kernel("pa", batch=ba, m=m, k=k, tile=TILE, layout="row"), ("a", "ap")),
        Launch(gemm.pack_b_kernel("pb", batch=bb, k=k, n=n, tile=TILE, layout="row"), ("b", "bp")),
        Launch(gemm.compute_kernel("mm", batch=batch, m=m, n=n, k=k, tile=TILE, a_batched=a_batched,
                                   b_batched=b_batched, c_batch_stride=batch_stride, c_row_stride=row_stride),
               ("ap", "bp", "c")),
    )
    c_size = (batch - 1) * batch_stride + (m - 1) * row_stride + n
    workspaces = (Workspace("ap", gemm.packed_a_shape(ba, m, k, TILE), "float32"),
                  Workspace("bp", gemm.packed_b_shape(bb, k, n, TILE), "float32"))
    program = Program("strided", ("a", "b", "c"), launches, workspaces)
    c = run_on_cpu(program, {"a": a, "b": b}, (TensorSpec("c", (c_size,), "float32"),))["c"]
    padded = np.full(batch * batch_stride, np.nan)
    padded[:c_size] = c
    view = padded.reshape(batch, m + 2, row_stride)
    expected = np.matmul(a.astype(np.float64), b.astype(np.float64))
    np.testing.assert_allclose(view[:, :m, :n], np.broadcast_to(expected, (batch, m, n)), rtol=1e-4, atol=1e-4)
    assert np.isnan(view[:, :m, n:]).all() and np.isnan(view[:, m:, :]).all()


def test_overlapping_c_strides_are_refused() -> None:
    with pytest.raises(ValueError, match="overlap"):
        gemm.compute_kernel("mm", batch=2, m=4, n=8, k=3, tile=TILE, a_batched=True, b_batched=True,
                            c_batch_stride=16, c_row_stride=8)


def test_a_tile_must_hold_whole_micro_tiles() -> None:
    with pytest.raises(ValueError, match="multiple"):
        gemm.compute_kernel("mm", batch=1, m=4, n=8, k=3, tile=gemm.GemmTile(4, LANES, 6, 8, LANES),
                            a_batched=True, b_batched=True, c_batch_stride=32, c_row_stride=8)


@pytest.mark.parametrize("layout_b", ["row", "col"])
def test_packing_b_inside_the_compute_launch_with_a_shared_a(run_on_cpu, layout_b: str) -> None:
    batch, m, n, k = 2, 17, 3 * LANES + 1, 45
    rng = np.random.default_rng(2)
    a = rng.standard_normal((1, m, k)).astype(np.float32)
    b = rng.standard_normal((batch, k, n) if layout_b == "row" else (batch, n, k)).astype(np.float32)
    launches = (
        Launch(gemm.pack_a_kernel("pa", batch=1, m=m, k=k, tile=TILE, layout="row"), ("a", "ap")),
        Launch(gemm.compute_packing_kernel("mm", batch=batch, m=m, n=n, k=k, tile=TILE, a_batched=False,
                                           b_packer=gemm.matrix_b_packer(layout_b, batch=batch, k=k, n=n, nr=TILE.nr),
                                           c_batch_stride=m * n, c_row_stride=n),
               ("ap", "b", "bw", "c")),
    )
    workspaces = (Workspace("ap", gemm.packed_a_shape(1, m, k, TILE), "float32"),
                  Workspace("bw", gemm.packing_b_workspace_shape(batch, m, n, TILE), "float32"))
    program = Program("inside", ("a", "b", "c"), launches, workspaces)
    c = run_on_cpu(program, {"a": a, "b": b}, (TensorSpec("c", (batch, m, n), "float32"),))["c"]
    b_rows = b if layout_b == "row" else b.transpose(0, 2, 1)
    expected = np.matmul(a.astype(np.float64), b_rows.astype(np.float64))
    np.testing.assert_allclose(c, expected, rtol=1e-4, atol=1e-4)


def test_packing_scratch_has_a_slot_per_thread_not_per_block() -> None:
    # 8192^3 in 48 x 768 blocks: 171 x 11 blocks, each with a 768 x 768 slice of B, took 4.4 GiB; now
    # at most SCRATCH_SLOTS slots, and a grid of fewer blocks keeps one a block.
    tile = gemm.GemmTile(mr=6, nr=32, mc=48, kc=768, nc=768)
    assert gemm.scratch_slots(1, 8192, 8192, tile) == gemm.SCRATCH_SLOTS
    assert gemm.packing_b_workspace_shape(1, 8192, 8192, tile) == (gemm.SCRATCH_SLOTS, 24, 768, 32)
    assert gemm.scratch_slots(2, 96, 700, tile) == 2 * 2 * 1
    kernel = gemm.compute_packing_kernel("mm", batch=1, m=8192, n=8192, k=8192, tile=tile,
                                         b_packer=gemm.matrix_b_packer("row", batch=1, k=8192, n=8192, nr=32),
                                         c_batch_stride=8192 * 8192, c_row_stride=8192)
    assert kernel.host_max_workers == gemm.SCRATCH_SLOTS


@pytest.mark.parametrize("dynamic", [False, True])
def test_packing_inside_with_more_blocks_than_threads(run_on_cpu, dynamic: bool) -> None:
    # 7 x 5 x 2 blocks share the launch's threads' slots (A packed inside too), handed out statically
    # or as threads finish: every block's slice is its own while the block runs.
    tile = gemm.GemmTile(mr=4, nr=LANES, mc=8, kc=16, nc=2 * LANES, dynamic=dynamic)
    batch, m, n, k = 2, 5 * 8 - 3, 7 * 2 * LANES - 5, 41
    rng = np.random.default_rng(5)
    a = rng.standard_normal((batch, m, k)).astype(np.float32)
    b = rng.standard_normal((batch, k, n)).astype(np.float32)
    compute = gemm.compute_packing_kernel("mm", batch=batch, m=m, n=n, k=k, tile=tile,
                                          a_packer=gemm.matrix_a_packer("row", batch=batch, m=m, k=k, mr=tile.mr),
                                          b_packer=gemm.matrix_b_packer("row", batch=batch, k=k, n=n, nr=tile.nr),
                                          c_batch_stride=m * n, c_row_stride=n)
    assert compute.host_max_workers == 70
    workspaces = (Workspace("aw", gemm.packing_a_workspace_shape(batch, m, n, tile), "float32"),
                  Workspace("bw", gemm.packing_b_workspace_shape(batch, m, n, tile), "float32"))
    program = Program("inside", ("a", "b", "c"), (Launch(compute, ("a", "b", "aw", "bw", "c")),), workspaces)
    c = run_on_cpu(program, {"a": a, "b": b}, (TensorSpec("c", (batch, m, n), "float32"),))["c"]
    expected = np.matmul(a.astype(np.float64), b.astype(np.float64))
    np.testing.assert_allclose(c, expected, rtol=1e-4, atol=1e-4)
