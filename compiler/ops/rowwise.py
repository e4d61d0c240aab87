"""Pieces shared by the memory-bound templates (softmax, reductions): group reductions and bandwidth.

A block's threads form ``tile`` groups of ``split`` threads; each group combines one value per thread
into one result that every thread of the group receives. Two thread layouts exist:

- ``split_minor``: thread ``t`` is group ``t // split``, member ``t % split``. A group's threads are
  consecutive, so they read consecutive elements of a contiguous row.
- output-minor: thread ``t`` is member ``t // tile`` of group ``t % tile``. Consecutive threads belong
  to consecutive groups, so they read consecutive elements of an inner dimension (a reduction over a
  middle or outer axis).

Two trees combine a group:

- ``shuffle``: a butterfly of ``__shfl_xor_sync`` over the members that share a warp, then (when a
  group spans several warps) one partial per warp through shared memory, read back by every thread.
  In the output-minor layout with ``tile = 8``, members sit 8 lanes apart: the butterfly uses lane
  offsets 8 and 16, and each warp leaves 8 partials, one per group.
- ``shared``: every thread stores its value in shared memory and halving steps combine pairs
  ``split/2, split/4, ... 1`` members apart, one barrier per step.

Every thread of the block must reach a reduction (it holds barriers and full-warp shuffles): kernels
predicate work past the edges instead of returning early.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from compiler.device import DeviceSpec
from compiler.ir import (
    Buffer,
    Expr,
    Var,
    assign,
    cast,
    f32,
    floats_to_pair,
    if_,
    lane,
    let,
    make_vector,
    shared,
    shfl_xor_sync,
    sync_threads,
    var,
)

Tree = Literal["shuffle", "shared"]
Combine = Callable[[tuple[Expr, ...], tuple[Expr, ...]], tuple[Expr, ...]]

WARP = 32


@dataclass(frozen=True)
class GroupLayout:
    """``tile`` groups of ``split`` threads in a block of ``split * tile`` threads (powers of two)."""

    split: int
    tile: int
    split_minor: bool

    def __post_init__(self) -> None:
        for name, value in (("split", self.split), ("tile", self.tile)):
            if value < 1 or value & (value - 1):
                raise ValueError(f"group layout: {name} must be a power of two, got {value}")
        if self.threads % WARP:
            raise ValueError(f"group layout: {self.threads} threads is not a whole number of warps")

    @property
    def threads(self) -> int:
        return self.split * self.tile

    @property
    def member_stride(self) -> int:
        """Thread-index distance between consecutive members of a group."""
        return 1 if self.split_minor else self.tile

    @property
    def members_per_warp(self) -> int:
        """How many members of one group share a warp."""
        return min(self.split, max(1, WARP // self.member_stride))

    @property
    def warps_per_group(self) -> int:
        """Partials left per group after the in-warp butterfly."""
        return self.split // self.members_per_warp

    def thread(self, group: Expr | int, member: Expr | int) -> Expr | int:
        """The thread index of ``member`` of ``group``."""
        return group * self.split + member if self.split_minor else member * self.tile + group

    def group_and_member(self, tid: Expr) -> tuple[Var, Var]:
        if self.split_minor:
            return let("group", tid // self.split), let("member", tid % self.split)
        return let("group", tid % self.tile), let("member", tid // self.tile)


def group_allreduce(values: Sequence[Expr], combine: Combine, layout: GroupLayout, tid: Expr, *,
                    tree: Tree = "shuffle", name: str = "red") -> tuple[Expr, ...]:
    """Combine ``values`` (f32) over each group; every thread gets its group's result.

    ``combine`` must be associative and commutative on tuples of f32 expressions. Call from every
    thread of the block. Each call declares its own shared arrays, so back-to-back reductions need no
    barrier between them.
    """
    if tree == "shuffle":
        return _shuffle_allreduce(tuple(values), combine, layout, tid, name)
    if tree == "shared":
        return _shared_allreduce(tuple(values), combine, layout, tid, name)
    raise ValueError(f"unknown reduction tree {tree!r}; use 'shuffle' or 'shared'")


def _mutable(values: tuple[Expr, ...], name: str) -> tuple[Var, ...]:
    return tuple(var(f"{name}{k}", f32, v) for k, v in enumerate(values))


def _assign_all(targets: tuple[Var, ...], values: tuple[Expr, ...]) -> None:
    # Evaluate every new value before assigning any: combine may read all targets.
    fresh = tuple(let(f"{t.name}_next", v) for t, v in zip(targets, values, strict=True))
    for target, value in zip(targets, fresh, strict=True):
        assign(target, value)


def _shuffle_allreduce(values: tuple[Expr, ...], combine: Combine, layout: GroupLayout, tid: Expr,
                       name: str) -> tuple[Expr, ...]:
    acc = _mutable(values, name)
    offset = layout.member_stride
    while offset < layout.member_stride * layout.members_per_warp:
        # Shuffle into named values first: inside combine's selects, a shuffle would run divergently.
        peers = tuple(let(f"{name}_peer{k}", shfl_xor_sync(a, offset)) for k, a in enumerate(acc))
        _assign_all(acc, combine(acc, peers))
        offset *= 2
    if layout.warps_per_group == 1:
        return acc
    group, member = layout.group_and_member(tid)
    partials = [shared(f"{name}_partial{k}", f32, (layout.warps_per_group, layout.tile)) for k in range(len(acc))]
    with if_(member % layout.members_per_warp == 0):
        for buffer, a in zip(partials, acc, strict=True):
            buffer[member // layout.members_per_warp, group] = a
    sync_threads()
    total = _mutable(tuple(p[0, group] for p in partials), f"{name}_total")
    for w in range(1, layout.warps_per_group):
        _assign_all(total, combine(total, tuple(p[w, group] for p in partials)))
    return total


def _shared_allreduce(values: tuple[Expr, ...], combine: Combine, layout: GroupLayout, tid: Expr,
                      name: str) -> tuple[Expr, ...]:
    group, member = layout.group_and_member(tid)
    scratch = [shared(f"{name}_tree{k}", f32, (layout.threads,)) for k in range(len(values))]
    for buffer, v in zip(scratch, values, strict=True):
        buffer[tid] = v
    sync_threads()
    half = layout.split // 2
    while half >= 1:
        with if_(member < half):
            partner = tid + half * layout.member_stride
            mine = tuple(b[tid] for b in scratch)
            theirs = tuple(b[partner] for b in scratch)
            merged = tuple(let(f"{name}_m{k}", v) for k, v in enumerate(combine(mine, theirs)))
            for buffer, v in zip(scratch, merged, strict=True):
                buffer[tid] = v
        sync_threads()
        half //= 2
    root = layout.thread(group, 0)
    return tuple(let(f"{name}_out{k}", b[root]) for k, b in enumerate(scratch))


def compensated_add(total: Var, compensation: Var, value: Expr) -> None:
    """``total += value`` keeping the rounding error in ``compensation`` (Kahan); the sum is
    ``total - compensation``.

    A thread that streams a long row adds tens of thousands of terms: plain f32 accumulation loses
    about ``sqrt(n)`` ulps (2e-5 relative at 25 000 terms, over the 1e-5 tolerance); compensated
    accumulation stays within a few ulps at any length, for four flops per term.
    """
    corrected = let(f"{total.name}_term", value - compensation)
    updated = let(f"{total.name}_new", total + corrected)
    assign(compensation, (updated - total) - corrected)
    assign(total, updated)


def load_values(buffer: Buffer, indices: tuple[Expr, ...], width: int) -> list[Expr]:
    """``width`` consecutive elements along the last index of ``buffer`` as f32 values, in one load.

    f32 uses ``float2`` / ``float4``; f16 and bf16 load pairs (``__half2``, ``__nv_bfloat162``). The
    caller guarantees alignment: the flat index is a multiple of ``width``.
    """
    if width == 1:
        return [cast(buffer[indices], f32)]
    if buffer.dtype != f32 and width != 2:
        raise ValueError(f"{buffer.name}: {buffer.dtype} vectors are pairs, not {width} lanes")
    vector = let(f"{buffer.name}_vec", buffer.load_vector(*indices, lanes=width))
    return [cast(lane(vector, i), f32) for i in range(width)]


def store_values(buffer: Buffer, indices: tuple[Expr, ...], values: Sequence[Expr]) -> None:
    """Store f32 ``values`` to consecutive elements along the last index, rounded to the buffer's type.

    One vector store: ``float2`` / ``float4`` for f32, a pair (``__half2``, ``__nv_bfloat162``) for f16
    and bf16, whose values are rounded to nearest.
    """
    width = len(values)
    if width == 1:
        buffer[indices] = cast(values[0], buffer.dtype)
    elif buffer.dtype == f32:
        buffer.store_vector(indices, make_vector(*values))
    elif width == 2:
        buffer.store_vector(indices, floats_to_pair(buffer.dtype, values[0], values[1]))
    else:
        raise ValueError(f"{buffer.name}: {buffer.dtype} vectors are pairs, not {width} lanes")


def achieved_bandwidth(min_bytes: int, seconds: float, device: DeviceSpec) -> tuple[float, float]:
    """GB/s achieved by moving ``min_bytes`` in ``seconds``, and its fraction of the device's bandwidth.

    GB are 10**9 bytes, as ``DeviceSpec.memory_bandwidth_gbs`` (the vendors' figure) counts them:

    >>> from compiler.device import DEVICES
    >>> achieved_bandwidth(8 * 10**9, 0.002, DEVICES["h200"])
    (4000.0, 0.8333333333333334)
    """
    if min_bytes < 0 or seconds <= 0.0:
        raise ValueError(f"need min_bytes >= 0 and seconds > 0, got {min_bytes} bytes in {seconds} s")
    if device.memory_bandwidth_gbs <= 0.0:
        raise ValueError(f"device {device.name!r} has no memory bandwidth figure")
    gbs = min_bytes / seconds / 1e9
    return gbs, gbs / device.memory_bandwidth_gbs


def bandwidth_bound_seconds(min_bytes: int, device: DeviceSpec) -> float:
    """The least time moving ``min_bytes`` can take at the device's peak bandwidth (no kernel is faster)."""
    if device.memory_bandwidth_gbs <= 0.0:
        raise ValueError(f"device {device.name!r} has no memory bandwidth figure")
    return min_bytes / (device.memory_bandwidth_gbs * 1e9)
