"""Where a measured kernel stands against its target's roofline: the share it reached and the roof that
binds.

The roofline's least time for a workload is the longer of its flops at the compute peak and its bytes at
the bandwidth; over a measured time, that is the larger of two shares: GFLOP/s over the peak and GB/s
over the bandwidth. Rates are all a stored kernel keeps, so the rule is written once, over rates, for a
fresh tuning, a cached kernel and a benchmark alike.

>>> roofline(gflops=300.0, gbs=10.0, peak_gflops=400.0, bandwidth_gbs=100.0)
Roofline(fraction=0.75, bound='compute')
>>> roofline(gflops=2.5, gbs=80.0, peak_gflops=400.0, bandwidth_gbs=None) is None
True
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Roofline:
    """``fraction``: the roofline's least time over the measured one (1 is as fast as the roofs allow);
    ``bound``: ``"compute"`` when the flops at the peak take at least as long as the bytes at the
    bandwidth, else ``"memory"``."""

    fraction: float
    bound: str


def roofline(gflops: float | None, gbs: float | None, peak_gflops: float | None,
             bandwidth_gbs: float | None) -> Roofline | None:
    """The kernel's place under the roofline, or None unless all four figures are known (and the roofs
    positive)."""
    if gflops is None or gbs is None or not peak_gflops or not bandwidth_gbs:
        return None
    compute, memory = gflops / peak_gflops, gbs / bandwidth_gbs
    return Roofline(max(compute, memory), "compute" if compute >= memory else "memory")


class Rates(Protocol):
    """What a stored kernel keeps of its measurement and its tuning's roofs (``db.records.KernelResult``)."""

    @property
    def gflops(self) -> float | None: ...
    @property
    def gbs(self) -> float | None: ...
    @property
    def peak_gflops(self) -> float | None: ...
    @property
    def bandwidth_gbs(self) -> float | None: ...


def stored_roofline(result: Rates) -> Roofline | None:
    """:func:`roofline` of a stored kernel: None for one stored without its roofs."""
    return roofline(result.gflops, result.gbs, result.peak_gflops, result.bandwidth_gbs)


def roofline_fields(place: Roofline | None) -> dict[str, float | str | None]:
    """``{"roofline_fraction", "bound"}`` as the API and the command line report them (nulls when None)."""
    return {"roofline_fraction": None if place is None else place.fraction,
            "bound": None if place is None else place.bound}
