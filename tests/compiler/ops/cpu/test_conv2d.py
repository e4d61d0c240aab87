"""The cpu conv2d template end to end: every level-1 schedule, on awkward specs in both layouts, against
the float64 reference, outputs and workspaces poisoned first; and the space's and build's contracts."""

from __future__ import annotations

import numpy as np
import pytest

from compiler.cpu_device import CacheLevel, CpuDevice, detect_cpu
from compiler.ops.conv2d_spec import Conv2dSpec, conv2d_inputs, conv2d_outputs, conv2d_reference
from compiler.ops.cpu import conv2d
from compiler.space import EmptySpaceError

HOST = detect_cpu()

#: Between them: 1x1, 3x3, 7x7 stride 2, padding 0/1/3, dilation 2, c = 1 and primes, batch 2, stride
#: unequal per axis, and extents that are multiples of no tile.
SPECS: dict[str, dict[str, object]] = {
    "1x1 c=1 batch 2": {"n": 2, "c": 1, "h": 7, "w": 5, "k": 3, "r": 1, "s": 1},
    "3x3 pad 1 primes batch 2": {"n": 2, "c": 3, "h": 11, "w": 13, "k": 17, "r": 3, "s": 3, "padding": (1, 1)},
    "7x7 stride 2 pad 3": {"n": 1, "c": 5, "h": 19, "w": 23, "k": 7, "r": 7, "s": 7, "stride": (2, 2),
                           "padding": (3, 3)},
    "dilation 2 stride 1x2": {"n": 1, "c": 2, "h": 13, "w": 17, "k": 11, "r": 3, "s": 3, "stride": (1, 2),
                              "padding": (2, 1), "dilation": (2, 2)},
}

LEVEL1 = tuple(conv2d.space(Conv2dSpec.model_validate(SPECS["7x7 stride 2 pad 3"]), HOST, 1).candidates())


def _spec(name: str, layout: str) -> Conv2dSpec:
    return Conv2dSpec.model_validate({**SPECS[name], "layout": layout})


def _check(run_on_cpu, assert_matches, spec: Conv2dSpec, schedule: conv2d.ConvSchedule) -> None:
    inputs = conv2d_inputs(spec, np.random.default_rng(7))
    outputs = conv2d_outputs(spec)
    got = run_on_cpu(conv2d.build(spec, schedule), inputs, outputs)
    assert_matches(got, conv2d_reference(spec, inputs), outputs)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("name", SPECS)
def test_every_level1_schedule_matches_the_reference(run_on_cpu, assert_matches, name: str, layout: str) -> None:
    spec = _spec(name, layout)
    schedules = conv2d.space(spec, HOST, 1).candidates()
    assert len(schedules) >= 2
    for schedule in schedules:
        _check(run_on_cpu, assert_matches, spec, schedule)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_the_default_schedule_on_a_resnet_shaped_layer(run_on_cpu, assert_matches, layout: str) -> None:
    spec = Conv2dSpec(n=1, c=32, h=14, w=14, k=48, r=3, s=3, padding=(1, 1), layout=layout)
    _check(run_on_cpu, assert_matches, spec, conv2d.default_schedule(spec, HOST))


def _check_packing_inside(run_on_cpu, assert_matches, spec: Conv2dSpec, schedule: conv2d.ConvSchedule,
                          bindings: tuple[str, ...]) -> None:
    """Two launches, the weight's packing then the GEMM's, whose scratch (``bindings[2]``) has a slot per
    thread; and the right result."""
    program = conv2d.build(spec, schedule)
    assert [launch.kernel.name for launch in program.launches] == ["conv2d_pack_weight", "conv2d_gemm"]
    assert program.launches[1].bindings == bindings
    assert [(w.name, w.per_worker) for w in program.workspaces] == [("wp", False), (bindings[2], True)]
    _check(run_on_cpu, assert_matches, spec, schedule)


@pytest.mark.parametrize("mode", ["runs", "gather"])
def test_nchw_patches_packed_inside_the_compute_launch(run_on_cpu, assert_matches, mode: str) -> None:
    """Two launches (the weight's packing, then the GEMM that packs each slice of patches itself into a
    scratch slot per thread), on a 3x3 layer whose K takes several KC steps and whose pixels fill no
    whole panel, in both batches' images."""
    spec = _spec("3x3 pad 1 primes batch 2", "NCHW")
    inside = [s for s in conv2d.space(spec, HOST, 1).candidates() if s.patches_inside and s.pack_mode == mode]
    assert inside and any(s.kc < spec.c * spec.r * spec.s for s in inside)
    for schedule in inside:
        _check_packing_inside(run_on_cpu, assert_matches, spec, schedule, ("wp", "x", "bw", "y"))


@pytest.mark.parametrize("fields", [
    SPECS["3x3 pad 1 primes batch 2"],
    # More channels than a KC step: a tap's channels are cut across steps, and steps start mid-tap.
    {"n": 1, "c": 37, "h": 6, "w": 5, "k": 40, "r": 3, "s": 3, "padding": (1, 1)},
], ids=["3 channels, panels across images", "37 channels"])
def test_nhwc_patches_packed_inside_the_compute_launch(run_on_cpu, assert_matches, fields) -> None:
    """Two launches (the weight's packing, then the GEMM that packs each block of patches itself into a
    scratch slot per thread), with KC steps that start inside a filter tap's channels, panels whose
    pixels cross from one image to the next or past the last, and several blocks along N packing the
    same rows."""
    spec = Conv2dSpec.model_validate({**fields, "layout": "NHWC"})
    inside = [s for s in conv2d.space(spec, HOST, 1).candidates() if s.patches_inside]
    assert inside and any((spec.c * spec.r * spec.s) % s.kc and s.kc % spec.c for s in inside)
    # N split in two somewhere: both blocks of a grid row pack the same rows of patches.
    assert any(conv2d.build(spec, s).launches[1].kernel.grid[0] == 2 for s in inside)
    for schedule in inside:
        _check_packing_inside(run_on_cpu, assert_matches, spec, schedule, ("x", "wp", "aw", "y"))


def test_orientation_and_output_strides() -> None:
    from compiler.ops.cpu.conv_pack import ConvGemm

    nchw = ConvGemm(Conv2dSpec(n=2, c=3, h=9, w=8, k=5, r=3, s=3))
    assert (nchw.mnk, nchw.batch, nchw.c_strides) == ((5, 42, 27), 2, (5 * 42, 42))
    nhwc = ConvGemm(Conv2dSpec(n=2, c=3, h=9, w=8, k=5, r=3, s=3, layout="NHWC"))
    assert (nhwc.mnk, nhwc.batch, nhwc.c_strides) == ((84, 5, 27), 1, (84 * 5, 5))


def test_spaces_read_the_device() -> None:
    spec = Conv2dSpec(n=1, c=64, h=28, w=28, k=64, r=3, s=3, padding=(1, 1))
    avx2 = CpuDevice("x", "AuthenticAMD", "x86_64", ("avx2", "fma"), 8, 4, 4,
                     (CacheLevel(1, "Data", 32768, 64, 1), CacheLevel(2, "Unified", 524288, 64, 1)), 3.0, "t", 2)
    found = conv2d.space(spec, avx2, 2).enumerate()
    assert found.valid and {s.nr for s in found.valid} <= {8, 16, 24}
    assert all(s.mr * -(-s.nr // 8) + -(-s.nr // 8) + 1 <= 16 for s in found.valid)
    assert "register tile fits 16 vector registers" in found.rejected
    assert {s.nr for s in conv2d.space(spec, avx2, 1).candidates()} == {8, 16}


def test_float16_is_refused_with_a_reason() -> None:
    spec = Conv2dSpec(n=1, c=3, h=5, w=5, k=2, r=3, s=3, dtype="float16")
    with pytest.raises(EmptySpaceError, match="float32, not float16"):
        conv2d.space(spec, HOST, 1)
    with pytest.raises(EmptySpaceError, match="float32, not float16"):
        conv2d.build(spec, LEVEL1[0])


PINNED = {
    "avx512-l1d32": CpuDevice("x", "GenuineIntel", "x86_64", ("avx512f", "avx2", "fma"), 16, 2, 1,
                              (CacheLevel(1, "Data", 32 << 10, 64, 1), CacheLevel(2, "Unified", 1 << 20, 64, 1)),
                              2.1, "t", 2),
    "avx2-l1d48": CpuDevice("x", "GenuineIntel", "x86_64", ("avx2", "fma"), 8, 2, 1,
                            (CacheLevel(1, "Data", 48 << 10, 64, 1), CacheLevel(2, "Unified", 1280 << 10, 64, 1)),
                            2.6, "t", 2),
}


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("fields", [
    {"c": 64, "h": 56, "w": 56, "k": 64, "r": 3, "s": 3, "padding": (1, 1)},
    {"c": 256, "h": 14, "w": 14, "k": 256, "r": 3, "s": 3, "padding": (1, 1)},
    {"c": 64, "h": 56, "w": 56, "k": 256, "r": 1, "s": 1},
    {"c": 3, "h": 224, "w": 224, "k": 64, "r": 7, "s": 7, "stride": (2, 2), "padding": (3, 3)},
])
@pytest.mark.parametrize("device", ["host", "avx512-l1d32", "avx2-l1d48"])
def test_the_default_is_a_level2_schedule(layout: str, fields: dict[str, object], device: str) -> None:
    """On this host and on two pinned ones, so the cache rules are covered whatever runs the tests: 16
    f32 lanes with a 32 KiB L1d make the widest KC x NR panel (NR = 32) the hardest to fit."""
    target = PINNED.get(device, HOST)
    spec = Conv2dSpec.model_validate({"n": 1, **fields, "layout": layout})
    default = conv2d.default_schedule(spec, target)
    level2 = conv2d.space(spec, target, 2)
    assert level2.violation(default) is None
    assert level2.schedule({f: getattr(default, f) for f in default.__dataclass_fields__}) == default


@pytest.mark.parametrize("device", ["avx512-l1d32", "avx2-l1d48"])
def test_the_default_packs_patches_inside_where_no_block_packs_another_s(device: str) -> None:
    """NHWC images large enough to split M over every core leave each grid row one block: the compute
    launch packs the patches. A 14x14 image splits N too (blocks of one row would pack the same patches),
    and NCHW 3x3 layers keep the patches' own launch."""
    target = PINNED[device]
    large = Conv2dSpec(n=1, c=64, h=56, w=56, k=64, r=3, s=3, padding=(1, 1), layout="NHWC")
    small = Conv2dSpec(n=1, c=256, h=14, w=14, k=256, r=3, s=3, padding=(1, 1), layout="NHWC")
    inside = conv2d.default_schedule(large, target)
    assert inside.patches_inside and inside.n_blocks == 1
    assert [launch.kernel.name for launch in conv2d.build(large, inside).launches] == [
        "conv2d_pack_weight", "conv2d_gemm"]
    split = conv2d.default_schedule(small, target)
    assert not split.patches_inside and split.n_blocks > 1
    assert not conv2d.default_schedule(large.model_copy(update={"layout": "NCHW"}), target).patches_inside
    # NCHW's patches of a 1x1 layer are the image itself: packed inside where M (the weight's rows) is one block.
    flat = Conv2dSpec(n=1, c=64, h=56, w=56, k=256, r=1, s=1)
    default = conv2d.default_schedule(flat, target)
    assert default.patches_inside == (default.m_blocks == 1)
    assert conv2d.default_schedule(flat, PINNED["avx512-l1d32"]).patches_inside


@pytest.mark.parametrize("l2_kib", [512, 1024])
def test_a_large_image_keeps_its_default_in_the_space_on_a_small_l2(l2_kib: int) -> None:
    """28000 output rows: 32 blocks of M leave an MC x KC block over half of a 512 KiB L2 at any KC,
    so M gets more splits there; the usual layers keep the six."""
    device = CpuDevice("x", "AuthenticAMD", "x86_64", ("avx2", "fma"), 8, 2, 2,
                       (CacheLevel(1, "Data", 32768, 64, 1), CacheLevel(2, "Unified", l2_kib << 10, 64, 1)), 3.0,
                       "t", 2)
    spec = Conv2dSpec(n=1, c=120, h=280, w=200, k=2, r=3, s=3, padding=(1, 1), stride=(2, 1), layout="NHWC")
    level2 = conv2d.space(spec, device, 2)
    default = conv2d.default_schedule(spec, device)
    assert level2.violation(default) is None and default.m_blocks > 32
    assert conv2d.m_splits(28000) == (1, 2, 4, 8, 16, 32, 64, 128, 256)
    assert conv2d.m_splits(56 * 56) == conv2d.BLOCK_SPLITS


def test_pixels_past_32_bits_are_refused_with_a_reason() -> None:
    spec = Conv2dSpec(n=1, c=1, h=65536, w=65536, k=1, r=1, s=1, stride=(2, 2))  # a 2^32-element plane
    with pytest.raises(EmptySpaceError, match="32-bit"):
        conv2d.space(spec, HOST, 1)
