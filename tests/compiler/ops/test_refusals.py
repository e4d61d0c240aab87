"""What templates refuse on purpose: a schedule that cannot serve a spec, a spec no schedule can serve.

Verification prunes exactly these (:class:`~compiler.space.ScheduleDoesNotFitError`); every other
exception from a template is a bug. An empty space is known before anything is built.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from compiler.device import DEVICES, DeviceSpec
from compiler.ops import conv2d_mma, matmul_mma, matmul_simt, reduce, softmax
from compiler.ops.conv2d_spec import Conv2dSpec
from compiler.ops.gemm_mma import MmaSchedule
from compiler.ops.matmul_simt import SimtSchedule
from compiler.ops.matmul_spec import MatmulSpec
from compiler.ops.reduce import ReduceSchedule, ReduceSpec
from compiler.ops.softmax import SoftmaxSchedule, SoftmaxSpec
from compiler.space import EmptySpaceError, ScheduleDoesNotFitError

H200 = DEVICES["h200"]
#: A Turing-class device: its tensor cores lack the sm_80 mma shapes and cp.async the templates use.
TURING = DeviceSpec(name="NVIDIA T4", arch="sm_75", sm_count=40)


@pytest.mark.parametrize(("template", "spec"), [
    (matmul_mma, MatmulSpec(m=64, n=64, k=64, dtype="float16")),
    (matmul_mma, MatmulSpec(m=64, n=64, k=64, dtype="bfloat16")),
    (conv2d_mma, Conv2dSpec(n=1, c=8, h=8, w=8, k=8, r=3, s=3, dtype="float16")),
])
def test_tensor_core_templates_have_no_space_on_a_device_without_them(template: object, spec: object) -> None:
    assert not TURING.has_tensor_cores and H200.has_tensor_cores
    assert template.space(spec, H200, 1).candidates()  # type: ignore[attr-defined]
    with pytest.raises(EmptySpaceError, match=r"needs sm_80 or newer tensor cores .* NVIDIA T4 is sm_75"):
        template.space(spec, TURING, 1)  # type: ignore[attr-defined]


def test_schedules_outside_the_space_are_refused_as_not_fitting() -> None:
    f16 = MatmulSpec(m=8, n=8, k=8, dtype="float16")
    for schedule in (MmaSchedule(64, 64, 32, 24, 32, 2), MmaSchedule(64, 64, 32, 32, 32, 5)):
        with pytest.raises(ScheduleDoesNotFitError):
            matmul_mma.build(f16, schedule)
    conv = Conv2dSpec(n=1, c=8, h=8, w=8, k=8, r=3, s=3, dtype="float16")
    with pytest.raises(ScheduleDoesNotFitError, match="warp tile"):
        conv2d_mma.build(conv, MmaSchedule(64, 64, 32, 24, 32, 2))
    valid = SimtSchedule(1, 2, 1, 1, 4, 4, 4, 8, 1)
    with pytest.raises(ScheduleDoesNotFitError, match="does not divide among 64 threads"):
        matmul_simt.build(MatmulSpec(m=256, n=256, k=256), replace(valid, thread_m=3))
    with pytest.raises(ScheduleDoesNotFitError, match="cols 7 is not a multiple of vector 2"):
        softmax.build_softmax(SoftmaxSpec(rows=2, cols=7), SoftmaxSchedule(32, 1, 2, "stream", 1))
    with pytest.raises(ScheduleDoesNotFitError, match="vector 2 needs the last axis reduced"):
        reduce.build_reduce(ReduceSpec(shape=(4, 6, 3), axis=1, kind="sum"), ReduceSchedule(32, 1, 1, 2, "shuffle"))


def test_a_wrongly_dispatched_dtype_is_a_bug_not_a_refusal() -> None:
    with pytest.raises(ValueError, match="takes float16 or bfloat16") as raised:
        matmul_mma.build(MatmulSpec(m=8, n=8, k=8), MmaSchedule(64, 64, 32, 32, 32, 2))
    assert not isinstance(raised.value, ScheduleDoesNotFitError)
