"""Index width is part of every template's contract: 32-bit offsets where they provably fit, 64-bit past that.

Specs whose tensors pass 2**31 elements are rendered and compiled with NVRTC (nothing is allocated);
small specs must keep plain ``int`` offsets. Tensors that big do not fit the emulator on a CI machine,
so the 64-bit paths are run there by forcing 64-bit offsets on small specs (the same code, narrower
values) and by a kernel whose 64-bit index values pass 2**31.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import compiler.ir.buffer
from compiler.backends import emu, get_target
from compiler.backends.nvrtc import compile_source
from compiler.codegen import render_cuda, render_program
from compiler.codegen.names import CodegenError
from compiler.device import DEVICES
from compiler.ir import lower
from compiler.ir.buffer import index_type_for, largest_offset
from compiler.ir.evaluate import evaluate_expr
from compiler.ir.expr import Const
from compiler.ir.intrinsics import cast
from compiler.ir.lang import kernel, threadIdx
from compiler.ir.types import i32, i64, u32
from compiler.ops import get_operator
from compiler.ops.conv2d_spec import Conv2dSpec
from compiler.ops.matmul_spec import MatmulSpec
from compiler.ops.reduce import ReduceSpec
from compiler.ops.softmax import SoftmaxSpec
from search.trial import TrialStatus
from search.verify import check_schedule

H200 = DEVICES["h200"]

#: Specs with a tensor past 2**31 elements (the issue's m = k = 65536 f16 matmul first), one per template.
LARGE = {
    "matmul_mma": MatmulSpec(m=65536, n=128, k=65536, dtype="float16"),
    "matmul_simt": MatmulSpec(m=65536, n=8, k=32768),
    "conv2d_simt": Conv2dSpec(n=129, c=64, h=512, w=512, k=8, r=1, s=1),
    "conv2d_mma": Conv2dSpec(n=129, c=64, h=512, w=512, k=8, r=1, s=1, layout="NHWC", dtype="float16"),
    "reduce": ReduceSpec(shape=[4, 1 << 30], axis=1, kind="sum", dtype="float16"),
    "softmax": SoftmaxSpec(rows=1 << 16, cols=1 << 16, dtype="float16"),
}
SMALL = {
    "matmul_mma": MatmulSpec(m=512, n=512, k=512, batch=4, dtype="float16"),
    "matmul_simt": MatmulSpec(m=512, n=512, k=512, batch=4),
    "conv2d_simt": Conv2dSpec(n=8, c=64, h=56, w=56, k=64, r=3, s=3, padding=(1, 1)),
    "conv2d_mma": Conv2dSpec(n=8, c=64, h=56, w=56, k=64, r=3, s=3, padding=(1, 1), layout="NHWC",
                             dtype="float16"),
    "reduce": ReduceSpec(shape=[64, 1 << 20], axis=1, kind="sum"),
    "softmax": SoftmaxSpec(rows=4096, cols=4096),
}
OPERATORS = {"matmul_mma": "matmul", "matmul_simt": "matmul", "conv2d_simt": "conv2d", "conv2d_mma": "conv2d",
             "reduce": "reduce", "softmax": "softmax"}


def _source(template: str, spec):
    operator = get_operator(OPERATORS[template])
    schedule = operator.space(spec, H200, 1).candidates()[0]
    return render_program(operator.build(spec, schedule, "cuda"))[0]


@pytest.mark.parametrize("template", sorted(LARGE))
def test_offsets_past_2_31_use_64_bit_arithmetic_and_compile(template: str) -> None:
    source = _source(template, LARGE[template])
    assert "long long" in source.source, template
    # No integer literal is spelled past what its type holds.
    for literal in re.findall(r"(?<![\w.])(\d+)(LL|u)?\b", source.source):
        limit = {"": 2**31, "u": 2**32, "LL": 2**63}[literal[1]]
        assert int(literal[0]) < limit, (template, literal)
    result = compile_source(source, "sm_90")
    assert result.ok, result.error


@pytest.mark.parametrize("template", sorted(SMALL))
def test_small_specs_keep_32_bit_offsets(template: str) -> None:
    assert "long long" not in _source(template, SMALL[template]).source


def test_the_issue_spec_offsets_row_by_k_in_64_bits() -> None:
    code = _source("matmul_mma", LARGE["matmul_mma"]).source
    assert "* 65536LL" in code and not re.search(r"[^L] \* 65536\b(?!LL)", code)


def test_specs_refused_for_32_bit_offsets_are_served_now() -> None:
    # x of 2**31 elements was refused; its last offset, 2**31 - 1, fits an int. One more image does not.
    spec = Conv2dSpec(n=2, c=1024, h=1024, w=1024, k=4, r=3, s=3, dtype="float16")
    assert "long long" not in _source("conv2d_mma", spec).source
    assert "long long" in _source("conv2d_mma", spec.model_copy(update={"n": 3})).source
    assert "long long" in _source("reduce", ReduceSpec(shape=[1 << 16, 1 << 15], axis=0, kind="sum")).source


def test_index_type_follows_the_largest_offset() -> None:
    assert largest_offset((2, 3), (3, 1), overshoot=0) == 5
    # The last element of a 2**15 x 2**16 tensor is at 2**31 - 1: an int holds it, one more row does not.
    assert index_type_for((1 << 15, 1 << 16), (1 << 16, 1), overshoot=0) == i32
    assert index_type_for(((1 << 15) + 1, 1 << 16), (1 << 16, 1), overshoot=0) == i64
    # A template that does not state it stays in bounds gets slack past every edge.
    assert index_type_for((1, 1 << 20), (1 << 20, 1)) == i64


# -- the renderer refuses literals their type cannot hold ------------------------------------------

def _render_store(value: Const):
    with kernel("lit", block=1) as k:
        out = k.tensor("out", value.type, (1,))
        out[0] = value
    return render_cuda(lower(k.kernel))


def test_an_out_of_range_literal_is_a_codegen_error() -> None:
    with pytest.raises(CodegenError, match=r"2147483648 does not fit i32"):
        _render_store(Const(2**31, i32))
    with pytest.raises(CodegenError, match=r"-1 does not fit u32"):
        _render_store(Const(-1, u32))
    with kernel("wide", block=1) as k:
        out = k.tensor("out", i32, (1,))
        out[0] = cast(cast(threadIdx.x, i64) + Const(2**31, i64), i32)
    assert "2147483648LL" in render_cuda(lower(k.kernel)).source
    assert "(-2147483647 - 1)" in _render_store(Const(-(2**31), i32)).source


def test_an_out_of_range_python_literal_is_refused_when_built() -> None:
    with kernel("lit", block=1) as k:
        out = k.tensor("out", i32, (1,))
        with pytest.raises(TypeError, match="does not fit i32"):
            out[0] = threadIdx.x * 2**31


# -- the 64-bit paths run on the emulator ----------------------------------------------------------

def test_64_bit_index_values_past_2_31_on_the_emulator() -> None:
    threads = 64
    with kernel("wide", block=threads) as k:
        out = k.tensor("out", i32, (4, threads))
        t = cast(threadIdx.x, i64)
        exprs = [
            (t * 3_000_000_007 + 5) // 65536 % 1_000_003,
            (t + 1) * (1 << 33) // ((1 << 31) + 7),
            (t * 65536 + 65535) * 65536 % 999_983 - (t << 40) // (1 << 39),
            (-(t * 2_147_483_648) - 9) // 4_096 % 77_777,
        ]
        for row, expr in enumerate(exprs):
            out[row, threadIdx.x] = cast(expr, i32)
    result = np.full((4, threads), -999, dtype=np.int32)
    emu.run(render_cuda(lower(k.kernel)), [result])
    expected = [[evaluate_expr(cast(e, i32), {}, {"threadIdx.x": x}) for x in range(threads)] for e in exprs]
    assert result.tolist() == expected


@pytest.mark.parametrize("template", ["matmul_mma", "matmul_simt", "conv2d_simt", "conv2d_mma", "reduce",
                                      "softmax"])
def test_templates_with_forced_64_bit_offsets_compute_the_reference(template: str, monkeypatch) -> None:
    specs = {
        "matmul_mma": MatmulSpec(m=40, n=24, k=48, batch=2, dtype="float16"),
        "matmul_simt": MatmulSpec(m=37, n=21, k=19, batch=2, layout_a="col"),
        "conv2d_simt": Conv2dSpec(n=2, c=3, h=9, w=7, k=5, r=3, s=2, padding=(1, 1)),
        "conv2d_mma": Conv2dSpec(n=2, c=8, h=6, w=6, k=16, r=3, s=3, padding=(1, 1), layout="NHWC",
                                 dtype="float16"),
        "reduce": ReduceSpec(shape=[3, 70, 5], axis=1, kind="sum"),
        "softmax": SoftmaxSpec(rows=5, cols=300),
    }
    monkeypatch.setattr(compiler.ir.buffer, "index_type_for", lambda *args, **kwargs: i64)
    spec = specs[template]
    operator = get_operator(OPERATORS[template])
    schedule = operator.space(spec, H200, 1).candidates()[0]
    assert "long long" in render_program(operator.build(spec, schedule, "cuda"))[0].source
    result = check_schedule(operator, spec, schedule, target=get_target("emu", gpu=H200), seed=1)
    assert result.status is TrialStatus.OK, result.message
