"""The cpu matmul template against numpy: every level-1 tile at awkward shapes, both layouts, batches."""

from __future__ import annotations

import numpy as np
import pytest

from compiler.cpu_device import CacheLevel, CpuDevice, detect_cpu
from compiler.ops.cpu import matmul
from compiler.ops.cpu.gemm import GemmTile
from compiler.ops.matmul_spec import MatmulSpec, matmul_inputs, matmul_outputs, matmul_reference
from compiler.space import EmptySpaceError

DEVICE = detect_cpu()
LANES = DEVICE.f32_lanes


def _check(run_on_cpu, assert_matches, spec: MatmulSpec, tile: GemmTile, seed: int = 0) -> None:
    inputs = matmul_inputs(spec, np.random.default_rng(seed))
    outputs = matmul_outputs(spec)
    got = run_on_cpu(matmul.build(spec, tile), inputs, outputs)
    assert_matches(got, matmul_reference(spec, inputs), outputs)


#: Primes and 1, none a multiple of any tile; k spans several KC steps of the level-1 tiles.
AWKWARD = MatmulSpec(m=29, n=2 * LANES + 3, k=37, batch=2, layout_a="col", layout_b="row")
LEVEL_1 = matmul.space(AWKWARD, DEVICE, 1).candidates()


@pytest.mark.parametrize("tile", LEVEL_1, ids=str)
def test_every_level_1_tile_at_an_awkward_batched_shape(run_on_cpu, assert_matches, tile: GemmTile) -> None:
    _check(run_on_cpu, assert_matches, AWKWARD, tile)


@pytest.mark.parametrize("tile", LEVEL_1, ids=str)
@pytest.mark.parametrize(("la", "lb"), [("row", "col"), ("col", "col"), ("row", "row")])
def test_every_level_1_tile_in_every_layout(run_on_cpu, assert_matches, tile: GemmTile, la: str, lb: str) -> None:
    spec = MatmulSpec(m=13, n=LANES + 1, k=41, batch=1, layout_a=la, layout_b=lb)
    _check(run_on_cpu, assert_matches, spec, tile, seed=1)


@pytest.mark.parametrize(("m", "n", "k", "batch"), [(1, 1, 1, 1), (1, 31, 7, 3), (19, 1, 300, 1), (3, 5, 1, 2)])
def test_degenerate_extents(run_on_cpu, assert_matches, m: int, n: int, k: int, batch: int) -> None:
    spec = MatmulSpec(m=m, n=n, k=k, batch=batch, layout_b="col")
    for tile in LEVEL_1[:2]:
        _check(run_on_cpu, assert_matches, spec, tile, seed=2)


def test_the_default_and_an_unprefetched_tile_at_a_larger_shape(run_on_cpu, assert_matches) -> None:
    spec = MatmulSpec(m=131, n=293, k=601, batch=2, layout_a="col")
    default = matmul.default_schedule(spec, DEVICE)
    _check(run_on_cpu, assert_matches, spec, default, seed=3)
    plain = GemmTile(mr=4, nr=LANES, mc=48, kc=128, nc=6 * LANES, k_unroll=1, prefetch_c=False)
    _check(run_on_cpu, assert_matches, spec, plain, seed=4)
    for inside in (False, True):
        dynamic = matmul.CpuMatmulSchedule(mr=6, nr=2 * LANES, mc=48, kc=128, nc=4 * LANES, dynamic=True,
                                           pack_b_inside=inside)
        _check(run_on_cpu, assert_matches, spec, dynamic, seed=5)


@pytest.mark.parametrize(("m", "n", "batch", "launches"), [
    (128, 128, 1, 1),   # one column of two blocks: one launch, A and B packed inside
    (256, 64, 1, 1),
    (4096, 64, 1, 3),   # a tall column: A and B packed by launches of their own
    (128, 3072, 1, 2),  # one row of several blocks: B inside, A by its own launch
    (96, 96, 8, 2),     # batched: A's own launch
])
def test_the_default_packs_inside_where_the_grid_is_small(run_on_cpu, assert_matches, m: int, n: int, batch: int,
                                                         launches: int) -> None:
    device = CpuDevice("x", "GenuineIntel", "x86_64", ("avx512f", "avx2", "fma"), 16, 2, 1,
                       (CacheLevel(1, "Data", 48 << 10, 64, 1), CacheLevel(2, "Unified", 2 << 20, 64, 1)), 2.1, "t", 2)
    spec = MatmulSpec(m=m, n=n, k=96, batch=batch)
    default = matmul.default_schedule(spec, device)
    assert len(matmul.build(spec, default).launches) == launches
    assert matmul.space(spec, device, 2).violation(default) is None
    _check(run_on_cpu, assert_matches, spec, default, seed=6)  # 32-wide tiles run on any host


def test_a_wrong_kernel_is_seen(run_on_cpu, assert_matches) -> None:
    spec = MatmulSpec(m=9, n=10, k=11)
    inputs = matmul_inputs(spec, np.random.default_rng(5))
    outputs = matmul_outputs(spec)
    got = run_on_cpu(matmul.build(spec, LEVEL_1[0]), inputs, outputs)
    expected = matmul_reference(spec, inputs)
    expected["c"][0, 8, 9] += 0.5
    with pytest.raises(AssertionError, match="relative error"):
        assert_matches(got, expected, outputs)


def test_spaces_follow_the_device() -> None:
    spec = MatmulSpec(m=1024, n=1024, k=1024)
    for tile in matmul.space(spec, DEVICE, 2).candidates():
        assert tile.nr % LANES == 0
        assert tile.accumulator_registers(LANES) <= matmul.vector_registers(DEVICE)
        assert tile.mc % tile.mr == 0 and tile.nc % tile.nr == 0
    small = matmul.space(MatmulSpec(m=5, n=7, k=3), DEVICE, 2).candidates()
    assert small and all(t.mc <= 48 and t.kc == 128 and t.nr == LANES for t in small)


def test_other_dtypes_are_refused_with_the_dtype_named() -> None:
    spec = MatmulSpec(m=8, n=8, k=8, dtype="float16")
    with pytest.raises(EmptySpaceError, match="float16"):
        matmul.space(spec, DEVICE, 1)
    with pytest.raises(EmptySpaceError, match="float16"):
        matmul.build(spec, LEVEL_1[0])
