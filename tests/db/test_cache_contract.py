"""The storage contract of the kernel cache, run on SQLite and on PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import func, select
from sqlalchemy.engine import Engine

from compiler.source import KernelSource, Param
from db import (
    DeviceInfo,
    KernelResult,
    NotFoundError,
    ToolchainInfo,
    WorkloadSpec,
    ensure_device,
    get_kernel,
    lookup_kernel,
    save_kernel,
    session_scope,
)
from db.models import Device, Kernel, Workload
from search.records import kernel_result

Make = Callable[..., KernelResult]


def _save(engine: Engine, w: WorkloadSpec, d: DeviceInfo, t: ToolchainInfo, r: KernelResult) -> bool:
    with session_scope(engine) as session:
        return save_kernel(session=session, workload=w, device=d, toolchain=t, result=r)


def _lookup(engine: Engine, w: WorkloadSpec, d: DeviceInfo, t: ToolchainInfo, **kw: bool):
    with session_scope(engine) as session:
        return lookup_kernel(session=session, workload=w, device=d, toolchain=t, **kw)


def test_miss_on_empty_cache(engine: Engine, workload, device, toolchain) -> None:
    assert _lookup(engine, workload, device, toolchain) is None
    assert _lookup(engine, workload, device, toolchain, nearest=True) is None


def test_stored_kernel_round_trips_every_field(engine: Engine, workload, device, toolchain, make_result: Make) -> None:
    result = make_result(12.5, binary=bytes(range(256)))
    assert _save(engine, workload, device, toolchain, result)
    hit = _lookup(engine, workload, device, toolchain)
    assert hit is not None and hit.exact
    assert hit.kernel.result == result
    assert hit.kernel.workload == workload
    assert hit.kernel.device == device
    assert hit.kernel.toolchain == toolchain
    assert hit.kernel.size_bytes == result.size_bytes > 256
    assert hit.kernel.updated_at.tzinfo is UTC


def test_faster_replaces_slower_and_slower_never_replaces_faster(
    engine: Engine, workload, device, toolchain, make_result: Make
) -> None:
    assert _save(engine, workload, device, toolchain, make_result(20.0, tag="first"))
    assert _save(engine, workload, device, toolchain, make_result(10.0, tag="faster"))
    assert not _save(engine, workload, device, toolchain, make_result(15.0, tag="slower"))
    assert not _save(engine, workload, device, toolchain, make_result(10.0, tag="tie"))
    hit = _lookup(engine, workload, device, toolchain)
    assert hit is not None
    assert (hit.kernel.result.entry, hit.kernel.result.latency_us) == ("faster", 10.0)
    with session_scope(engine) as session:
        assert session.execute(select(func.count(Kernel.id))).scalar_one() == 1


def test_keys_are_shared_rows(engine: Engine, workload, device, toolchain, make_result: Make) -> None:
    other_workload = WorkloadSpec(op="matmul", spec={**workload.spec, "m": 1024})
    _save(engine, workload, device, toolchain, make_result(5.0))
    _save(engine, other_workload, device, toolchain, make_result(6.0))
    with session_scope(engine) as session:
        assert session.execute(select(func.count(Device.id))).scalar_one() == 1
        assert session.execute(select(func.count(Workload.id))).scalar_one() == 2
        assert session.execute(select(func.count(Kernel.id))).scalar_one() == 2


def test_unknown_device_details_are_filled_in_later_and_known_ones_kept(engine: Engine, device) -> None:
    unknown = replace(device, compute_units=0, memory_bytes=0, l2_bytes=0)

    def stored(reported: DeviceInfo) -> tuple[int, int, int]:
        with session_scope(engine) as session:
            row = session.get(Device, ensure_device(session=session, device=reported))
            assert row is not None
            return row.compute_units, row.memory_bytes, row.l2_bytes

    assert stored(unknown) == (0, 0, 0)
    assert stored(replace(unknown, memory_bytes=device.memory_bytes)) == (0, device.memory_bytes, 0)
    assert stored(device) == (device.compute_units, device.memory_bytes, device.l2_bytes)
    assert stored(unknown) == (device.compute_units, device.memory_bytes, device.l2_bytes)
    assert stored(replace(device, compute_units=1)) == (device.compute_units, device.memory_bytes, device.l2_bytes)
    with session_scope(engine) as session:
        assert session.execute(select(func.count(Device.id))).scalar_one() == 1


def test_exact_lookup_distinguishes_driver_and_toolchain(
    engine: Engine, workload, device, toolchain, make_result: Make
) -> None:
    _save(engine, workload, device, toolchain, make_result(9.0))
    assert _lookup(engine, workload, replace(device, driver="590.1"), toolchain) is None
    assert _lookup(engine, workload, device, replace(toolchain, nvrtc="13.6")) is None
    assert _lookup(engine, WorkloadSpec(op="matmul", spec={**workload.spec, "k": 64}), device, toolchain) is None


def test_nearest_lookup_is_marked_and_stays_on_the_architecture(
    engine: Engine, workload, device, toolchain, make_result: Make
) -> None:
    _save(engine, workload, device, toolchain, make_result(9.0, tag="h100"))
    new_driver = replace(device, driver="590.1")
    near = _lookup(engine, workload, new_driver, toolchain, nearest=True)
    assert near is not None and not near.exact
    assert near.kernel.device == device and near.kernel.result.entry == "h100"
    other_arch = replace(device, name="NVIDIA A100", arch="sm_80")
    assert _lookup(engine, workload, other_arch, toolchain, nearest=True) is None


def test_nearest_prefers_same_device_then_same_toolchain(
    engine: Engine, workload, device, toolchain, make_result: Make
) -> None:
    sibling = replace(device, name="NVIDIA H200", driver="580.65.06")
    new_toolchain = replace(toolchain, warpmap="0.2.0")
    _save(engine, workload, sibling, toolchain, make_result(1.0, tag="sibling"))
    _save(engine, workload, device, new_toolchain, make_result(8.0, tag="same_device_new_toolchain"))
    _save(
        engine,
        workload,
        replace(device, driver="570.1"),
        toolchain,
        make_result(9.0, tag="same_device_old_driver"),
    )
    asked = replace(device, driver="600.0")
    near = _lookup(engine, workload, asked, toolchain, nearest=True)
    assert near is not None and not near.exact
    assert near.kernel.result.entry == "same_device_old_driver"


def test_exact_match_wins_over_nearest(engine: Engine, workload, device, toolchain, make_result: Make) -> None:
    _save(engine, workload, replace(device, driver="1"), toolchain, make_result(1.0, tag="near"))
    _save(engine, workload, device, toolchain, make_result(50.0, tag="exact"))
    hit = _lookup(engine, workload, device, toolchain, nearest=True)
    assert hit is not None and hit.exact and hit.kernel.result.entry == "exact"


def test_hits_are_counted_only_when_asked(engine: Engine, workload, device, toolchain, make_result: Make) -> None:
    _save(engine, workload, device, toolchain, make_result(3.0))
    _lookup(engine, workload, device, toolchain)
    _lookup(engine, workload, device, toolchain)
    _lookup(engine, workload, device, toolchain, record_hit=False)
    hit = _lookup(engine, workload, device, toolchain, record_hit=False)
    assert hit is not None and hit.kernel.hits == 2
    assert hit.kernel.last_hit_at is not None
    assert datetime.now(UTC) - hit.kernel.last_hit_at < timedelta(minutes=1)


def test_get_kernel_by_id_and_unknown_id(engine: Engine, workload, device, toolchain, make_result: Make) -> None:
    _save(engine, workload, device, toolchain, make_result(3.0))
    hit = _lookup(engine, workload, device, toolchain)
    assert hit is not None
    with session_scope(engine) as session:
        assert get_kernel(session=session, kernel_id=hit.kernel.id).result == hit.kernel.result
        with pytest.raises(NotFoundError, match="999999"):
            get_kernel(session=session, kernel_id=999999)


def test_kernel_without_binary(engine: Engine, workload, device, toolchain, make_result: Make) -> None:
    _save(engine, workload, device, toolchain, make_result(3.0, binary=None))
    hit = _lookup(engine, workload, device, toolchain)
    assert hit is not None and hit.kernel.result.binary is None


@pytest.mark.parametrize("latency", [0.0, -1.0, float("nan")])
def test_non_positive_latency_is_rejected(make_result: Make, latency: float) -> None:
    with pytest.raises(ValueError, match="latency_us"):
        make_result(latency)


@pytest.mark.parametrize(("p20", "p80"), [(1.0, None), (None, 2.0), (2.0, 1.0), (0.0, 1.0)])
def test_the_spread_comes_whole_and_in_order(make_result: Make, p20: float | None, p80: float | None) -> None:
    with pytest.raises(ValueError, match="latency_p20_us and latency_p80_us"):
        replace(make_result(1.5), latency_p20_us=p20, latency_p80_us=p80)


@pytest.mark.parametrize("roof", ["peak_gflops", "bandwidth_gbs"])
@pytest.mark.parametrize("value", [0.0, -3.0, float("nan")])
def test_a_roof_is_positive_when_given(make_result: Make, roof: str, value: float) -> None:
    with pytest.raises(ValueError, match=f"{roof} must be positive"):
        replace(make_result(1.5), **{roof: value})


def test_kernel_from_compiler_hand_off(engine: Engine, workload, device, toolchain) -> None:
    source = KernelSource(
        entry="mm_64x64",
        source='extern "C" __global__ void mm_64x64(const float* a, float* c, int n) {}',
        grid=(16, 16, 1),
        block=(128, 2, 1),
        params=(Param("a", "float32"), Param("c", "float32"), Param("n", "int32", pointer=False)),
        shared_bytes=8192,
    )
    result = kernel_result(source, schedule={"block_m": 64}, latency_us=33.0, trials_used=40, binary=b"cubin")
    _save(engine, workload, device, toolchain, result)
    hit = _lookup(engine, workload, device, toolchain)
    assert hit is not None
    stored = hit.kernel.result
    assert (stored.entry, stored.grid, stored.block, stored.shared_bytes) == (
        "mm_64x64",
        (16, 16, 1),
        (128, 2, 1),
        8192,
    )
    assert [Param(**p) for p in stored.params] == list(source.params)
