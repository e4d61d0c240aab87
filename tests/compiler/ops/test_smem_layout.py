"""Shared tile layouts: a bijection onto the stored array, and no bank conflicts for ldmatrix or copies."""

from __future__ import annotations

import pytest

from compiler.ops.smem_layout import UNIT, TileLayout

WIDTHS = (8, 16, 32, 64, 128, 256, 24, 40, 48)


def group(layout: TileLayout, row: int, col: int) -> int:
    """The bank group (16-byte unit mod 8) holding element ``(row, col)``."""
    stored_row, stored_col = layout.index(row, col)
    pitch = layout.shape[1]
    return (stored_row * pitch + stored_col) // UNIT % 8


@pytest.mark.parametrize("cols", WIDTHS)
def test_every_element_has_its_own_place(cols: int) -> None:
    layout = TileLayout(rows=32, cols=cols)
    places = {layout.index(r, c) for r in range(32) for c in range(cols)}
    assert len(places) == 32 * cols
    assert all(0 <= r < layout.shape[0] and 0 <= c < layout.shape[1] for r, c in places)
    # A 16-byte unit stays contiguous, so cp.async and ldmatrix rows stay legal.
    for r in range(32):
        for c in range(0, cols, UNIT):
            row, col = layout.index(r, c)
            assert [layout.index(r, c + i) for i in range(UNIT)] == [(row, col + i) for i in range(UNIT)]


@pytest.mark.parametrize("cols", WIDTHS)
def test_ldmatrix_phases_are_conflict_free(cols: int) -> None:
    """An 8x8 matrix: one unit column over 8 consecutive rows starting at a multiple of 8."""
    layout = TileLayout(rows=64, cols=cols)
    for row0 in range(0, 64, 8):
        for col in range(0, cols, UNIT):
            assert len({group(layout, row0 + r, col) for r in range(8)}) == 8, (row0, col)


@pytest.mark.parametrize("cols", [c for c in WIDTHS if TileLayout(8, c).swizzled])
def test_copy_phases_of_swizzled_tiles_are_conflict_free(cols: int) -> None:
    """Eight threads copy eight consecutive logical 16-byte units (row-major over the tile)."""
    layout = TileLayout(rows=64, cols=cols)
    units = [(u * UNIT // cols, u * UNIT % cols) for u in range(64 * cols // UNIT)]
    for start in range(0, len(units), 8):
        assert len({group(layout, r, c) for r, c in units[start:start + 8]}) == 8


def test_padding_when_a_swizzle_would_leave_the_row() -> None:
    assert TileLayout(16, 48).shape == (16, 56) and not TileLayout(16, 48).swizzled
    assert TileLayout(16, 40).shape == (16, 40)  # five units: an odd pitch already
    assert TileLayout(16, 64).shape == (16, 64) and TileLayout(16, 64).swizzled
    with pytest.raises(ValueError, match="multiple of 8"):
        TileLayout(16, 12)
