"""The float32 conv2d template of the cpu target: implicit im2col packing, then the packed GEMM.

A program of three launches (see :mod:`compiler.ops.cpu.conv_pack` for the packers):

1. pack the patches of x (the im2col matrix, never formed) into the GEMM's packed panels;
2. pack the weight, the ``[k, K]`` matrix it is in memory, into panels of output channels;
3. the packed GEMM's compute launch (``compiler.ops.cpu.gemm.compute_kernel``), which writes C straight
   into ``y`` in the spec's layout through its batch and row strides.

A schedule may instead have the compute launch pack the patches itself, just before it uses them, into
its thread's scratch (``gemm.compute_packing_kernel``): for NCHW one KC x NC slice of B at a time
(:func:`~compiler.ops.cpu.conv_pack.nchw_patch_packer`), for NHWC one MC x KC block of A
(:func:`~compiler.ops.cpu.conv_pack.nhwc_patch_packer`). Two launches, and the packed patches, ``r*s``
times the image, never go through memory; in exchange a block packs again what the blocks beside it in
the grid pack too. Which wins depends on the layer and the blocking: a choice for the tuner (README,
"Measured").

Which operand is the image follows from the output layout, because C's columns are contiguous:

- NCHW, ``y[n]`` is ``[k, p*q]``: ``C_n = weight @ im2col(x[n])`` with M = output channels (A = the
  weight, shared: ``batch_a = 1``), N = the image's output pixels (B = patches), one batch per image,
  ``c_batch_stride = k*p*q``, ``c_row_stride = p*q``.
- NHWC, ``y`` is ``[n*p*q, k]``: ``C = im2col(x) @ weight^T`` with M = the output pixels of every image
  (A = patches), N = output channels (B = the weight, packed once). The images are folded into M rather
  than batched: a single GEMM has one ragged M edge instead of one per image, its blocks spread over the
  cores even at batch 1 or 2, and its rows are exactly ``y``'s rows (``c_row_stride = k``). Batching over
  images, the alternative, costs an edge tile per image and gains nothing, since the weight panels are
  shared either way.

Schedules (:class:`ConvSchedule`) are the GEMM's blocking (the ``MR x NR`` register tile, KC, and how
many blocks split M and N, which sets MC and NC for this spec) plus the packers' choices (panels per
packing block; for NCHW, reading x by row runs or by gathers, and which launch packs the patches).
Level 1 is a handful of small tiles that give even small problems several blocks and KC steps (every
one is checked in tests); level 2 is
the tuning space: tiles that fit the vector registers, KC steps (fixed sizes, or K in equal steps)
whose KC x NR panel fits twice the L1d and MC x KC block half the L2, M and N split into 1 to 32
blocks, and both pack choices. :func:`default_schedule` is one of its schedules.

>>> from compiler.cpu_device import CacheLevel, CpuDevice
>>> host = CpuDevice("x", "AuthenticAMD", "x86_64", ("avx2", "fma"), 8, 2, 2,
...                  (CacheLevel(1, "Data", 32768, 64, 1), CacheLevel(2, "Unified", 524288, 64, 1)),
...                  3.0, "test", 2)
>>> spec = Conv2dSpec(n=1, c=64, h=56, w=56, k=64, r=3, s=3, padding=(1, 1))
>>> nhwc = spec.model_copy(update={"layout": "NHWC"})
>>> len(space(spec, host, 1).candidates()), len(space(nhwc, host, 1).candidates())
(32, 16)
>>> [launch.kernel.name for launch in build(spec, default_schedule(spec, host)).launches]
['conv2d_pack_patches', 'conv2d_pack_weight', 'conv2d_gemm']
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from math import ceil

from compiler.cpu_device import CpuDevice
from compiler.ops.conv2d_spec import Conv2dSpec
from compiler.ops.cpu import gemm
from compiler.ops.cpu.conv_pack import (
    MAX_I32,
    PACK_MODES,
    ConvGemm,
    is_flat,
    nchw_patch_packer,
    nhwc_patch_packer,
    pack_nchw_patches_kernel,
    pack_nhwc_patches_kernel,
    pack_weight_kernel,
)
from compiler.ops.cpu.matmul import vector_registers
from compiler.program import Launch, Program, Workspace
from compiler.space import Constraint, EmptySpaceError, Param, ScheduleDoesNotFitError, Space, schedule_values

TEMPLATE = "conv2d_cpu"


@dataclass(frozen=True)
class ConvSchedule:
    """The packed GEMM's register tile and blocking, and the packers' grain.

    ``m_blocks`` / ``n_blocks``: how many blocks of the compute launch split M and N (MC and NC follow
    from the spec, rounded up to whole micro-panels); ``pack_panels``: panels one packing block writes;
    ``pack_mode``: how the patches are read (NCHW: ``runs`` or ``gather``, see
    :func:`~compiler.ops.cpu.conv_pack.pack_nchw_patches_kernel`; NHWC has one way, ``channels``);
    ``patches_inside``: the compute launch packs the patches itself, block by block, instead of a launch
    of their own (:func:`~compiler.ops.cpu.conv_pack.nchw_patch_packer`,
    :func:`~compiler.ops.cpu.conv_pack.nhwc_patch_packer`).
    """

    mr: int
    nr: int
    kc: int
    m_blocks: int
    n_blocks: int
    k_unroll: int
    pack_panels: int
    pack_mode: str
    patches_inside: bool = False

    def tile(self, spec: Conv2dSpec) -> gemm.GemmTile:
        """The GEMM tile for ``spec``: MC and NC split M and N into ``m_blocks`` and ``n_blocks``."""
        m, n, _ = ConvGemm(spec).mnk
        mc = self.mr * ceil(ceil(m / self.mr) / self.m_blocks)
        nc = self.nr * ceil(ceil(n / self.nr) / self.n_blocks)
        return gemm.GemmTile(mr=self.mr, nr=self.nr, mc=mc, kc=self.kc, nc=nc, k_unroll=self.k_unroll)


def _check_spec(spec: Conv2dSpec) -> None:
    if spec.dtype != "float32":
        raise EmptySpaceError(f"the cpu conv2d template computes float32, not {spec.dtype}")
    # Pixels (with a panel of slack) and positions within one image plane are 32-bit ints in the
    # packers; offsets across whole tensors widen to 64 bits where a tensor needs it.
    if spec.n * spec.p * spec.q + 64 > MAX_I32 or spec.h * spec.w > MAX_I32:
        raise EmptySpaceError("the cpu conv2d template numbers output pixels and image positions with 32-bit "
                              f"ints: {spec.n * spec.p * spec.q} pixels, {spec.h * spec.w} per plane")


def _sizes(device: CpuDevice) -> tuple[int, int, int]:
    """L1d and L2 bytes (typical values where the host does not say), and the cores to spread over."""
    l1 = device.l1d.size_bytes if device.l1d else 32 << 10
    l2 = device.l2.size_bytes if device.l2 else 512 << 10
    return l1, l2, device.peak_cores


def _constraints(spec: Conv2dSpec, device: CpuDevice, level: int) -> tuple[Constraint[ConvSchedule], ...]:
    m, n, k = ConvGemm(spec).mnk
    lanes, registers = device.f32_lanes, vector_registers(device)
    l1, l2, _ = _sizes(device)

    def fits_registers(s: ConvSchedule) -> bool:
        return gemm.GemmTile(s.mr, s.nr, s.mr, s.kc, s.nr).accumulator_registers(lanes) <= registers

    rules = [Constraint(f"register tile fits {registers} vector registers", fits_registers)]
    if level >= 2:
        rules += [
            # More blocks than micro-panels would leave some empty (and duplicate a smaller split).
            Constraint("m_blocks <= M micro-panels", lambda s: s.m_blocks <= ceil(m / s.mr)),
            Constraint("n_blocks <= N micro-panels", lambda s: s.n_blocks <= ceil(n / s.nr)),
            # The KC x NR panel of B streams through L1 behind the prefetcher: the cpu matmul measured
            # twice the L1d as the useful bound (compiler/ops/cpu/matmul.py).
            Constraint(f"KC x NR panel of B within twice the L1d ({2 * l1} B)",
                       lambda s: 4 * min(s.kc, k) * s.nr <= 2 * l1),
            Constraint(f"MC x KC block of A within half the L2 ({l2 // 2} B)",
                       lambda s: 4 * s.tile(spec).mc * min(s.kc, k) <= l2 // 2),
        ]
    return tuple(rules)


#: Level-2 ways to split M and N into blocks of the compute launch (MC and NC follow, see ConvSchedule).
BLOCK_SPLITS = (1, 2, 4, 8, 16, 32)
#: M is split further where 32 blocks would leave more than this many rows in one (see ``m_splits``).
MIN_SPLIT_ROWS = 128


def m_splits(m: int) -> tuple[int, ...]:
    """The level-2 splits of M: ``BLOCK_SPLITS``, and for a large image more powers of two, up to the
    first that leaves at most ``MIN_SPLIT_ROWS`` rows a block. Without them an MC x KC block of a large
    image (280 x 200 outputs: 28000 rows) cannot fit half of a 512 KiB L2 at any KC, and the default
    schedule would fall outside the space; the usual layers (M up to 56 x 56) keep the six splits."""
    splits = list(BLOCK_SPLITS)
    while splits[-1] * MIN_SPLIT_ROWS < m:
        splits.append(2 * splits[-1])
    return tuple(splits)


#: Level-2 KC steps (besides K split into 1 to 8 equal steps of at most 768).
KC_STEPS = (128, 256, 384, 512, 768)


def _kc_choices(k: int, wanted: tuple[int, ...]) -> tuple[int, ...]:
    # KC past K is one step over all of K: keep one such choice, not several identical ones.
    return tuple(sorted({min(c, k) for c in wanted}))


def _level2_kc(k: int) -> tuple[int, ...]:
    even = tuple(ceil(k / steps) for steps in range(1, 9) if ceil(k / steps) <= KC_STEPS[-1])
    return _kc_choices(k, (*KC_STEPS, *even))


def pack_modes(spec: Conv2dSpec) -> tuple[str, ...]:
    return PACK_MODES if spec.layout == "NCHW" else ("channels",)


#: Where the patches may be packed: by a launch of their own, or inside the compute launch.
PATCHES_INSIDE = (False, True)


def space(spec: Conv2dSpec, device: CpuDevice, level: int) -> Space[ConvSchedule]:
    """Schedules for ``spec`` on ``device`` at ``level`` (1: a handful for tests, 2: the tuning space)."""
    _check_spec(spec)
    lanes = device.f32_lanes
    modes = Param("pack_mode", pack_modes(spec))
    m, _, k = ConvGemm(spec).mnk
    if level == 1:
        params = (
            Param("mr", (4, 6)),
            Param("nr", (lanes, 2 * lanes)),
            # 16 takes several KC steps (the accumulate path) on any spec with K > 16.
            Param("kc", _kc_choices(k, (16, 256))),
            # Several blocks along both dimensions on small problems, MC about 96 on large ones.
            Param("m_blocks", (max(2, ceil(m / 96)),)),
            Param("n_blocks", (2,)),
            Param("k_unroll", (4,)),
            Param("pack_panels", (3,)),
            modes,
            Param("patches_inside", PATCHES_INSIDE),
        )
    elif level == 2:
        params = (
            Param("mr", (4, 6, 8, 10, 12, 14)),
            Param("nr", (lanes, 2 * lanes, 3 * lanes)),
            Param("kc", _level2_kc(k)),
            Param("m_blocks", m_splits(m)),
            Param("n_blocks", BLOCK_SPLITS),
            Param("k_unroll", (1, 4)),
            Param("pack_panels", (1, 4, 8)),
            modes,
            Param("patches_inside", PATCHES_INSIDE),
        )
    else:
        raise ValueError(f"{TEMPLATE}: level must be 1 or 2, got {level}")
    return Space(TEMPLATE, params, lambda p: ConvSchedule(**p), _constraints(spec, device, level),
                 default=schedule_values(default_schedule(spec, device)))


def sized_schedule(spec: Conv2dSpec, device: CpuDevice, mr: int, nr: int, pack_mode: str | None = None,
                   max_kc: int = KC_STEPS[-1]) -> ConvSchedule:
    """The level-2 schedule with register tile ``mr x nr`` whose blocking is sized from the spec and caches.

    K in equal KC steps of at most ``max_kc`` (768: one step for a 3x3 over 64 channels); MC as large as half the
    L2 holds at that KC, at most 256 rows; then N split until every core has at least 4 blocks (or N
    runs out of micro-panels); splits rounded up to the level-2 choices. Packing takes 4 panels a block;
    NCHW patches are read by runs unless output rows are shorter than half a panel, where gathers
    measured faster (``pack_mode`` overrides).
    """
    _check_spec(spec)
    conv = ConvGemm(spec)
    m, n, k = conv.mnk
    cores = max(1, device.peak_cores)
    l1, l2, _ = _sizes(device)
    kc = ceil(k / ceil(k / max_kc))
    mc = max(mr, min(256, (l2 // 2) // (4 * kc)) // mr * mr)
    splits = m_splits(m)
    m_blocks = _round_up_to(ceil(ceil(m / mr) / (mc // mr)), splits)
    n_blocks = next((b for b in BLOCK_SPLITS if m_blocks * b * conv.batch >= 4 * cores), BLOCK_SPLITS[-1])
    n_blocks = min(n_blocks, max(b for b in BLOCK_SPLITS if b <= ceil(n / nr)))
    m_blocks = min(m_blocks, max(b for b in splits if b <= ceil(m / mr)))
    mc_used = mr * ceil(ceil(m / mr) / m_blocks)
    # Where M has fewer micro-panels than the split wanted, the block of A may outgrow half the L2 at
    # this KC, and wide vectors beside a 32 KiB L1d the KC x NR panel of B twice the L1d: shorten KC.
    def fits(c: int) -> bool:
        return 4 * mc_used * c <= l2 // 2 and 4 * c * nr <= 2 * l1

    if not fits(min(kc, k)):
        kc = max(filter(fits, _level2_kc(k)), default=min(_level2_kc(k)))
    if pack_mode is None and spec.layout == "NHWC":
        pack_mode = "channels"
    elif pack_mode is None:
        pack_mode = "runs" if is_flat(spec) or 2 * spec.q >= nr else "gather"
    return ConvSchedule(mr=mr, nr=nr, kc=kc, m_blocks=m_blocks, n_blocks=n_blocks, k_unroll=4, pack_panels=4,
                        pack_mode=pack_mode)


def _round_up_to(value: int, choices: tuple[int, ...]) -> int:
    return next((c for c in choices if c >= value), choices[-1])


def default_schedule(spec: Conv2dSpec, device: CpuDevice) -> ConvSchedule:
    """The schedule used untuned: the micro-kernel the cpu matmul measured best (two vectors wide; 8
    rows with 32 vector registers, 6 with 16), blocked by :func:`sized_schedule`. It is in the level-2
    space."""
    lanes = device.f32_lanes
    mr = 8 if vector_registers(device) >= 32 else 6
    schedule = sized_schedule(spec, device, mr, 2 * lanes)
    # The compute launch packs the patches where no block packs what another packs too: NHWC's (A) where a
    # row of the grid is one block (measured 1.02-1.21x on the ResNet layers blocked so, mixed where N is
    # split), NCHW's (B) where a column is, on a flat layer, whose patches are the image itself (1.06-1.20x
    # on the 1x1 layer). NCHW 3x3 layers measured within a few percent either way with no rule that held
    # from run to run: the tuner chooses (README, "Measured").
    nhwc = spec.layout == "NHWC" and schedule.n_blocks == 1
    nchw = spec.layout == "NCHW" and schedule.m_blocks == 1 and is_flat(spec)
    return dataclasses.replace(schedule, patches_inside=True) if nhwc or nchw else schedule


def build(spec: Conv2dSpec, schedule: ConvSchedule) -> Program:
    """The program ``y = conv2d(x, weight)``: arguments ``x``, ``weight`` (inputs) and ``y``."""
    _check_spec(spec)
    conv = ConvGemm(spec)
    m, n, k = conv.mnk
    try:
        tile = schedule.tile(spec)
    except ValueError as exc:
        raise ScheduleDoesNotFitError(f"{TEMPLATE}: {exc}") from exc
    if schedule.pack_mode not in pack_modes(spec):
        raise ScheduleDoesNotFitError(f"{TEMPLATE}: pack_mode {schedule.pack_mode!r} does not read {spec.layout}; "
                                      f"it takes {pack_modes(spec)}")
    if schedule.patches_inside:
        return _build_patches_inside(spec, schedule, tile)
    c_batch_stride, c_row_stride = conv.c_strides
    compute = gemm.compute_kernel("conv2d_gemm", batch=conv.batch, m=m, n=n, k=k, tile=tile,
                                  a_batched=not conv.image_is_b, b_batched=conv.image_is_b,
                                  c_batch_stride=c_batch_stride, c_row_stride=c_row_stride)
    if conv.image_is_b:
        patches = pack_nchw_patches_kernel("conv2d_pack_patches", spec, tile.nr, schedule.pack_panels,
                                           schedule.pack_mode)
        weights = pack_weight_kernel("conv2d_pack_weight", spec, tile.mr, schedule.pack_panels)
        workspaces = (Workspace("xp", gemm.packed_b_shape(conv.batch, k, n, tile), "float32"),
                      Workspace("wp", gemm.packed_a_shape(1, m, k, tile), "float32"))
        operands = ("wp", "xp")
    else:
        patches = pack_nhwc_patches_kernel("conv2d_pack_patches", spec, tile.mr, schedule.pack_panels)
        weights = pack_weight_kernel("conv2d_pack_weight", spec, tile.nr, schedule.pack_panels)
        workspaces = (Workspace("xp", gemm.packed_a_shape(1, m, k, tile), "float32"),
                      Workspace("wp", gemm.packed_b_shape(1, k, n, tile), "float32"))
        operands = ("xp", "wp")
    launches = (
        Launch(patches, ("x", "xp")),
        Launch(weights, ("weight", "wp")),
        Launch(compute, (*operands, "y")),
    )
    return Program(f"{TEMPLATE}_{spec.layout.lower()}", ("x", "weight", "y"), launches, workspaces)


def _build_patches_inside(spec: Conv2dSpec, schedule: ConvSchedule, tile: gemm.GemmTile) -> Program:
    """Two launches: the weight's packing, then the GEMM packing the patches into a scratch slot per thread."""
    conv = ConvGemm(spec)
    m, n, k = conv.mnk
    c_batch_stride, c_row_stride = conv.c_strides
    gemm_kernel = functools.partial(gemm.compute_packing_kernel, "conv2d_gemm", batch=conv.batch, m=m, n=n, k=k,
                                    tile=tile, c_batch_stride=c_batch_stride, c_row_stride=c_row_stride)
    if conv.image_is_b:  # the weight is A, shared by every image
        compute = gemm_kernel(a_batched=False, b_packer=nchw_patch_packer(spec, tile.nr, schedule.pack_mode))
        weights = pack_weight_kernel("conv2d_pack_weight", spec, tile.mr, schedule.pack_panels)
        workspaces = (Workspace("wp", gemm.packed_a_shape(1, m, k, tile), "float32"),
                      Workspace("bw", gemm.packing_b_workspace_shape(conv.batch, m, n, tile), "float32",
                                per_worker=True))
        bindings = ("wp", "x", "bw", "y")
    else:
        compute = gemm_kernel(b_batched=False, a_packer=nhwc_patch_packer(spec, tile.mr))
        weights = pack_weight_kernel("conv2d_pack_weight", spec, tile.nr, schedule.pack_panels)
        workspaces = (Workspace("wp", gemm.packed_b_shape(1, k, n, tile), "float32"),
                      Workspace("aw", gemm.packing_a_workspace_shape(conv.batch, m, n, tile), "float32",
                                per_worker=True))
        bindings = ("x", "wp", "aw", "y")
    launches = (Launch(weights, ("weight", "wp")), Launch(compute, bindings))
    return Program(f"{TEMPLATE}_{spec.layout.lower()}", ("x", "weight", "y"), launches, workspaces)
