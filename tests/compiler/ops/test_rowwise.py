"""Group layouts of the memory-bound templates, and the bandwidth arithmetic their benchmarks use."""

import pytest

from compiler.device import DEVICES
from compiler.ops.rowwise import GroupLayout, achieved_bandwidth, bandwidth_bound_seconds


@pytest.mark.parametrize(
    ("split", "tile", "split_minor", "per_warp", "warps"),
    [
        (32, 1, True, 32, 1),  # a row per warp
        (256, 4, True, 32, 8),  # four rows per block, each over 8 warps
        (8, 4, True, 8, 1),  # sub-warp groups
        (4, 8, False, 4, 1),  # members 8 lanes apart: offsets 8 and 16
        (32, 8, False, 4, 8),
        (32, 32, False, 1, 32),  # every member in its own warp
    ],
)
def test_members_per_warp_and_partials(split, tile, split_minor, per_warp, warps):
    layout = GroupLayout(split, tile, split_minor)
    assert (layout.members_per_warp, layout.warps_per_group) == (per_warp, warps)


def test_layouts_number_threads_as_documented():
    assert GroupLayout(8, 4, split_minor=True).thread(2, 3) == 2 * 8 + 3
    assert GroupLayout(8, 4, split_minor=False).thread(2, 3) == 3 * 4 + 2


@pytest.mark.parametrize(("split", "tile"), [(3, 32), (32, 6), (4, 4)])
def test_layouts_need_powers_of_two_and_whole_warps(split, tile):
    with pytest.raises(ValueError, match=r"power of two|whole number of warps"):
        GroupLayout(split, tile, split_minor=True)


def test_achieved_bandwidth_against_the_device_figure():
    gbs, fraction = achieved_bandwidth(2_039 * 10**6, 1e-3, DEVICES["a100"])
    assert gbs == pytest.approx(2039.0) and fraction == pytest.approx(1.0)
    assert bandwidth_bound_seconds(4800 * 10**9, DEVICES["h200"]) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="seconds > 0"):
        achieved_bandwidth(100, 0.0, DEVICES["h200"])
