"""The cpu templates' index width: 32-bit offsets where they provably fit, 64-bit past 2**31 elements.

Specs whose output passes 2**31 elements are built, rendered and compiled by the host compiler (nothing
is allocated: such tensors do not fit a test); before the C offsets were computed in C's own index type
the matmul and conv2d templates refused to build them ("integer literal ... does not fit i32"). The
64-bit paths are run by forcing 64-bit offsets on small specs (the same code, narrower values) and
checking them against numpy as a tuning does.
"""

from __future__ import annotations

import re

import pytest

import compiler.ir.buffer
from compiler.backends import cpu, get_target
from compiler.codegen.cpp import render_host
from compiler.ir.types import i64
from compiler.ops import get_operator
from compiler.ops.conv2d_spec import Conv2dSpec
from compiler.ops.matmul_spec import MatmulSpec
from compiler.ops.reduce import ReduceSpec
from compiler.ops.softmax import SoftmaxSpec
from search.trial import TrialStatus
from search.verify import check_schedule

#: A spec per template and layout whose output (C, or the image) passes 2**31 elements.
LARGE = {
    "matmul": MatmulSpec(m=50000, n=50000, k=16),
    "matmul col-major, batched": MatmulSpec(m=20000, n=20000, k=16, batch=7, layout_a="col", layout_b="col"),
    "conv2d NCHW": Conv2dSpec(n=1, c=4, h=30000, w=30000, k=4, r=3, s=3),
    "conv2d NHWC": Conv2dSpec(n=3, c=4, h=17000, w=17000, k=4, r=3, s=3, layout="NHWC"),
    "softmax": SoftmaxSpec(rows=50000, cols=50000),
    "reduce": ReduceSpec(shape=[50000, 50000], axis=0, kind="sum"),
}
#: Small specs of each (edges in every dimension) run with every offset forced to 64 bits.
SMALL = {
    "matmul": MatmulSpec(m=37, n=53, k=29, batch=2),
    "matmul col-major": MatmulSpec(m=37, n=53, k=29, batch=2, layout_a="col", layout_b="col"),
    "conv2d NCHW": Conv2dSpec(n=2, c=3, h=9, w=7, k=5, r=3, s=2, padding=(1, 1)),
    "conv2d NHWC": Conv2dSpec(n=2, c=3, h=9, w=7, k=5, r=3, s=2, padding=(1, 1), layout="NHWC"),
    "softmax": SoftmaxSpec(rows=5, cols=300),
    "reduce": ReduceSpec(shape=[3, 70, 5], axis=1, kind="sum"),
}


def _wide(source: str) -> list[str]:
    """The lines that compute in 64 bits, but for the host dialect's own block loop and chunk size."""
    return [line for line in source.splitlines() if "long long" in line and "wm_block" not in line
            and "wm_chunk" not in line]


def _schedules(spec, count: int):
    operator = get_operator(spec.op)
    return operator, operator.space(spec, get_target("cpu").device(), 2).sample(count, 0)


@pytest.mark.parametrize("label", sorted(LARGE))
def test_outputs_past_2_31_elements_build_with_64_bit_offsets_and_compile(label: str, tmp_path) -> None:
    spec = LARGE[label]
    operator, schedules = _schedules(spec, 4)
    for number, schedule in enumerate(schedules):
        launches = operator.build(spec, schedule, "cpu").launches
        sources = [render_host(launch.kernel) for launch in launches]
        assert any(_wide(s.source) for s in sources), (label, schedule)
        for source in sources:
            # No integer literal is spelled past what its type holds.
            for digits, suffix in re.findall(r"(?<![\w.])(\d+)(LL|u)?\b", source.source):
                assert int(digits) < {"": 2**31, "u": 2**32, "LL": 2**63}[suffix], (label, digits)
        if number == 0:
            config = cpu.CpuConfig(cache_dir=tmp_path)
            for source in sources:
                cpu.compile(source, config)  # raises with the compiler's message on an error


@pytest.mark.parametrize("label", sorted(SMALL))
def test_small_specs_keep_32_bit_offsets(label: str) -> None:
    spec = SMALL[label]
    operator, schedules = _schedules(spec, 3)
    for schedule in schedules:
        for launch in operator.build(spec, schedule, "cpu").launches:
            assert not _wide(render_host(launch.kernel).source), (label, schedule)


@pytest.mark.parametrize("label", sorted(SMALL))
def test_forced_64_bit_offsets_compute_the_reference(label: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compiler.ir.buffer, "index_type_for", lambda *args, **kwargs: i64)
    spec = SMALL[label]
    operator, schedules = _schedules(spec, 3)
    for schedule in schedules:
        sources = [render_host(launch.kernel).source for launch in operator.build(spec, schedule, "cpu").launches]
        assert any(_wide(source) for source in sources), (label, schedule)
        result = check_schedule(operator, spec, schedule, target=get_target("cpu"), seed=2)
        assert result.status is TrialStatus.OK, (label, schedule, result.message)


def test_a_tiles_rows_step_c_in_64_bits_when_they_pass_2_31() -> None:
    # NCHW writes C with a row stride of the output's pixels, 29998**2 here: eight rows of a register
    # tile already pass 2**31, so the row times the stride must be formed in 64 bits, not wrap in 32.
    spec = LARGE["conv2d NCHW"]
    pixels = spec.p * spec.q
    assert 2 * pixels < 2**31 < 3 * pixels
    operator, schedules = _schedules(spec, 4)
    for schedule in schedules:
        source = "".join(render_host(launch.kernel).source for launch in operator.build(spec, schedule, "cpu").launches)
        assert f"* {pixels}LL" in source
        assert not re.search(rf"\* {pixels}\b(?!LL)", source), schedule
