"""The tolerance grows with the reduction length, as the float32 summation error model says, and no faster."""

from __future__ import annotations

import math

import numpy as np
import pytest

from compiler.numeric import TOLERANCE, relative_error, tolerance
from compiler.ops import get_operator
from compiler.ops.conv2d_spec import Conv2dSpec
from compiler.ops.matmul_spec import MatmulSpec
from compiler.ops.reduce import ReduceSpec
from compiler.ops.softmax import SoftmaxSpec
from search.verify import Oracle

LONG = 1 << 20
OUTPUTS = 8


def _sequential_dots(n: int, drop: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``OUTPUTS`` float32 dot products of length ``n`` summed one term after another (as a thread's
    accumulator does), optionally without term ``drop``, and their float64 reference."""
    rng = np.random.default_rng(1)
    a = rng.uniform(-1.0, 1.0, (OUTPUTS, n)).astype(np.float32)
    b = rng.uniform(-1.0, 1.0, (OUTPUTS, n)).astype(np.float32)
    products = a * b
    if drop is not None:
        products[:, drop] = 0.0
    got = np.cumsum(products, axis=1, dtype=np.float32)[:, -1].astype(np.float64)
    return got, np.einsum("ij,ij->i", a.astype(np.float64), b.astype(np.float64))


def test_a_correct_long_sequential_dot_passes_where_the_fixed_bound_failed_it() -> None:
    got, reference = _sequential_dots(LONG)
    error = relative_error(got, reference)
    assert error > TOLERANCE["float32"]  # the old fixed 1e-5 called a right kernel wrong
    assert error <= tolerance("float32", LONG)


@pytest.mark.parametrize("dropped", [0, LONG // 2, LONG - 1])
def test_the_same_dot_with_one_term_dropped_still_fails(dropped: int) -> None:
    got, reference = _sequential_dots(LONG, drop=dropped)
    assert relative_error(got, reference) > tolerance("float32", LONG)


def test_small_reductions_keep_a_tight_bound() -> None:
    assert tolerance("float32") == pytest.approx(TOLERANCE["float32"], rel=2e-2)
    assert tolerance("float32", 83) <= 1.2e-5
    assert tolerance("float16", 83) <= 1.01 * TOLERANCE["float16"]
    assert tolerance("float32", 4 * LONG) == pytest.approx(TOLERANCE["float32"] + 2 * 2**-24 * 2048)
    with pytest.raises(ValueError, match="at least one term"):
        tolerance("float32", 0)


def test_the_bound_grows_as_sqrt_n() -> None:
    grows = [tolerance("float32", n) - TOLERANCE["float32"] for n in (1 << 10, 1 << 12, 1 << 14)]
    assert grows[1] / grows[0] == pytest.approx(2.0) and grows[2] / grows[1] == pytest.approx(2.0)
    assert math.isclose(grows[0], 2.0 * 2**-24 * 32)


@pytest.mark.parametrize(("op", "spec", "name", "reduction"), [
    ("matmul", MatmulSpec(m=4, n=4, k=LONG), "c", LONG),
    ("matmul", MatmulSpec(m=4, n=4, k=83, dtype="bfloat16"), "c", 83),
    ("conv2d", Conv2dSpec(n=1, c=64, h=8, w=8, k=4, r=3, s=5), "y", 64 * 3 * 5),
    ("softmax", SoftmaxSpec(rows=2, cols=50_000), "y", 50_000),
    ("reduce", ReduceSpec(shape=(3, 70_000, 2), axis=1, kind="sum"), "y", 70_000),
    ("reduce", ReduceSpec(shape=(3, 70_000), axis=1, kind="mean"), "y", 70_000),
    ("reduce", ReduceSpec(shape=(3, 70_000), axis=1, kind="max"), "y", 1),
])
def test_each_operator_reports_its_reduction_length_and_verification_uses_it(
        op: str, spec: object, name: str, reduction: int) -> None:
    (out,) = get_operator(op).outputs(spec)
    assert (out.name, out.reduction) == (name, reduction)
    assert Oracle(get_operator(op), spec).tolerance(name) == tolerance(out.dtype, reduction)


def test_the_simt_matmul_at_k_2_20_passes_its_check_on_the_emulator() -> None:
    from compiler.backends import get_target
    from compiler.device import device_preset
    from search.trial import TrialStatus
    from search.verify import check_schedule

    operator, spec = get_operator("matmul"), MatmulSpec(m=8, n=8, k=LONG)
    device = device_preset("h200")
    schedule = operator.space(spec, device, 1).candidates()[0]
    result = check_schedule(operator, spec, schedule, target=get_target("emu", gpu=device))
    assert result.status is TrialStatus.OK, result.message
    # Each thread sums its k products one after another: more error than the old fixed bound allowed.
    assert result.error is not None and TOLERANCE["float32"] < result.error <= tolerance("float32", LONG)


def test_float16_results_below_the_normal_range_are_allowed_their_absolute_rounding() -> None:
    # A softmax over 2^24 columns: outputs near 1 / cols, mostly float16 subnormals (below 6.1e-5).
    from compiler.numeric import from_storage, to_storage

    oracle = Oracle(get_operator("softmax"), SoftmaxSpec(rows=1, cols=1 << 24, dtype="float16"))
    reference = oracle.expected["y"]
    rounded = to_storage(reference.astype(np.float32), "float16")  # a correctly rounded kernel
    error, name = oracle.worst_error({"y": rounded})
    assert name == "y" and TOLERANCE["float16"] < error <= oracle.tolerance("y")
    wrong = rounded.copy()
    wrong.reshape(-1)[np.argmax(reference)] = to_storage(np.zeros(1, np.float32), "float16")[0]
    assert oracle.worst_error({"y": wrong})[0] > oracle.tolerance("y")
    assert relative_error(from_storage(rounded, "float16"), reference) == error


@pytest.mark.parametrize(("dtype", "storage"), [("float16", np.float16), ("bfloat16", None)])
def test_16_bit_outputs_rounded_once_pass_and_16_bit_accumulation_fails(dtype: str, storage: object) -> None:
    """A float32 dot rounded once to the output type is within the bound; the same dot accumulated in
    the 16-bit type (every partial sum rounded) is not, from k = 83 up."""

    def to_16(x: np.ndarray) -> np.ndarray:
        if storage is not None:
            return np.asarray(x, np.float32).astype(storage).astype(np.float64)
        bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
        rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16
        return rounded.astype(np.uint32).view(np.float32).astype(np.float64)

    rng = np.random.default_rng(3)
    k = 83
    a, b = to_16(rng.standard_normal((256, k))), to_16(rng.standard_normal(k))
    exact = a @ b
    once = to_16((a.astype(np.float32) @ b.astype(np.float32)).astype(np.float32))
    accumulated = np.zeros(256)
    for j in range(k):
        accumulated = to_16(accumulated + to_16(a[:, j] * b[j]))
    assert relative_error(once, exact) <= tolerance(dtype, k)
    assert relative_error(accumulated, exact) > tolerance(dtype, k)
