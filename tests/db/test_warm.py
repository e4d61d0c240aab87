"""Warm starts from the cache: the same workload's best on other devices, then nearby shapes here."""

from __future__ import annotations

from dataclasses import replace

from sqlalchemy.engine import Engine

from db import WorkloadSpec, save_kernel, session_scope, warm_start_schedules
from db.records import DeviceInfo
from db.warm import shape_distance
from tests.db.conftest import kernel_result


def _save(engine: Engine, workload: WorkloadSpec, device: DeviceInfo, toolchain, tag: str) -> None:
    with session_scope(engine) as session:
        save_kernel(session=session, workload=workload, device=device, toolchain=toolchain,
                    result=kernel_result(10.0, tag=tag))


def test_shape_distance_adds_log_ratios_and_refuses_other_kinds() -> None:
    base = {"m": 512, "n": 512, "k": 128, "dtype": "float16"}
    assert shape_distance(base, base) == 0.0
    assert shape_distance(base, {**base, "m": 1024, "k": 32}) == 3.0
    assert shape_distance(base, {**base, "dtype": "float32"}) is None
    assert shape_distance(base, {**base, "trans": True}) is None  # a field only one has
    assert shape_distance({"x": True}, {"x": 1}) is None  # a flag is not a size
    reduce = {"op": "reduce", "shape": [64, 50], "axis": 1, "kind": "sum"}
    assert shape_distance(reduce, {**reduce, "shape": [128, 25]}) == 2.0
    assert shape_distance(reduce, {**reduce, "shape": [64, 50, 2]}) is None  # another rank
    assert shape_distance(reduce, {**reduce, "axis": 0}) is None  # a place, not a size
    assert shape_distance(reduce, {**reduce, "axis": 2}) is None


def test_other_devices_first_same_arch_first_then_nearest_shapes(engine: Engine, workload, device,
                                                                 toolchain) -> None:
    spec = dict(workload.spec)
    h100_other_driver = replace(device, driver="590.1")
    a100 = replace(device, name="NVIDIA A100", arch="sm_80")
    _save(engine, workload, device, toolchain, "here")  # the workload here: a cache hit, never a start
    _save(engine, workload, h100_other_driver, toolchain, "same-arch")
    _save(engine, workload, a100, toolchain, "other-arch")
    # a100 was saved last, yet the same arch comes first
    near = WorkloadSpec(op="matmul", spec={**spec, "m": 512})
    far = WorkloadSpec(op="matmul", spec={**spec, "m": 4096, "n": 4096})
    float32 = WorkloadSpec(op="matmul", spec={**spec, "dtype": "float32"})
    conv = WorkloadSpec(op="conv2d", spec=spec)
    for other, tag in ((far, "far"), (near, "near"), (float32, "float32"), (conv, "conv")):
        _save(engine, other, device, toolchain, tag)
    _save(engine, near, a100, toolchain, "near-elsewhere")  # another shape on another device: neither
    with session_scope(engine) as session:
        found = warm_start_schedules(session=session, workload=workload, device=device)
        assert [(w.source, w.schedule["tag"]) for w in found] == [
            ("other device", "same-arch"), ("other device", "other-arch"),
            ("nearby shape", "near"), ("nearby shape", "far")]
        assert found[0].device == h100_other_driver.key and found[2].workload == near.key
        assert [w.schedule["tag"] for w in warm_start_schedules(session=session, workload=workload, device=device,
                                                                per_source=1)] == ["same-arch", "near"]
        assert warm_start_schedules(session=session, workload=WorkloadSpec(op="softmax", spec={"rows": 8}),
                                    device=device) == []
