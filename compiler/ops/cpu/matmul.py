"""The float32 matmul template for the cpu target: pack A, pack B, then the blocked GEMM of ``gemm``.

A program of three launches over the arguments ``a``, ``b`` (inputs, stored as ``MatmulSpec.a_shape``
/ ``b_shape``: row- or column-major, any batch) and ``c`` (``[batch, m, n]``), with the packed panels
as workspaces ``ap`` and ``bp``. A schedule is a :class:`~compiler.ops.cpu.gemm.GemmTile`.

Spaces read the host's description: ``nr`` is a multiple of its f32 lanes, the micro-kernel's
accumulators fit its vector registers (32 with AVX-512, 16 below it), the MC x KC block of A fits
half the L2 and the KC x NR panel of B twice the L1d. Level 1 is a few small tiles that make even
small problems run several blocks and KC steps (every one of them is checked in tests); level 2 is
the tuning space, narrowed by the spec (no block larger than the problem needs).

>>> from compiler.cpu_device import CpuDevice
>>> avx2 = CpuDevice("x", "AuthenticAMD", "x86_64", ("avx", "avx2", "fma"), 8, 2, 2, (), None, "", 2)
>>> spec = MatmulSpec(m=67, n=45, k=83, batch=3, layout_a="col")
>>> len(space(spec, avx2, 1).candidates())
8
>>> default_schedule(MatmulSpec(m=1024, n=1024, k=1024), avx2)
GemmTile(mr=6, nr=16, mc=192, kc=512, nc=256, k_unroll=4, prefetch_c=True)
"""

from __future__ import annotations

from collections.abc import Callable
from math import ceil

from compiler.cpu_device import CpuDevice
from compiler.ops.cpu.gemm import (
    GemmTile,
    compute_kernel,
    pack_a_kernel,
    pack_b_kernel,
    packed_a_shape,
    packed_b_shape,
)
from compiler.ops.matmul_spec import MatmulSpec
from compiler.program import Launch, Program, Workspace
from compiler.space import Constraint, EmptySpaceError, Param, Space

TEMPLATE = "cpu_matmul"
#: Caches assumed where sysfs lists none (a typical desktop core).
_L1D_BYTES, _L2_BYTES = 32 << 10, 512 << 10


def vector_registers(device: CpuDevice) -> int:
    """Architectural vector registers at the f32 lane width: 32 zmm with AVX-512, else 16."""
    return 32 if device.has("avx512f") else 16


def _levels(lanes: int) -> dict[int, dict[str, tuple[object, ...]]]:
    return {
        1: {
            "mr": (4, 6), "nr": (lanes, 2 * lanes), "mc": (12,), "kc": (16, 256), "nc": (4 * lanes,),
            "k_unroll": (4,), "prefetch_c": (True,),
        },
        2: {
            "mr": (4, 6, 8, 12), "nr": (lanes, 2 * lanes, 3 * lanes, 4 * lanes),
            "mc": (48, 96, 192, 384), "kc": (128, 256, 384, 512, 768),
            "nc": tuple(lanes * f for f in (6, 12, 24, 48, 96)), "k_unroll": (1, 4), "prefetch_c": (True, False),
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


def space(spec: MatmulSpec, device: CpuDevice, level: int = 1) -> Space[GemmTile]:
    """The tiles for ``spec`` on ``device`` at ``level`` (1: tests and CI, 2: tuning)."""
    _check_spec(spec)
    levels = _levels(device.f32_lanes)
    if level not in levels:
        raise ValueError(f"no {TEMPLATE} space at level {level}; levels: {sorted(levels)}")
    choices = levels[level]
    params = tuple(Param(name, values) for name, values in choices.items())
    return Space(TEMPLATE, params, lambda values: GemmTile(**values), constraints(spec, device, level, choices))


def default_schedule(spec: MatmulSpec, device: CpuDevice) -> GemmTile:
    """A good tile without tuning: the widest micro-kernel that measured well (two vectors of NR;
    8 rows with 32 registers, 6 with 16), KC 512 (KC below 256 costs 20-30%), MC 192, and the
    widest NC up to 256 that gives every core the same number of blocks (or at least four each)."""
    _check_spec(spec)
    lanes = device.f32_lanes
    nr = 2 * lanes
    mr = 8 if vector_registers(device) >= 32 else 6
    kc = 512
    mc = min(192, ceil(spec.m / mr) * mr)
    cores = max(1, device.peak_cores)
    blocks_m = ceil(spec.m / mc) * spec.batch
    widths = [nr * f for f in range(max(1, 256 // nr), 0, -1)]
    nc = next((w for w in widths if (blocks_m * ceil(spec.n / w)) % cores == 0
               or blocks_m * ceil(spec.n / w) >= 4 * cores), nr)
    return GemmTile(mr=mr, nr=nr, mc=mc, kc=kc, nc=min(nc, ceil(spec.n / nr) * nr))


def build(spec: MatmulSpec, schedule: GemmTile) -> Program:
    """The program computing ``spec`` with ``schedule``: arguments ``a``, ``b`` and ``c``."""
    _check_spec(spec)
    batch, m, n, k = spec.batch, spec.m, spec.n, spec.k
    pack_a = pack_a_kernel("cpu_matmul_pack_a", batch=batch, m=m, k=k, tile=schedule, layout=spec.layout_a)
    pack_b = pack_b_kernel("cpu_matmul_pack_b", batch=batch, k=k, n=n, tile=schedule, layout=spec.layout_b)
    compute = compute_kernel("cpu_matmul", batch=batch, m=m, n=n, k=k, tile=schedule, a_batched=True,
                             b_batched=True, c_batch_stride=m * n, c_row_stride=n)
    workspaces = (
        Workspace("ap", packed_a_shape(batch, m, k, schedule), "float32"),
        Workspace("bp", packed_b_shape(batch, k, n, schedule), "float32"),
    )
    launches = (Launch(pack_a, ("a", "ap")), Launch(pack_b, ("b", "bp")), Launch(compute, ("ap", "bp", "c")))
    return Program(TEMPLATE, ("a", "b", "c"), launches, workspaces)
