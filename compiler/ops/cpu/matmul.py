"""The float32 matmul template for the cpu target: pack A, pack B, then the blocked GEMM of ``gemm``.

A program over the arguments ``a``, ``b`` (inputs, stored as ``MatmulSpec.a_shape`` / ``b_shape``:
row- or column-major, any batch) and ``c`` (``[batch, m, n]``): a launch packing A into the workspace
``ap``, then the compute launch, which either packs B slice by slice itself (``pack_b_inside``, into
the workspace ``bw``, a slot per host thread: ``Workspace.per_worker``) or reads B packed by a launch of
its own (workspace ``bp``). A schedule is a
:class:`CpuMatmulSchedule`: a :class:`~compiler.ops.cpu.gemm.GemmTile` and that choice.

Spaces read the host's description: ``nr`` is a multiple of its f32 lanes, the micro-kernel's
accumulators fit its vector registers (32 with AVX-512, 16 below it), the MC x KC block of A fits
half the L2 and the KC x NR panel of B twice the L1d. Level 1 is a few small tiles that make even
small problems run several blocks and KC steps (every one of them is checked in tests); level 2 is
the tuning space, narrowed by the spec (no block larger than the problem needs).

>>> from compiler.cpu_device import CpuDevice
>>> avx2 = CpuDevice("x", "AuthenticAMD", "x86_64", ("avx", "avx2", "fma"), 8, 2, 2, (), None, "", 2)
>>> spec = MatmulSpec(m=67, n=45, k=83, batch=3, layout_a="col")
>>> len(space(spec, avx2, 1).candidates())
24
>>> tile = default_schedule(MatmulSpec(m=1024, n=1024, k=1024), avx2)
>>> tile.mr, tile.nr, tile.mc, tile.kc, tile.nc, tile.pack_b_inside
(6, 16, 114, 512, 256, False)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from math import ceil

from compiler.cpu_device import CpuDevice
from compiler.ops.cpu.gemm import (
    GemmTile,
    compute_kernel,
    compute_packing_kernel,
    matrix_a_packer,
    matrix_b_packer,
    pack_a_kernel,
    pack_b_kernel,
    packed_a_shape,
    packed_b_shape,
    packing_a_workspace_shape,
    packing_b_workspace_shape,
)
from compiler.ops.matmul_spec import MatmulSpec
from compiler.program import Launch, Program, Workspace
from compiler.space import Constraint, EmptySpaceError, Param, Space, schedule_values

TEMPLATE = "cpu_matmul"
#: Caches assumed where sysfs lists none (a typical desktop core).
_L1D_BYTES, _L2_BYTES = 32 << 10, 512 << 10


@dataclass(frozen=True)
class CpuMatmulSchedule(GemmTile):
    """A :class:`GemmTile` and where the operands are packed: B by each block of the compute launch,
    one KC x NC slice at a time (``pack_b_inside``), or by a launch of its own before it; A likewise
    (``pack_a_inside``, only with B inside: the whole product is then one launch)."""

    pack_b_inside: bool = True
    pack_a_inside: bool = False


def vector_registers(device: CpuDevice) -> int:
    """Architectural vector registers at the f32 lane width: 32 zmm with AVX-512, else 16."""
    return 32 if device.has("avx512f") else 16


def _levels(lanes: int) -> dict[int, dict[str, tuple[object, ...]]]:
    return {
        1: {
            "mr": (4, 6), "nr": (lanes, 2 * lanes), "mc": (12,), "kc": (16, 256), "nc": (4 * lanes,),
            "k_unroll": (4,), "prefetch_c": (True,), "pack_b_inside": (False, True),
            "pack_a_inside": (False, True), "dynamic": (False,),
        },
        2: {
            "mr": (4, 6, 8, 12), "nr": (lanes, 2 * lanes, 3 * lanes, 4 * lanes),
            "mc": (48, 96, 128, 192, 256, 384), "kc": (128, 256, 384, 512, 768),
            "nc": tuple(lanes * f for f in (6, 8, 12, 16, 24, 48, 96)), "k_unroll": (1, 4), "prefetch_c": (True, False),
            "pack_b_inside": (True, False), "pack_a_inside": (False, True), "dynamic": (False, True),
        },
    }


def _check_spec(spec: MatmulSpec) -> None:
    if spec.dtype != "float32":
        raise EmptySpaceError(f"{TEMPLATE}: computes float32 on the cpu target, not {spec.dtype}")


def _smallest_covering(choices: tuple[object, ...], extent: int, multiple: int) -> int:
    """The smallest choice (a multiple of ``multiple``) that covers ``extent``, or the largest one."""
    usable = sorted(int(c) for c in choices if int(c) % multiple == 0)  # type: ignore[call-overload]
    return next((c for c in usable if c >= extent), usable[-1] if usable else 0)


def constraints(spec: MatmulSpec, device: CpuDevice, level: int,
                choices: dict[str, tuple[object, ...]]) -> tuple[Constraint[GemmTile], ...]:
    """What rules a tile out for ``spec`` on ``device`` before anything is compiled."""
    lanes, registers = device.f32_lanes, vector_registers(device)
    l1 = device.l1d.size_bytes if device.l1d is not None else _L1D_BYTES
    l2 = device.l2.size_bytes if device.l2 is not None else _L2_BYTES
    checks: list[tuple[str, Callable[[GemmTile], bool]]] = [
        (f"nr a multiple of the {lanes} f32 lanes", lambda t: t.nr % lanes == 0),
        ("mc a multiple of mr and nc of nr", lambda t: t.mc % t.mr == 0 and t.nc % t.nr == 0),
        (f"micro-kernel fits {registers} vector registers",
         lambda t: t.accumulator_registers(lanes) <= registers),
        ("A packed inside only with B packed inside",
         lambda t: t.pack_b_inside or not t.pack_a_inside),  # type: ignore[attr-defined]
    ]
    if level >= 2:
        k_cover = _smallest_covering(choices["kc"], spec.k, 1)
        checks += [
            (f"MC x KC block of A within half the L2 ({l2 // 2} B)", lambda t: t.mc * t.kc * 4 <= l2 // 2),
            # The panel streams through the L1d behind the hardware prefetcher; KC 512 x NR 32 (64 KiB,
            # over a 48 KiB L1d) measured fastest at 1024^3 on Zen 5, so the bound is loose.
            (f"KC x NR panel of B within twice the L1d ({2 * l1} B)", lambda t: t.kc * t.nr * 4 <= 2 * l1),
            ("mc no larger than the problem needs", lambda t: t.mc <= _smallest_covering(choices["mc"], spec.m, t.mr)),
            ("nc no larger than the problem needs", lambda t: t.nc <= _smallest_covering(choices["nc"], spec.n, t.nr)),
            ("kc no larger than the problem needs", lambda t: t.kc <= k_cover),
            ("nr no wider than the padded problem", lambda t: t.nr <= max(lanes, ceil(spec.n / lanes) * lanes)),
        ]
    return tuple(Constraint(name, holds) for name, holds in checks)


def space(spec: MatmulSpec, device: CpuDevice, level: int = 1) -> Space[CpuMatmulSchedule]:
    """The tiles for ``spec`` on ``device`` at ``level`` (1: tests and CI, 2: tuning)."""
    _check_spec(spec)
    levels = _levels(device.f32_lanes)
    if level not in levels:
        raise ValueError(f"no {TEMPLATE} space at level {level}; levels: {sorted(levels)}")
    default = schedule_values(default_schedule(spec, device))
    choices = levels[level]
    if level == 2:  # the tuning space holds its default (blocks sized to the shape fall between the choices)
        choices = {name: values if default[name] in values else tuple(sorted((*values, default[name])))
                   for name, values in choices.items()}
    params = tuple(Param(name, values) for name, values in choices.items())
    return Space(TEMPLATE, params, lambda values: CpuMatmulSchedule(**values),
                 constraints(spec, device, level, choices), default=default)


def default_schedule(spec: MatmulSpec, device: CpuDevice) -> CpuMatmulSchedule:
    """A good tile without tuning: two vectors of NR (8 rows with 32 registers, 6 with 16), KC 512
    (KC below 256 costs 20-30%), the MC and NC near 192 and 256 that share the blocks most evenly
    among the cores (the OpenMP grid is split into equal runs of blocks), B packed inside the compute
    launch when M fits one block, and A too (one launch) when a single product's grid is one column of
    at most two blocks."""
    _check_spec(spec)
    nr = 2 * device.f32_lanes if spec.n > device.f32_lanes else device.f32_lanes  # no all-padding vector
    mr = 8 if vector_registers(device) >= 32 else 6
    cores = max(1, device.peak_cores)
    # KC 512, or the smallest tuning choice that covers a shorter K (a longer panel would be padding).
    kc = min(512, _smallest_covering(_levels(device.f32_lanes)[2]["kc"], spec.k, 1))
    l2 = device.l2.size_bytes if device.l2 is not None else _L2_BYTES
    # MC x KC of A within half the L2, as the space requires.
    top = max(mr, min(384, (l2 // 2) // (4 * kc)) // mr * mr)
    best: tuple[float, float, int, int] | None = None
    for mc in range(min(top, mr * max(1, 96 // mr)), top + 1, mr):
        for nc in range(nr * max(1, 128 // nr), 513, nr):
            mc_used, nc_used = min(mc, ceil(spec.m / mr) * mr), min(nc, ceil(spec.n / nr) * nr)
            spread = imbalance(spec, mc_used, nc_used, cores)
            # Among even splits, blocks near 192 x 256 keep A's block in L2 and leave work to share.
            distance = abs(mc_used - 192) / 192 + abs(nc_used - 256) / 256
            key = (round(spread, 2), distance, mc_used, nc_used)
            if best is None or key < best:
                best = key
    assert best is not None
    rows, columns = ceil(spec.m / best[2]), ceil(spec.n / best[3])
    # One block row (small M, BERT's 128): each B slice is packed once, in the block that uses it.
    # Several: a packing launch of its own, so no slice is packed again by every block row.
    # A small single product whose grid is one column of at most two blocks runs as one launch, both
    # operands packed inside (A once, B at most twice): there the launches and A's trip through memory
    # cost more than the packing (128^3 1.2-1.8x, 256x64x128 1.2-1.3x; from four rows up, or batched,
    # it measured 0.85-1.16x: README, "Measured").
    one_launch = spec.batch == 1 and columns == 1 and rows <= 2
    return CpuMatmulSchedule(mr=mr, nr=nr, mc=best[2], kc=kc, nc=best[3], pack_b_inside=rows == 1 or one_launch,
                             pack_a_inside=one_launch)


def imbalance(spec: MatmulSpec, mc: int, nc: int, cores: int) -> float:
    """The busiest core's share of the C elements over the mean share, when the grid of MC x NC blocks
    (N fastest, then M, then batch) is cut into ``cores`` equal runs, as ``schedule(static)`` does."""
    rows = [min(mc, spec.m - i) for i in range(0, spec.m, mc)]
    cols = [min(nc, spec.n - j) for j in range(0, spec.n, nc)]
    work = [r * c for _ in range(spec.batch) for r in rows for c in cols]
    chunk = ceil(len(work) / cores)
    loads = [sum(work[t * chunk:(t + 1) * chunk]) for t in range(cores)]
    return max(loads) / (sum(work) / cores)


def build(spec: MatmulSpec, schedule: GemmTile) -> Program:
    """The program computing ``spec`` with ``schedule``: arguments ``a``, ``b`` and ``c``. A plain
    ``GemmTile`` packs B in a launch of its own."""
    _check_spec(spec)
    batch, m, n, k = spec.batch, spec.m, spec.n, spec.k
    pack_a = pack_a_kernel("cpu_matmul_pack_a", batch=batch, m=m, k=k, tile=schedule, layout=spec.layout_a)
    ap = Workspace("ap", packed_a_shape(batch, m, k, schedule), "float32")
    pack_b_inside = matrix_b_packer(spec.layout_b, batch=batch, k=k, n=n, nr=schedule.nr)
    if getattr(schedule, "pack_a_inside", False) and getattr(schedule, "pack_b_inside", False):
        compute = compute_packing_kernel("cpu_matmul", batch=batch, m=m, n=n, k=k, tile=schedule,
                                         a_packer=matrix_a_packer(spec.layout_a, batch=batch, m=m, k=k, mr=schedule.mr),
                                         b_packer=pack_b_inside, c_batch_stride=m * n, c_row_stride=n)
        workspaces = (Workspace("aw", packing_a_workspace_shape(batch, m, n, schedule), "float32", per_worker=True),
                      Workspace("bw", packing_b_workspace_shape(batch, m, n, schedule), "float32", per_worker=True))
        return Program(TEMPLATE, ("a", "b", "c"), (Launch(compute, ("a", "b", "aw", "bw", "c")),), workspaces)
    if getattr(schedule, "pack_b_inside", False):
        compute = compute_packing_kernel("cpu_matmul", batch=batch, m=m, n=n, k=k, tile=schedule,
                                         b_packer=pack_b_inside, c_batch_stride=m * n, c_row_stride=n)
        bw = Workspace("bw", packing_b_workspace_shape(batch, m, n, schedule), "float32", per_worker=True)
        launches: tuple[Launch, ...] = (Launch(pack_a, ("a", "ap")), Launch(compute, ("ap", "b", "bw", "c")))
        return Program(TEMPLATE, ("a", "b", "c"), launches, (ap, bw))
    pack_b = pack_b_kernel("cpu_matmul_pack_b", batch=batch, k=k, n=n, tile=schedule, layout=spec.layout_b)
    compute = compute_kernel("cpu_matmul", batch=batch, m=m, n=n, k=k, tile=schedule, a_batched=True,
                             b_batched=True, c_batch_stride=m * n, c_row_stride=n)
    bp = Workspace("bp", packed_b_shape(batch, k, n, schedule), "float32")
    launches = (Launch(pack_a, ("a", "ap")), Launch(pack_b, ("b", "bp")), Launch(compute, ("ap", "bp", "c")))
    return Program(TEMPLATE, ("a", "b", "c"), launches, (ap, bp))
