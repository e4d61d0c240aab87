from service.cli.table import format_table, format_value


def test_values_read_as_shapes_and_short_numbers():
    assert format_value((4, 2)) == "4x2"
    assert format_value(1.6498e-07) == "1.65e-07"
    assert format_value(0.5) == "0.5"
    assert format_value("sm_90") == "sm_90"


def test_columns_align_and_the_last_is_free_text():
    text = format_table(["#", "tile", "note"], [[0, (64, 128), "pass"], [10, (8, 8), "spills 4 bytes"]])
    assert text.splitlines() == [
        "#   tile    note",
        "--  ------  ----",
        " 0  64x128  pass",
        "10  8x8     spills 4 bytes",
    ]
