import io

from service.cli.table import format_table, format_value, print_table


def test_values_read_as_shapes_and_short_numbers():
    assert format_value((4, 2)) == "4x2"
    assert format_value(1.6498e-07) == "1.65e-07"
    assert format_value(0.5) == "0.5"
    assert format_value("sm_90") == "sm_90"


def test_columns_align_and_the_last_is_free_text():
    text = format_table(["#", "tile", "note"], [[0, (64, 128), "pass"], [10, (8, 8), "spills 4 bytes"]])
    assert text.splitlines() == [
        " #  tile    note",
        "--- ------- --------------",
        " 0  64x128  pass",
        "10  8x8     spills 4 bytes",
    ]


def test_a_last_column_of_numbers_aligns_right():
    text = format_table(["#", "rows"], [[0, 1], [1, 32]])
    assert text.splitlines() == ["#  rows", "-- ----", "0     1", "1    32"]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_rich_tables_are_plain_text_in_a_log() -> None:
    log = io.StringIO()
    print_table(["#", "tile", "rel_err", "note"], [[0, (64, 128), 1.2e-7, "pass"],
                                                   [10, (8, 8), "-", "spills 4 bytes " * 20]], file=log)
    lines = log.getvalue().splitlines()
    assert lines[0] == " #  tile     rel_err  note"
    assert lines[1].split() == ["---", "-------", "---------", "----" + "-" * 296]
    assert lines[2] == " 0  64x128  1.20e-07  pass"
    assert lines[3].startswith("10  8x8            -  spills 4 bytes") and len(lines) == 4  # never folded
    assert "\x1b" not in log.getvalue()


def test_rich_tables_use_the_terminal() -> None:
    terminal = _Terminal()
    print_table(["name", "size"], [["a", 12]], file=terminal)
    assert "\x1b[" in terminal.getvalue() and "name" in terminal.getvalue()


def test_brackets_in_a_cell_are_text_not_markup() -> None:
    rows = [["padding", "[integer, integer]"], ["error", "[Errno 2] No such file"], ["style", "[bold]x[/bold]"]]
    lines = format_table(["field", "text"], rows).splitlines()
    assert lines[2:] == ["padding  [integer, integer]", "error    [Errno 2] No such file", "style    [bold]x[/bold]"]
