"""The CUDA templates' default schedules (what an untuned call and every search's first trial run): one
in every level-2 space, whatever the spec and device, and each passes its check on the emulator at an
awkward shape; and the tensor-core matmul space is narrowed by the problem."""

from __future__ import annotations

from typing import Any

import pytest

from compiler.backends import get_target
from compiler.device import DEVICES
from compiler.ops import get_operator, parse_spec
from compiler.space import Space
from search.trial import TrialStatus
from search.verify import check_schedules

SPECS: dict[str, dict[str, Any]] = {
    "matmul f32 512": {"op": "matmul", "m": 512, "n": 512, "k": 512},
    "matmul f32 tiny": {"op": "matmul", "m": 3, "n": 5, "k": 7},
    "matmul f32 col, odd": {"op": "matmul", "m": 100, "n": 30, "k": 33, "layout_a": "col", "batch": 2},
    "matmul f16 512": {"op": "matmul", "m": 512, "n": 512, "k": 512, "dtype": "float16"},
    "matmul bf16 tiny": {"op": "matmul", "m": 8, "n": 8, "k": 64, "dtype": "bfloat16"},
    "conv2d f32": {"op": "conv2d", "n": 1, "c": 64, "h": 56, "w": 56, "k": 64, "r": 3, "s": 3, "padding": 1},
    "conv2d f16 NHWC": {"op": "conv2d", "n": 2, "c": 3, "h": 17, "w": 19, "k": 5, "r": 3, "s": 3, "padding": 1,
                        "layout": "NHWC", "dtype": "float16"},
    "softmax": {"op": "softmax", "rows": 4096, "cols": 1000},
    "softmax odd f16": {"op": "softmax", "rows": 3, "cols": 100003, "dtype": "float16"},
    "reduce last axis": {"op": "reduce", "shape": [4096, 1000], "axis": 1, "kind": "sum"},
    "reduce 1-D": {"op": "reduce", "shape": [16_000_000], "axis": 0, "kind": "sum"},
    "reduce middle axis": {"op": "reduce", "shape": [64, 300, 77], "axis": 1, "kind": "max"},
}


def _space(data: dict[str, Any], device: str) -> Space[Any]:
    target = get_target("emu", gpu=DEVICES[device])
    return get_operator(data["op"]).space(parse_spec(data), target.device(), 2)


@pytest.mark.parametrize("device", ["h200", "a100"])
@pytest.mark.parametrize("name", SPECS)
def test_every_level2_space_has_a_valid_default(name: str, device: str) -> None:
    space = _space(SPECS[name], device)
    default = space.default_values()
    assert default is not None and space.is_valid(default)


def test_the_defaults_follow_the_problem() -> None:
    big, tiny = _space(SPECS["matmul f32 512"], "h200"), _space(SPECS["matmul f32 tiny"], "h200")
    assert big.schedule(big.default_values()).block_m == 128 > tiny.schedule(tiny.default_values()).block_m
    one = _space(SPECS["reduce 1-D"], "h200").default_values()
    many = _space(SPECS["reduce last axis"], "h200").default_values()
    assert one is not None and many is not None
    assert one["parts"] > 1 and many["parts"] == 1  # one output: its axis split among blocks
    long_row = _space(SPECS["softmax odd f16"], "h200").default_values()
    assert long_row is not None and long_row["cache"] == "stream"


def test_the_tensor_core_matmul_space_is_narrowed_by_the_problem() -> None:
    tiny, big = _space(SPECS["matmul bf16 tiny"], "h200"), _space(SPECS["matmul f16 512"], "h200")
    assert len(big.valid_values()) == 693 and len(tiny.valid_values()) == 186  # the README's figures
    assert {v["block_m"] for v in tiny.valid_values()} == {v["block_n"] for v in tiny.valid_values()} == {32, 64}
    assert "block tile within 64 x 64 (2x the padded problem)" in [c.name for c in tiny.constraints]
    # The implicit GEMM of a convolution too: a 5x5 image's 9 output pixels take no 128-row tile.
    small = _space({"op": "conv2d", "n": 1, "c": 16, "h": 5, "w": 5, "k": 8, "r": 3, "s": 3, "dtype": "float16"},
                   "h200")
    assert {v["block_m"] for v in small.valid_values()} == {v["block_n"] for v in small.valid_values()} == {32, 64}
    assert small.schedule(small.default_values()).block_m == 64


AWKWARD: dict[str, dict[str, Any]] = {
    "matmul f32": SPECS["matmul f32 col, odd"],
    "matmul f16": {"op": "matmul", "m": 70, "n": 40, "k": 72, "dtype": "float16"},
    "conv2d f32": {"op": "conv2d", "n": 2, "c": 3, "h": 17, "w": 19, "k": 5, "r": 3, "s": 3, "stride": 2,
                   "padding": 1},
    "conv2d f16": SPECS["conv2d f16 NHWC"],
    "softmax": {"op": "softmax", "rows": 5, "cols": 301},
    "reduce last axis": {"op": "reduce", "shape": [6, 1003], "axis": 1, "kind": "sum"},
    "reduce 1-D in parts": {"op": "reduce", "shape": [40_000], "axis": 0, "kind": "max"},
    "reduce middle axis": {"op": "reduce", "shape": [3, 50, 7], "axis": 1, "kind": "mean"},
}


@pytest.mark.parametrize("name", AWKWARD)
def test_the_default_passes_its_check_on_the_emulator(name: str) -> None:
    data = AWKWARD[name]
    target = get_target("emu", gpu=DEVICES["h200"])
    space = get_operator(data["op"]).space(parse_spec(data), target.device(), 2)
    default = space.schedule(space.default_values())
    if name == "reduce 1-D in parts":
        assert default.parts > 1
    [result] = check_schedules(get_operator(data["op"]), parse_spec(data), [default], target=target, seed=3)
    assert result.status is TrialStatus.OK, (result.status, result.message)
