"""The ``matmul`` operator: found by the registry, dispatching to a template per dtype, delegating the
workload's reference, inputs and counts to ``matmul_spec``."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from compiler.codegen import render_program
from compiler.cpu_device import detect_cpu
from compiler.device import DEVICES
from compiler.ops import get_operator, matmul_simt, operators, parse_spec
from compiler.ops.matmul import OPERATOR
from compiler.ops.matmul_spec import MatmulSpec, matmul_flops, matmul_min_bytes, matmul_reference
from compiler.space import schedule_values

SPEC = MatmulSpec(m=5, n=7, k=3, batch=2, layout_a="col")


def test_the_registry_finds_matmul() -> None:
    assert operators()["matmul"] is OPERATOR
    assert get_operator("matmul").spec_model is MatmulSpec
    spec = parse_spec({"op": "matmul", "m": 67, "n": 45, "k": 83, "batch": 3, "layout_a": "col"})
    assert spec == MatmulSpec(m=67, n=45, k=83, batch=3, layout_a="col")


def test_float32_dispatches_to_the_simt_template() -> None:
    assert OPERATOR.template_for(SPEC, "cuda") is matmul_simt
    space = OPERATOR.space(SPEC, DEVICES["h200"], 1)
    assert space.template == "matmul_simt"
    schedule = space.candidates()[0]
    # IR expressions overload ==, so programs are compared by what they render to
    assert render_program(OPERATOR.build(SPEC, schedule, "cuda")) == render_program(matmul_simt.build(SPEC, schedule))
    # schedules survive storage as plain values: the parameters rebuild the same schedule
    assert all(space.schedule(schedule_values(s)) == s for s in space.candidates())


def test_a_dtype_without_a_template_is_named() -> None:
    float32_only = dataclasses.replace(OPERATOR, templates={("cuda", "float32"): matmul_simt})
    spec = MatmulSpec(m=8, n=8, k=8, dtype="bfloat16")
    with pytest.raises(ValueError, match="no matmul template for dtype 'bfloat16' on target 'cuda'; "
                       "that target has dtypes float32"):
        float32_only.space(spec, DEVICES["h200"], 1)
    with pytest.raises(ValueError, match="bfloat16' on target 'cuda'"):
        float32_only.build(spec, None, "cuda")


def test_the_device_decides_the_template_target() -> None:
    cpu = detect_cpu()
    assert OPERATOR.space(SPEC, cpu, 1).template == "cpu_matmul"
    assert OPERATOR.space(SPEC, DEVICES["h200"], 1).template != "cpu_matmul"
    with pytest.raises(ValueError, match="no matmul template for dtype 'float16' on target 'cpu'"):
        OPERATOR.space(SPEC.model_copy(update={"dtype": "float16"}), cpu, 1)
    with pytest.raises(ValueError, match="on target 'cpu'; that target has dtypes float32"):
        dataclasses.replace(OPERATOR, templates={("cpu", "float32"): matmul_simt}).build(
            SPEC.model_copy(update={"dtype": "float16"}), None, "cpu")


def test_workload_side_delegates_to_the_spec_module() -> None:
    inputs = OPERATOR.inputs(SPEC, np.random.default_rng(3))
    assert inputs["a"].shape == (2, 3, 5) and inputs["b"].shape == (2, 3, 7)
    assert inputs["a"].dtype == np.float32 and np.unique(inputs["a"]).size > 20
    (out,) = OPERATOR.outputs(SPEC)
    assert (out.name, out.shape, out.dtype) == ("c", (2, 5, 7), "float32")
    reference = OPERATOR.reference(SPEC, inputs)["c"]
    expected = np.einsum("bkm,bkn->bmn", inputs["a"].astype(np.float64), inputs["b"].astype(np.float64))
    np.testing.assert_allclose(reference, expected, rtol=1e-12)
    np.testing.assert_array_equal(reference, matmul_reference(SPEC, inputs)["c"])
    assert OPERATOR.flops(SPEC) == matmul_flops(SPEC) == 2 * 2 * 5 * 7 * 3
    assert OPERATOR.min_bytes(SPEC) == matmul_min_bytes(SPEC)
