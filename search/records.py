"""What the search hands to the tuning database: compiler objects turned into the plain records it stores.

The conversion lives on this side of the boundary because storage knows only plain values; the
compiler's :class:`~compiler.source.KernelSource` is not one of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from compiler.source import KernelSource
from db.records import KernelResult


def kernel_result(
    kernel: KernelSource,
    *,
    schedule: Mapping[str, Any],
    latency_us: float,
    trials_used: int,
    binary: bytes | None = None,
    gflops: float | None = None,
) -> KernelResult:
    """The cache record of a measured kernel: its source, launch shape and parameters as plain fields."""
    return KernelResult(
        schedule=schedule,
        source=kernel.source,
        entry=kernel.entry,
        grid=kernel.grid,
        block=kernel.block,
        shared_bytes=kernel.shared_bytes,
        params=tuple({"name": p.name, "dtype": p.dtype, "pointer": p.pointer} for p in kernel.params),
        latency_us=latency_us,
        trials_used=trials_used,
        binary=binary,
        gflops=gflops,
    )
