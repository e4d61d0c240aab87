"""Warm starts from the cache: the workload's best schedules under other keys, the likeliest first."""

from __future__ import annotations

from dataclasses import replace

from sqlalchemy.engine import Engine

from db import WorkloadSpec, save_kernel, session_scope, warm_start_schedules
from tests.db.conftest import kernel_result


def _save(engine: Engine, workload: WorkloadSpec, device, toolchain, tag: str, schedule: dict | None = None) -> None:
    result = kernel_result(10.0, tag=tag)
    with session_scope(engine) as session:
        save_kernel(session=session, workload=workload, device=device, toolchain=toolchain,
                    result=replace(result, schedule=schedule) if schedule is not None else result)


def test_this_device_under_another_toolchain_then_the_same_arch_then_the_rest(engine: Engine, workload, device,
                                                                              toolchain) -> None:
    older = replace(toolchain, warpmap="0.0.9")
    other_driver = replace(device, driver="590.1")
    a100 = replace(device, name="NVIDIA A100", arch="sm_80")
    l4 = replace(device, name="NVIDIA L4", arch="sm_89")
    _save(engine, workload, device, toolchain, "here")  # the key itself: a cache hit, never a start
    _save(engine, workload, a100, toolchain, "a100")
    _save(engine, workload, other_driver, toolchain, "same-arch")
    _save(engine, workload, l4, toolchain, "l4")  # another arch, tuned after the A100: before it
    _save(engine, workload, device, older, "older-toolchain")
    _save(engine, WorkloadSpec(op="matmul", spec={**workload.spec, "m": 512}), a100, toolchain, "another-shape")
    with session_scope(engine) as session:
        found = warm_start_schedules(session=session, workload=workload, device=device, toolchain=toolchain)
        assert [w.schedule["tag"] for w in found] == ["older-toolchain", "same-arch", "l4", "a100"]
        assert (found[0].device, found[0].toolchain) == (device.key, older.key) and found[1].device == other_driver.key
        assert len(warm_start_schedules(session=session, workload=workload, device=device, toolchain=toolchain,
                                        limit=2)) == 2
        # A forced tuning starts from the key's own kernel, first of all.
        forced = warm_start_schedules(session=session, workload=workload, device=device, toolchain=toolchain,
                                      own=True)
        assert [w.schedule["tag"] for w in forced] == ["here", "older-toolchain", "same-arch", "l4"]
        # A device the cache has never seen gets every device's, its arch first.
        h200 = replace(device, name="NVIDIA H200")
        assert [w.schedule["tag"] for w in warm_start_schedules(
            session=session, workload=workload, device=h200, toolchain=toolchain)][:3] == [
            "older-toolchain", "same-arch", "here"]


def test_keys_that_agree_are_one_start_and_an_unknown_workload_has_none(engine: Engine, workload, device,
                                                                        toolchain) -> None:
    same = {"block_m": 64, "tag": "k", "latency": 10.0}
    _save(engine, workload, replace(device, driver="1"), toolchain, "k", same)
    _save(engine, workload, replace(device, driver="2"), toolchain, "k", same)
    with session_scope(engine) as session:
        assert [w.schedule for w in warm_start_schedules(session=session, workload=workload, device=device,
                                                         toolchain=toolchain)] == [same]
        assert warm_start_schedules(session=session, workload=WorkloadSpec(op="softmax", spec={"rows": 8}),
                                    device=device, toolchain=toolchain) == []
