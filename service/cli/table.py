"""Tables for the command line, drawn by rich: aligned columns, numbers to the right.

On a terminal rich fits the table to its width (folding the last column, the free text) and may use
colour; anywhere else (a log, a pipe, a test) the table is plain text: no colour, no escape codes, no
wrapping (lines as long as their cells), no trailing spaces, a rule of ASCII dashes under the header.
``format_table`` gives that plain text as a string.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Sequence
from typing import TextIO

from rich import box
from rich.console import Console
from rich.table import Table

#: A header, one rule of dashes under it (one per column), nothing else: reads like a plain table.
HEADER_RULE = box.Box("    \n    \n -  \n    \n    \n    \n    \n    \n", ascii=True)
#: How wide a table may be when nothing sets a width (a log): wide enough never to fold a line.
_UNBOUNDED = 100_000


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


def rich_table(header: Sequence[str], rows: Sequence[Sequence[object]], *, title: str | None = None) -> Table:
    """``rows`` under ``header`` as a rich table: a column of numbers (``-`` for none) aligns right; the
    last column, the only one that may fold on a narrow terminal, is free text unless all of it is
    numbers."""
    cells = [[format_value(v) for v in row] for row in rows]
    table = Table(box=HEADER_RULE, show_edge=False, pad_edge=False, collapse_padding=True, highlight=False, title=title,
                  title_justify="left")
    last = len(header) - 1
    for index, name in enumerate(header):
        column = [row[index] for row in cells]
        numeric = any(_is_number(c) for c in column) and all(
            _is_number(c) or c in (("", "-") if index < last else ()) for c in column)
        table.add_column(name, justify="right" if numeric else "left", no_wrap=index < last,
                         overflow="fold")
    for row in cells:
        table.add_row(*row)
    return table


def render(table: Table, stream: TextIO) -> str:
    """What :func:`print_table` writes to ``stream`` (without the final newline). Cells are data, never
    rich markup: "[integer, integer]" or "[Errno 2]" in a cell is printed as it is."""
    if stream.isatty():
        console = Console(file=stream, highlight=False, emoji=False, markup=False)
        with console.capture() as captured:
            console.print(table)
        return captured.get().rstrip("\n")
    console = Console(file=stream, width=_UNBOUNDED, color_system=None, no_color=True, highlight=False,
                      emoji=False, markup=False, force_terminal=False)
    with console.capture() as captured:
        console.print(table)
    return "\n".join(line.rstrip() for line in captured.get().splitlines())


def print_table(header: Sequence[str], rows: Sequence[Sequence[object]], *, title: str | None = None,
                file: TextIO | None = None) -> None:
    """Print ``rows`` under ``header`` (see :func:`rich_table`) to ``file`` (standard output)."""
    stream = file if file is not None else sys.stdout
    print(render(rich_table(header, rows, title=title), stream), file=stream)


def format_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """``rows`` under ``header`` as plain text, as :func:`print_table` writes them to a log (for text
    that is indented or embedded further).

    >>> print(format_table(["name", "size", "note"], [["a", 12, "first"], ["bcd", 3.5, ""]]))
    name  size  note
    ----- ----- -----
    a       12  first
    bcd    3.5
    """
    return render(rich_table(header, rows), io.StringIO())
