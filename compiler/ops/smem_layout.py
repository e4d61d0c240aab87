"""Shared-memory layouts of 16-bit tiles that keep ldmatrix and 16-byte cp.async free of bank conflicts.

Shared memory has 32 four-byte banks, so a 128-byte line holds 8 sixteen-byte *units*, one per bank
group. ldmatrix reads an 8 x 8 matrix as 8 rows of one unit each (one phase); a 16-byte cp.async
phase is 8 threads writing 8 units. Both are conflict-free when the 8 units of a phase land in 8
distinct groups (unit index mod 8).

A tile row of ``cols`` elements holds ``U = cols / 8`` units; ``8 / U`` rows share a line when U < 8.
The **swizzled** layout (U a power of two) keeps rows unpadded and stores logical unit ``c`` of row ``r``
at unit ``c ^ key(r)`` of the same row, ``key(r) = (r // max(1, 8 // U)) % min(U, 8)``:

- ldmatrix reads one column of units over 8 consecutive rows (starting at a multiple of 8). With
  U >= 8 each row is a line and ``c ^ (r % 8)`` takes 8 distinct values. With U = 4 the 8 rows are 4
  lines of two rows; the two rows of a line sit in different halves and ``c ^ (r // 2 % 4)`` differs
  between lines. With U = 2 the 8 rows are 2 lines of four rows, and ``key`` flips the low bit.
- A cp.async phase writes 8 consecutive logical units: one line, whose units XOR permutes in place.

Example, ``cols = 32`` (U = 4): rows 0..7 at logical unit 1 go to units 1, 5, 0, 4, 3, 7, 2, 6 of
their line (``r % 2 * 4 + (1 ^ r // 2)``), all distinct.

Other widths fall back to a **padded** layout: a row with an even number of units grows by one unit
(8 elements), so the pitch is an odd number of units and 8 consecutive rows start in 8 distinct groups
(ldmatrix is conflict-free; copies of narrow rows may still see two-way conflicts).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: Elements of a 16-byte unit (16-bit elements).
UNIT = 8


@dataclass(frozen=True)
class TileLayout:
    """Where element ``(row, col)`` of a ``rows x cols`` tile of 16-bit elements is stored.

    >>> layout = TileLayout(rows=64, cols=32)
    >>> layout.swizzled, layout.shape, [layout.index(r, 8)[1] // 8 for r in range(8)]
    (True, (64, 32), [1, 1, 0, 0, 3, 3, 2, 2])
    """

    rows: int
    cols: int

    def __post_init__(self) -> None:
        if self.rows < 1 or self.cols < UNIT or self.cols % UNIT:
            raise ValueError(f"tile {self.rows} x {self.cols}: columns must be a positive multiple of {UNIT}")

    @property
    def units(self) -> int:
        return self.cols // UNIT

    @property
    def swizzled(self) -> bool:
        return self.units & (self.units - 1) == 0 and self.units >= 2

    @property
    def shape(self) -> tuple[int, int]:
        """The stored array's shape (padded layouts are one unit wider)."""
        padded = not self.swizzled and self.units % 2 == 0
        return (self.rows, self.cols + UNIT) if padded else (self.rows, self.cols)

    def key(self, row: Any) -> Any:
        """The XOR applied to the unit index of ``row`` (swizzled layouts)."""
        return row // max(1, UNIT // self.units) % min(self.units, UNIT)

    def index(self, row: Any, col: Any) -> tuple[Any, Any]:
        """Stored ``(row, col)`` of logical element ``(row, col)``; ints or kernel expressions.

        A run of up to 8 elements starting at a multiple of its length stays contiguous.
        """
        if not self.swizzled:
            return row, col
        return row, (col // UNIT ^ self.key(row)) * UNIT + col % UNIT
