import numpy as np
import pytest
from pydantic import ValidationError

from compiler.numeric import from_storage
from compiler.ops.matmul_spec import (
    MatmulSpec,
    matmul_flops,
    matmul_inputs,
    matmul_min_bytes,
    matmul_reference,
)


@pytest.mark.parametrize("layout_a", ["row", "col"])
@pytest.mark.parametrize("layout_b", ["row", "col"])
def test_reference_honours_layouts(layout_a, layout_b):
    spec = MatmulSpec(m=5, n=7, k=3, batch=2, layout_a=layout_a, layout_b=layout_b)
    inputs = matmul_inputs(spec, np.random.default_rng(1))
    assert inputs["a"].shape == spec.a_shape and inputs["b"].shape == spec.b_shape
    a = inputs["a"].astype(np.float64)
    b = inputs["b"].astype(np.float64)
    for batch in range(2):
        lhs = a[batch] if layout_a == "row" else a[batch].T
        rhs = b[batch] if layout_b == "row" else b[batch].T
        expected = [[sum(lhs[i, p] * rhs[p, j] for p in range(3)) for j in range(7)] for i in range(5)]
        np.testing.assert_allclose(matmul_reference(spec, inputs)["c"][batch], expected, rtol=1e-12)


def test_bfloat16_inputs_are_bit_patterns_of_rounded_values():
    spec = MatmulSpec(m=4, n=4, k=4, dtype="bfloat16")
    inputs = matmul_inputs(spec, np.random.default_rng(2))
    assert inputs["a"].dtype == np.uint16
    values = from_storage(inputs["a"], "bfloat16")
    assert np.all(np.abs(values) <= 1.0) and len(np.unique(values)) > 8


def test_counts():
    spec = MatmulSpec(m=64, n=32, k=16, batch=3, dtype="float16")
    assert matmul_flops(spec) == 2 * 3 * 64 * 32 * 16
    assert matmul_min_bytes(spec) == 3 * (64 * 16 + 16 * 32 + 64 * 32) * 2


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"m": 0, "n": 1, "k": 1}, "m"),
        ({"m": 1, "n": 1, "k": 1, "dtype": "float64"}, "dtype"),
        ({"m": 1, "n": 1, "k": 1, "layout_a": "diagonal"}, "layout_a"),
        ({"m": 1, "n": 1, "k": 1, "colour": "red"}, "colour"),
        ({"m": 1 << 20, "n": 1 << 20, "k": 1 << 20}, "A would take 4096.0 GiB"),
    ],
)
def test_bad_specs_name_the_field(fields, message):
    with pytest.raises(ValidationError, match=message):
        MatmulSpec(op="matmul", **fields)


def test_canonical_json_is_stable_and_includes_defaults():
    first = MatmulSpec(m=8, n=8, k=8)
    second = MatmulSpec.model_validate({"k": 8, "n": 8, "m": 8, "op": "matmul", "batch": 1})
    assert first.canonical_json() == second.canonical_json()
    assert first.workload_hash() == second.workload_hash()
    assert first.workload_hash() != MatmulSpec(m=8, n=8, k=9).workload_hash()
