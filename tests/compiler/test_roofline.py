"""The roofline rule: the larger share of a roof, the roof that binds, nothing without both roofs and
both rates; a stored kernel's rates read the same way."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from compiler.roofline import roofline, roofline_fields, stored_roofline


@pytest.mark.parametrize(("gflops", "gbs", "bound", "fraction"), [
    (300.0, 10.0, "compute", 0.75),  # 300 of a 400 GFLOP/s peak; 10 of 100 GB/s
    (2.5, 80.0, "memory", 0.8),
])
def test_the_roofline_is_the_larger_share_of_a_roof(gflops: float, gbs: float, bound: str, fraction: float) -> None:
    place = roofline(gflops, gbs, 400.0, 100.0)
    assert place is not None and place.bound == bound and place.fraction == pytest.approx(fraction)
    assert roofline_fields(place) == {"roofline_fraction": place.fraction, "bound": bound}


@pytest.mark.parametrize("missing", range(4))
def test_without_every_figure_there_is_no_roofline(missing: int) -> None:
    figures: list[float | None] = [300.0, 10.0, 400.0, 100.0]
    figures[missing] = None
    assert roofline(*figures) is None
    assert roofline_fields(None) == {"roofline_fraction": None, "bound": None}


@dataclass(frozen=True)
class _Stored:
    gflops: float | None
    gbs: float | None
    peak_gflops: float | None = None
    bandwidth_gbs: float | None = None


def test_a_stored_kernel_reads_its_own_roofs() -> None:
    assert stored_roofline(_Stored(2.5, 80.0, 400.0, 100.0)) == roofline(2.5, 80.0, 400.0, 100.0)
    assert stored_roofline(_Stored(2.5, 80.0)) is None  # stored before the roofs were kept
