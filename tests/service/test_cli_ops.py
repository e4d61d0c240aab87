"""``warpmap ops``: the table comes from the spec models, and its examples are specs they accept."""

from __future__ import annotations

import re

import pytest

from compiler.ops import operators, parse_spec
from service.cli import main
from service.cli.ops import example_spec, schema_of

Capture = pytest.CaptureFixture[str]


def test_every_operator_and_every_field_is_listed(capsys: Capture) -> None:
    assert main(["ops"]) == 0
    out = capsys.readouterr().out
    for name, operator in operators().items():
        assert re.search(rf"^{name}$", out, re.MULTILINE), name
        for field in operator.spec_model.model_fields:
            if field != "op":
                assert re.search(rf"^  {field}  ", out, re.MULTILINE), (name, field)


def test_bounds_types_and_defaults_come_from_the_schema(capsys: Capture) -> None:
    assert main(["ops", "matmul"]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines() if line.startswith("  ")}
    assert rows["m"].split() == ["m", "integer", "1..16777216", "required"]
    assert rows["batch"].split() == ["batch", "integer", "1..65535", "1"]
    assert rows["layout_a"].split() == ["layout_a", "row|col", "row"]


def test_bracketed_types_and_defaults_are_shown_as_they_are(capsys: Capture) -> None:
    assert main(["ops", "conv2d"]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines() if line.startswith("  ")}
    assert rows["padding"].split() == ["padding", "integer", "or", "[integer,", "integer]", "[0,", "0]"]
    assert rows["stride"].split()[-2:] == ["[1,", "1]"]


@pytest.mark.parametrize("name", sorted(operators()))
def test_each_example_spec_validates(name: str) -> None:
    spec = parse_spec(example_spec(name, schema_of(name)))
    assert spec.op == name


def test_one_operator_in_detail(capsys: Capture) -> None:
    assert main(["ops", "softmax"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("softmax\n") and "reduce" not in out
    assert "example: warpmap check --spec '{\"op\": \"softmax\"" in out


def test_an_unknown_operator_is_exit_2(capsys: Capture) -> None:
    assert main(["ops", "bogus"]) == 2
    assert "unknown operator 'bogus'; known operators: conv2d, matmul" in capsys.readouterr().err


def test_check_help_points_to_ops(capsys: Capture) -> None:
    with pytest.raises(SystemExit):
        main(["check", "--help"])
    assert "warpmap ops" in capsys.readouterr().out
