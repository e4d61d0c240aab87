"""Plain-text tables for the command line: aligned columns, numbers to the right."""

from __future__ import annotations

from collections.abc import Sequence


def format_value(value: object) -> str:
    """Tuples read as shapes (``4x2``), floats briefly, everything else as text."""
    if isinstance(value, tuple):
        return "x".join(format_value(v) for v in value)
    if isinstance(value, float):
        return f"{value:.2e}" if value and (abs(value) < 1e-2 or abs(value) >= 1e5) else f"{value:.3g}"
    return str(value)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def format_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """``rows`` under ``header`` with a rule, each column as wide as its widest cell.

    Numbers align right. The last column is free text: never padded, its rule as wide as its header.

    >>> print(format_table(["name", "size", "note"], [["a", 12, "first"], ["bcd", 3.5, ""]]))
    name  size  note
    ----  ----  ----
    a       12  first
    bcd    3.5
    """
    cells = [[format_value(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(header)]
    widths[-1] = len(header[-1])

    def line(row: Sequence[str]) -> str:
        parts = [c.rjust(w) if _is_number(c) else c.ljust(w) for c, w in zip(row[:-1], widths, strict=False)]
        return "  ".join([*parts, row[-1]]).rstrip()

    return "\n".join([line(list(header)), "  ".join("-" * w for w in widths), *(line(r) for r in cells)])
