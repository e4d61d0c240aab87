"""Every operator serves the cpu target from the same spec JSON: ``warpmap check --target cpu`` passes its
level-1 space at awkward shapes, and a dtype the cpu templates do not take is refused in one line."""

from __future__ import annotations

import pytest

from service.cli import main

SPECS = {
    "matmul": '{"op": "matmul", "m": 13, "n": 1, "k": 37, "batch": 3, "layout_b": "col"}',
    "conv2d": '{"op": "conv2d", "n": 1, "c": 3, "h": 7, "w": 5, "k": 2, "r": 3, "s": 3, "padding": [1, 1],'
              ' "stride": [2, 1], "layout": "NHWC"}',
    "softmax": '{"op": "softmax", "rows": 5, "cols": 131}',
    "reduce": '{"op": "reduce", "shape": [3, 17, 5], "axis": 1, "kind": "max"}',
}


@pytest.mark.parametrize("op", sorted(SPECS))
def test_check_on_the_cpu_passes_each_operator(op: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--target", "cpu", "--spec", SPECS[op]]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].startswith("space ") and out[1].endswith("on cpu")
    assert out[-1].endswith(" failed, 0 pruned") and " 0 failed" in out[-1] and not out[-1].startswith("0 passed")


@pytest.mark.parametrize("op", sorted(SPECS))
def test_16_bit_inputs_are_refused_on_the_cpu(op: str, capsys: pytest.CaptureFixture[str]) -> None:
    spec = SPECS[op][:-1] + ', "dtype": "float16"}'
    assert main(["check", "--target", "cpu", "--spec", spec]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"warpmap check: error: no {op} template for dtype 'float16' on target 'cpu'; "
                   "that target has dtypes float32")


#: The extents each test spec grows by (conv2d's image, not its batch: see the README on large batches).
SCALED = {"matmul": ("m", "n", "k"), "conv2d": ("c", "h", "w"), "softmax": ("rows", "cols"), "reduce": ()}


@pytest.mark.parametrize("op", sorted(SPECS))
@pytest.mark.parametrize("scale", [1, 3, 40])
def test_the_tuning_space_holds_its_default_schedule(op: str, scale: int) -> None:
    """A search tries the template's default first: it must be a valid point of the level-2 space, at
    small, odd and large shapes."""
    import json

    from compiler.backends import get_target
    from compiler.ops import get_operator, parse_spec

    data = json.loads(SPECS[op])
    for name in SCALED[op]:
        data[name] = data[name] * scale
    spec = parse_spec(data)
    space = get_operator(op).space(spec, get_target("cpu").device(), 2)
    assert space.default is not None and space.values_violation(space.default) is None
