"""Cache management, keyword-only: stats, listing with filters, eviction, JSON-lines export/import.

The export format is one JSON object per line, self-describing and independent of row ids, so a
cache moves between clusters (and databases)::

    {"format": "warpmap-kernel", "version": 3,
     "workload": {"op": ..., "spec": {...}},
     "device": {"name": ..., "arch": ..., "driver": ..., "compute_units": ..., ...},
     "toolchain": {"warpmap": ..., "nvrtc": ..., "host_compiler": ...},
     "kernel": {"schedule": {...}, "source": ..., "binary_b64": ... | null, "entry": ..., "grid": [...],
                "block": [...], "shared_bytes": ..., "params": [...], "latency_us": ...,
                "latency_p20_us": ..., "latency_p80_us": ..., "gflops": ..., "gbs": ..., "peak_gflops": ...,
                "bandwidth_gbs": ..., "trials_used": ...,
                "program": {...} | null}}

Version 2 added the measurement's spread and bandwidth (``latency_p20_us``, ``latency_p80_us``,
``gbs``), version 3 the roofs of the tuning (``peak_gflops``, ``bandwidth_gbs``); an export of an
earlier version still imports, without what it lacks.

Import goes through :func:`db.repository.save_kernel`, so an imported kernel replaces a local one
only when it is faster.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any, TextIO, TypeVarTuple

from sqlalchemy import JSON, Select, delete, func, select, type_coerce
from sqlalchemy.orm import Session

from db.models import Device, Kernel, Toolchain, Workload
from db.records import CachedKernel, DeviceInfo, KernelResult, ToolchainInfo, WorkloadSpec
from db.repository import kernel_query, save_kernel, to_cached_kernel

EXPORT_FORMAT = "warpmap-kernel"
EXPORT_VERSION = 3
#: Versions an import reads: the current one, 2 (less the roofs) and 1 (less the spread and GB/s too).
IMPORT_VERSIONS = (1, 2, 3)


class ImportFormatError(ValueError):
    """An import file line is not a valid export record; the message names the line."""


@dataclass(frozen=True)
class KernelFilter:
    """Which cached kernels an operation applies to; every field left None matches everything."""

    op: str | None = None
    workload: str | None = None  # exact workload key, e.g. "matmul:1776f0bef7b8c162"
    device: str | None = None  # substring of the device name (case-insensitive) or exact device key
    arch: str | None = None
    toolchain: str | None = None  # exact toolchain key
    updated_before: datetime | None = None
    dtype: str | None = None  # the spec's ``dtype`` field
    #: Integer spec fields that must match, e.g. ``(("m", 512), ("n", 512))``.
    dims: tuple[tuple[str, int], ...] = ()


def _spec_field(name: str) -> Any:
    # The column holds the versioned envelope {"schema": 1, "data": spec}: the field is under "data".
    return type_coerce(Workload.spec, JSON)[("data", name)]


@dataclass(frozen=True)
class CacheStats:
    rows: int
    bytes: int
    by_device: tuple[tuple[str, int, int], ...]  # (device key, rows, bytes)
    by_op: tuple[tuple[str, int, int], ...]  # (op, rows, bytes)


@dataclass(frozen=True)
class EvictionReport:
    removed: int
    removed_bytes: int
    remaining: int
    remaining_bytes: int


@dataclass(frozen=True)
class ImportReport:
    read: int
    stored: int  # new entries, or faster than the local one
    kept: int  # the local entry was as fast or faster


#: The columns of the query a filter narrows: the whole kernel row, or a count of them.
_Columns = TypeVarTuple("_Columns")


def _filtered(query: Select[*_Columns], where: KernelFilter) -> Select[*_Columns]:
    if where.op is not None:
        query = query.where(Workload.op == where.op)
    if where.workload is not None:
        query = query.where(Workload.key == where.workload)
    if where.device is not None:
        query = query.where(
            (Device.key == where.device) | func.lower(Device.name).contains(where.device.lower(), autoescape=True)
        )
    if where.arch is not None:
        query = query.where(Device.arch == where.arch)
    if where.toolchain is not None:
        query = query.where(Toolchain.key == where.toolchain)
    if where.updated_before is not None:
        query = query.where(Kernel.updated_at < where.updated_before)
    if where.dtype is not None:
        query = query.where(_spec_field("dtype").as_string() == where.dtype)
    for name, value in where.dims:
        query = query.where(_spec_field(name).as_integer() == value)
    return query


def list_kernels(
    *, session: Session, where: KernelFilter = KernelFilter(), limit: int | None = None, offset: int = 0
) -> list[CachedKernel]:
    """Matching kernels, most recently updated first (``offset`` of them skipped)."""
    query = _filtered(kernel_query(), where).order_by(Kernel.updated_at.desc(), Kernel.id.desc())
    if limit is not None:
        query = query.limit(limit)
    if offset:
        query = query.offset(offset)
    return [to_cached_kernel(row) for row in session.execute(query)]


def count_kernels(*, session: Session, where: KernelFilter = KernelFilter()) -> int:
    """How many kernels :func:`list_kernels` would list without a limit."""
    query = _filtered(kernel_query().with_only_columns(func.count(Kernel.id)), where)
    return int(session.execute(query).scalar_one())


def cache_stats(*, session: Session) -> CacheStats:
    """Rows and bytes in total, by device key and by operator (``size_bytes`` summed)."""
    rows, size = session.execute(select(func.count(Kernel.id), func.coalesce(func.sum(Kernel.size_bytes), 0))).one()

    def grouped(column: Any, model: Any, link: Any) -> tuple[tuple[str, int, int], ...]:
        query = (
            select(column, func.count(Kernel.id), func.sum(Kernel.size_bytes))
            .join(model, link)
            .group_by(column)
            .order_by(column)
        )
        return tuple((str(k), int(n), int(b)) for k, n, b in session.execute(query))

    return CacheStats(
        rows=int(rows),
        bytes=int(size),
        by_device=grouped(Device.key, Device, Kernel.device_id == Device.id),
        by_op=grouped(Workload.op, Workload, Kernel.workload_id == Workload.id),
    )


def evict(
    *,
    session: Session,
    older_than: datetime | None = None,
    max_bytes: int | None = None,
    dry_run: bool = False,
) -> EvictionReport:
    """Remove kernels last used (served or updated) before ``older_than``, then the least recently
    used ones until the cache holds at most ``max_bytes``.
    """
    if max_bytes is not None and max_bytes < 0:
        raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
    last_used = func.coalesce(Kernel.last_hit_at, Kernel.updated_at)
    # Newest first: the running total tells which rows still fit in the size budget.
    candidates = session.execute(
        select(Kernel.id, Kernel.size_bytes, last_used.label("last_used")).order_by(last_used.desc(), Kernel.id.desc())
    ).all()
    doomed: list[int] = []
    kept_bytes = 0
    for kernel_id, size, used in candidates:
        too_old = older_than is not None and used < older_than
        if too_old or (max_bytes is not None and kept_bytes + size > max_bytes):
            doomed.append(kernel_id)
        else:
            kept_bytes += size
    doomed_set = set(doomed)
    removed_bytes = sum(size for kernel_id, size, _ in candidates if kernel_id in doomed_set)
    if doomed and not dry_run:
        for start in range(0, len(doomed), 500):
            session.execute(delete(Kernel).where(Kernel.id.in_(doomed[start : start + 500])))
    return EvictionReport(
        removed=len(doomed),
        removed_bytes=removed_bytes,
        remaining=len(candidates) - len(doomed),
        remaining_bytes=kept_bytes,
    )


def to_export_record(kernel: CachedKernel) -> dict[str, Any]:
    result = kernel.result
    return {
        "format": EXPORT_FORMAT,
        "version": EXPORT_VERSION,
        "workload": {"op": kernel.workload.op, "spec": dict(kernel.workload.spec)},
        "device": asdict(kernel.device),
        "toolchain": asdict(kernel.toolchain),
        "kernel": {
            **result.fields(),
            "binary_b64": None if result.binary is None else base64.b64encode(result.binary).decode("ascii"),
        },
    }


def export_jsonl(*, session: Session, stream: TextIO, where: KernelFilter = KernelFilter()) -> int:
    """Write matching kernels to ``stream``, one JSON object a line; returns how many.

    Rows are fetched in small batches, so exporting a large cache does not hold it all in memory.
    """
    query = _filtered(kernel_query(), where).order_by(Kernel.id).execution_options(yield_per=64)
    count = 0
    for row in session.execute(query):
        record = to_export_record(to_cached_kernel(row))
        stream.write(json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n")
        count += 1
    return count


Entry = tuple[WorkloadSpec, DeviceInfo, ToolchainInfo, KernelResult]


def parse_export_record(line: str, number: int) -> Entry:
    """One export line as values; :class:`ImportFormatError` names the line and the problem."""
    try:
        record = json.loads(line)
        if not isinstance(record, dict):
            raise TypeError(f"expected a JSON object, got {type(record).__name__}")
        version = record.get("version")
        if record.get("format") != EXPORT_FORMAT or type(version) is not int or version not in IMPORT_VERSIONS:
            raise ValueError(
                f"format {record.get('format')!r} version {version!r} is not "
                f"{EXPORT_FORMAT!r} version {' or '.join(map(str, IMPORT_VERSIONS))}"
            )
        workload = WorkloadSpec(op=record["workload"]["op"], spec=record["workload"]["spec"])
        if not isinstance(workload.spec, dict):
            raise TypeError("workload.spec must be an object")
        workload.key  # noqa: B018 -- validates op and spec
        device = DeviceInfo(**record["device"])
        device.key  # noqa: B018
        toolchain = ToolchainInfo(**record["toolchain"])
        toolchain.key  # noqa: B018
        body = dict(record["kernel"])
        encoded = body.pop("binary_b64")
        binary = None if encoded is None else base64.b64decode(encoded, validate=True)
        result = KernelResult(
            **{
                **body,
                "grid": tuple(body["grid"]),
                "block": tuple(body["block"]),
                "params": tuple(body["params"]),
            },
            binary=binary,
        )
    except json.JSONDecodeError as exc:
        raise ImportFormatError(f"line {number}: not JSON ({exc.msg} at column {exc.colno})") from exc
    except KeyError as exc:
        raise ImportFormatError(f"line {number}: missing field {exc.args[0]!r}") from exc
    except (TypeError, ValueError, binascii.Error) as exc:
        raise ImportFormatError(f"line {number}: {exc}") from exc
    return workload, device, toolchain, result


def import_jsonl(
    *, session: Session, stream: TextIO, validate: Callable[[WorkloadSpec], object] | None = None
) -> ImportReport:
    """Merge an export into the cache, line by line, in the caller's transaction.

    ``validate`` checks each record's workload with the caller's spec models (storage knows no
    operators); a ``ValueError`` from it, like a malformed line, raises :class:`ImportFormatError`
    naming the line, and :func:`db.session.session_scope` then rolls back the whole import, so a bad
    file changes nothing.
    """
    read = stored = 0
    for number, line in enumerate(stream, start=1):
        if not line.strip():
            continue
        workload, device, toolchain, result = parse_export_record(line, number)
        if validate is not None:
            try:
                validate(workload)
            except ValueError as exc:
                raise ImportFormatError(f"line {number} ({workload.op} workload): {exc}") from exc
        read += 1
        stored += save_kernel(session=session, workload=workload, device=device, toolchain=toolchain, result=result)
    return ImportReport(read=read, stored=stored, kept=read - stored)
