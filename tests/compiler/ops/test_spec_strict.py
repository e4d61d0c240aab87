"""Specs are strict: the JSON a client sends is taken as typed, never coerced (they are API request bodies).

Parsed through :func:`compiler.ops.parse_spec`, the entry point of ``warpmap check --spec``, from the
dict ``json.loads`` gives, and through the models' own JSON parsing; every error names its field.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from compiler.ops import get_operator, parse_spec

#: One valid spec per operator; JSON lists stand for the tuple fields.
VALID: dict[str, dict[str, Any]] = {
    "matmul": {"op": "matmul", "m": 16, "n": 8, "k": 4, "batch": 2},
    "conv2d": {"op": "conv2d", "n": 1, "c": 3, "h": 8, "w": 8, "k": 4, "r": 3, "s": 3, "stride": [2, 1],
               "padding": [1, 1], "dilation": [1, 1]},
    "softmax": {"op": "softmax", "rows": 4, "cols": 33},
    "reduce": {"op": "reduce", "shape": [4, 5, 6], "axis": -1, "kind": "sum"},
}

#: (operator, field path, bad value): an int field given a bool, a float or a string, a tuple entry likewise.
BAD: list[tuple[str, tuple[str | int, ...], Any]] = [
    *[("matmul", ("k",), value) for value in (True, 3.0, "3", None)],
    ("matmul", ("batch",), False),
    ("matmul", ("m",), 16.5),
    ("conv2d", ("c",), True),
    ("conv2d", ("stride", 0), True),
    ("conv2d", ("padding", 1), 1.0),
    ("conv2d", ("dilation", 0), "1"),
    ("softmax", ("rows",), True),
    ("softmax", ("cols",), "33"),
    ("reduce", ("axis",), True),
    ("reduce", ("axis",), 2.0),
    ("reduce", ("shape", 1), True),
    ("reduce", ("shape", 0), 4.0),
    ("reduce", ("kind",), 1),
    ("matmul", ("dtype",), 1),
]


def _with(data: dict[str, Any], path: tuple[str | int, ...], value: Any) -> dict[str, Any]:
    copy = json.loads(json.dumps(data))
    target = copy
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    return copy


@pytest.mark.parametrize("op", sorted(VALID))
def test_valid_json_specs_parse_with_lists_for_tuples(op: str) -> None:
    text = json.dumps(VALID[op])
    spec = parse_spec(json.loads(text))
    assert spec == get_operator(op).spec_model.model_validate_json(text)
    assert json.loads(spec.canonical_json())["op"] == op


@pytest.mark.parametrize(("op", "path", "value"), BAD)
def test_a_value_of_the_wrong_json_type_is_refused_naming_its_field(op: str, path: tuple[str | int, ...],
                                                                   value: Any) -> None:
    text = json.dumps(_with(VALID[op], path, value))
    for parse in (lambda: parse_spec(json.loads(text)),
                  lambda: get_operator(op).spec_model.model_validate_json(text)):
        with pytest.raises(ValidationError) as raised:
            parse()
        assert path in [tuple(error["loc"]) for error in raised.value.errors()], raised.value.errors()


def test_the_cli_names_the_field_of_a_bool_given_for_an_int(capsys: pytest.CaptureFixture[str]) -> None:
    from service.cli import main

    assert main(["check", "--spec", '{"op":"matmul","m":4,"n":4,"k":true}']) == 2
    assert "invalid spec: k: Input should be a valid integer" in capsys.readouterr().err
