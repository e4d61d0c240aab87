"""Cache management on both databases: stats, filters, eviction, export and import."""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy.engine import Engine

from db import (
    ImportFormatError,
    KernelFilter,
    KernelResult,
    WorkloadSpec,
    cache_stats,
    evict,
    export_jsonl,
    import_jsonl,
    list_kernels,
    lookup_kernel,
    save_kernel,
    session_scope,
)
from db.session import create_engine_for

Make = Callable[..., KernelResult]
LONG_AGO = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
def filled(engine: Engine, workload, device, toolchain, make_result: Make) -> Engine:
    """Three kernels: two matmuls on the H100 (one old), a softmax on an A100."""
    a100 = replace(device, name="NVIDIA A100", arch="sm_80", driver="550.1")
    softmax = WorkloadSpec(op="softmax", spec={"rows": 4096, "cols": 1024})
    small = WorkloadSpec(op="matmul", spec={**workload.spec, "m": 16})
    with session_scope(engine) as session:
        save_kernel(session=session, workload=workload, device=device, toolchain=toolchain, result=make_result(5.0))
        save_kernel(
            session=session,
            workload=small,
            device=device,
            toolchain=toolchain,
            result=make_result(2.0),
            now=LONG_AGO,
        )
        save_kernel(session=session, workload=softmax, device=a100, toolchain=toolchain, result=make_result(7.0))
    return engine


def test_stats_count_rows_and_bytes(filled: Engine, make_result: Make) -> None:
    with session_scope(filled) as session:
        stats = cache_stats(session=session)
    one = make_result(5.0).size_bytes
    assert (stats.rows, stats.bytes) == (3, 3 * one)
    assert {op: n for op, n, _ in stats.by_op} == {"matmul": 2, "softmax": 1}
    assert sum(b for _, _, b in stats.by_device) == stats.bytes


def test_stats_of_empty_cache(engine: Engine) -> None:
    with session_scope(engine) as session:
        stats = cache_stats(session=session)
    assert (stats.rows, stats.bytes, stats.by_device, stats.by_op) == (0, 0, (), ())


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        (KernelFilter(), 3),
        (KernelFilter(op="matmul"), 2),
        (KernelFilter(op="conv2d"), 0),
        (KernelFilter(device="a100"), 1),
        (KernelFilter(device="H100"), 2),
        (KernelFilter(arch="sm_80"), 1),
        (KernelFilter(device="%"), 0),  # a LIKE wildcard is matched literally
        (KernelFilter(updated_before=LONG_AGO + timedelta(days=1)), 1),
    ],
)
def test_list_filters(filled: Engine, where: KernelFilter, expected: int) -> None:
    with session_scope(filled) as session:
        assert len(list_kernels(session=session, where=where)) == expected


def test_list_is_newest_first_and_limited(filled: Engine) -> None:
    with session_scope(filled) as session:
        kernels = list_kernels(session=session)
        assert [k.updated_at for k in kernels] == sorted((k.updated_at for k in kernels), reverse=True)
        assert len(list_kernels(session=session, limit=2)) == 2


def test_evict_by_age_removes_only_old_entries(filled: Engine) -> None:
    with session_scope(filled) as session:
        report = evict(session=session, older_than=datetime.now(UTC) - timedelta(days=30))
    assert (report.removed, report.remaining) == (1, 2)
    with session_scope(filled) as session:
        assert all(k.updated_at > LONG_AGO for k in list_kernels(session=session))


def test_evict_to_size_keeps_the_most_recently_used(filled: Engine, workload, device, toolchain) -> None:
    with session_scope(filled) as session:
        before = cache_stats(session=session)
        lookup_kernel(session=session, workload=workload, device=device, toolchain=toolchain)  # a fresh hit
    one = before.bytes // 3
    with session_scope(filled) as session:
        report = evict(session=session, max_bytes=one + one // 2)
    assert (report.removed, report.remaining, report.remaining_bytes) == (2, 1, one)
    with session_scope(filled) as session:
        (left,) = list_kernels(session=session)
    assert left.workload == workload


def test_evict_dry_run_changes_nothing(filled: Engine) -> None:
    with session_scope(filled) as session:
        report = evict(session=session, max_bytes=0, dry_run=True)
        assert report.removed == 3
    with session_scope(filled) as session:
        assert cache_stats(session=session).rows == 3


def test_export_import_round_trip(filled: Engine, new_database: Callable[[], str]) -> None:
    stream = io.StringIO()
    with session_scope(filled) as session:
        assert export_jsonl(session=session, stream=stream) == 3
        originals = {(k.workload.key, k.device.key): k.result for k in list_kernels(session=session)}
    lines = stream.getvalue().splitlines()
    record = json.loads(lines[0])
    assert record["format"] == "warpmap-kernel"
    assert base64.b64decode(record["kernel"]["binary_b64"]) == b"\x7fELF\x00\x01"

    target = create_engine_for(new_database())  # a second cluster's empty cache
    with session_scope(target) as session:
        report = import_jsonl(session=session, stream=io.StringIO(stream.getvalue()))
        assert (report.read, report.stored, report.kept) == (3, 3, 0)
        copied = {(k.workload.key, k.device.key): k.result for k in list_kernels(session=session)}
    assert copied == originals
    # The spread and the roofs travel.
    assert all(r.latency_p20_us is not None and r.gbs == 80.0 and r.peak_gflops == 400.0 for r in copied.values())
    with session_scope(target) as session:  # importing again keeps what is there
        report = import_jsonl(session=session, stream=io.StringIO(stream.getvalue()))
    assert (report.stored, report.kept) == (0, 3)
    target.dispose()


def test_import_keeps_faster_local_entries(filled: Engine, workload, device, toolchain, make_result: Make) -> None:
    stream = io.StringIO()
    with session_scope(filled) as session:
        export_jsonl(session=session, stream=stream, where=KernelFilter(op="matmul", device="h100"))
        save_kernel(session=session, workload=workload, device=device, toolchain=toolchain, result=make_result(1.0))
    with session_scope(filled) as session:
        report = import_jsonl(session=session, stream=io.StringIO(stream.getvalue()))
        hit = lookup_kernel(session=session, workload=workload, device=device, toolchain=toolchain)
    assert (report.read, report.stored, report.kept) == (2, 0, 2)
    assert hit is not None and hit.kernel.result.latency_us == 1.0


@pytest.mark.parametrize(("version", "lacks"), [
    (1, ("latency_p20_us", "latency_p80_us", "gbs", "peak_gflops", "bandwidth_gbs")),
    (2, ("peak_gflops", "bandwidth_gbs")),
])
def test_an_earlier_export_imports_without_what_it_lacks(filled: Engine, new_database: Callable[[], str],
                                                          version: int, lacks: tuple[str, ...]) -> None:
    record = json.loads(_valid_line(filled))
    assert record["version"] == 3
    old = {**record, "version": version, "kernel": {k: v for k, v in record["kernel"].items() if k not in lacks}}
    target = create_engine_for(new_database())
    try:
        with session_scope(target) as session:
            assert import_jsonl(session=session, stream=io.StringIO(json.dumps(old) + "\n")).stored == 1
            (kernel,) = list_kernels(session=session)
        result = kernel.result
        assert result.latency_us == record["kernel"]["latency_us"]
        assert all(getattr(result, name) is None for name in lacks)
        kept = {k: v for k, v in result.fields().items() if k not in lacks and v is not None}
        assert kept.items() <= {k: v for k, v in record["kernel"].items() if k not in lacks}.items()
    finally:
        target.dispose()


def _valid_line(filled: Engine) -> str:
    stream = io.StringIO()
    with session_scope(filled) as session:
        export_jsonl(session=session, stream=stream, where=KernelFilter(op="softmax"))
    return stream.getvalue().strip()


@pytest.mark.parametrize(
    ("mangle", "message"),
    [
        (lambda rec: "{not json", "line 2: not JSON"),
        (lambda rec: json.dumps([1, 2]), "line 2: expected a JSON object"),
        (lambda rec: json.dumps({**rec, "version": 99}), "line 2: format 'warpmap-kernel' version 99 is not "
                                                          "'warpmap-kernel' version 1 or 2 or 3"),
        (lambda rec: json.dumps({**rec, "version": True}), "line 2: format 'warpmap-kernel' version True"),
        (
            lambda rec: json.dumps({**rec, "kernel": {**rec["kernel"], "latency_p80_us": 1e-3}}),
            "line 2: .*latency_p20_us and latency_p80_us must be .* in order",
        ),
        (
            lambda rec: json.dumps({k: v for k, v in rec.items() if k != "device"}),
            "line 2: missing field 'device'",
        ),
        (
            lambda rec: json.dumps({**rec, "kernel": {**rec["kernel"], "binary_b64": "***"}}),
            "line 2: .*base64|line 2: .*Non-base64|line 2: Incorrect padding",
        ),
        (
            lambda rec: json.dumps({**rec, "kernel": {**rec["kernel"], "latency_us": -3}}),
            "line 2: .*latency_us",
        ),
        (lambda rec: json.dumps({**rec, "kernel": {**rec["kernel"], "color": "red"}}), "line 2: .*color"),
    ],
)
def test_malformed_import_names_the_line_and_changes_nothing(
    filled: Engine, new_database: Callable[[], str], mangle: Callable[[dict], str], message: str
) -> None:
    line = _valid_line(filled)
    text = line + "\n" + mangle(json.loads(line)) + "\n"
    target = create_engine_for(new_database())
    try:
        with pytest.raises(ImportFormatError, match=message), session_scope(target) as session:
            import_jsonl(session=session, stream=io.StringIO(text))
        with session_scope(target) as session:
            assert cache_stats(session=session).rows == 0  # the valid first line was not stored either
    finally:
        target.dispose()
