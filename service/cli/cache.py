"""``warpmap cache ls | show | stats | evict | export | import``: keep the kernel cache in bounds.

Examples::

    warpmap cache ls --op matmul --device h100
    warpmap cache show 17 --source
    warpmap cache show matmul:1776f0bef7b8c162
    warpmap cache evict --older-than 90d --max-size 2GiB
    warpmap cache export --arch sm_90 cache.jsonl      # then, on another cluster:
    warpmap cache import cache.jsonl
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal, TextIO

from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from compiler.roofline import roofline_fields, stored_roofline
from db.cache import (
    KernelFilter,
    cache_stats,
    evict,
    export_jsonl,
    list_kernels,
    to_export_record,
)
from db.errors import DatabaseError
from db.migrate import current_revision, head_revision
from db.records import CachedKernel, KernelResult
from db.repository import get_kernel
from db.session import create_engine_for, session_scope
from service.cli.db import database_url, describe_revision, shown
from service.cli.errors import CliError
from service.cli.table import format_value, print_table

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_ID = re.compile(r"[0-9]+")
#: Kernel and tuning ids are 64-bit signed integers in every database we support.
MAX_ID = 2**63 - 1
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]i?b?|b)?\s*$", re.IGNORECASE)


def parse_duration(text: str) -> timedelta:
    """``90s``, ``45m``, ``12h``, ``30d``, ``2w`` → a timedelta.

    >>> parse_duration("36h")
    datetime.timedelta(days=1, seconds=43200)
    """
    match = _DURATION.match(text)
    if match is None:
        raise CliError(f"{text!r} is not a duration; use a number and a unit: 90s, 45m, 12h, 30d, 2w")
    return timedelta(seconds=float(match[1]) * _DURATION_UNITS[match[2]])


def parse_size(text: str) -> int:
    """Bytes, with decimal (``KB``, ``MB``, ``GB``, ``TB``) or binary (``KiB`` ...) units.

    >>> parse_size("1.5GB"), parse_size("2KiB"), parse_size("512")
    (1500000000, 2048, 512)
    """
    match = _SIZE.match(text)
    if match is None:
        raise CliError(f"{text!r} is not a size; use e.g. 500MB, 2GiB or a number of bytes")
    unit = (match[2] or "b").lower()
    if unit == "b":
        return int(float(match[1]))
    power = "kmgt".index(unit[0]) + 1
    return int(float(match[1]) * ((1024 if "i" in unit else 1000) ** power))


def human_bytes(count: int) -> str:
    size = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


@contextmanager
def cache_session(args: argparse.Namespace) -> Iterator[Session]:
    """A session on a database that is migrated to head; database errors become CLI errors."""
    with cache_engine(args) as engine, session_scope(engine) as session:
        yield session


@contextmanager
def cache_engine(args: argparse.Namespace) -> Iterator[Engine]:
    """An engine on a database that is migrated to head, for a command that reads it more than once (each
    read in a session of its own, which sees what was committed since); database errors become CLI errors."""
    url = database_url(args)
    try:
        revision = current_revision(url)
        if revision != head_revision():
            raise CliError(f"database {shown(url)} is {describe_revision(revision)}")
        engine = create_engine_for(url)
        try:
            yield engine
        finally:
            engine.dispose()
    except DatabaseError as exc:
        raise CliError(f"{shown(url)}: {exc}") from exc


def _filter(args: argparse.Namespace) -> KernelFilter:
    before = datetime.now(UTC) - parse_duration(args.older_than) if args.older_than else None
    return KernelFilter(
        op=args.op,
        workload=args.workload,
        device=args.device,
        arch=args.arch,
        toolchain=args.toolchain,
        updated_before=before,
    )


def ls_command(args: argparse.Namespace) -> int:
    if args.limit < 1:
        raise CliError(f"--limit must be at least 1, got {args.limit}")
    with cache_session(args) as session:
        kernels = list_kernels(session=session, where=_filter(args), limit=args.limit)
    if args.json:
        for k in kernels:
            summary = {
                "id": k.id,
                "workload": k.workload.key,
                "spec": dict(k.workload.spec),
                "device": k.device.key,
                "toolchain": k.toolchain.key,
            }
            print(json.dumps({**summary, "latency_us": k.result.latency_us,
                              **roofline_fields(stored_roofline(k.result)),
                              "size_bytes": k.size_bytes}))
        return 0
    print_table(["ID", "WORKLOAD", "DEVICE", "LATENCY_US", "ROOFLINE", "HITS", "SIZE", "UPDATED", "SPEC"],
                [[k.id, k.workload.key, k.device.key, f"{k.result.latency_us:.3f}", _roofline(k.result), k.hits,
                  human_bytes(k.size_bytes), f"{k.updated_at:%Y-%m-%d %H:%M}", spec_summary(k.workload.op,
                                                                                          k.workload.spec)]
                 for k in kernels])
    print(f"{len(kernels)} kernel(s)")
    return 0


def spec_summary(op: str, spec: Mapping[str, Any]) -> str:
    """The fields of a stored spec that differ from the operator's defaults, briefly: ``m=512 n=512
    k=512``, ``shape=13x67 axis=1 kind=sum``; every field for an operator this build does not know."""
    from compiler.ops import operators  # here: only a listing with rows pays for the templates

    known = operators()
    model = known[op].spec_model if op in known else None
    parts = []
    for name, value in spec.items():
        field = None if model is None else model.model_fields.get(name)
        default = None if field is None or field.is_required() else field.get_default(call_default_factory=True)
        if name == "op" or (field is not None and default is not None and json.loads(json.dumps(default)) == value):
            continue
        shown = format_value(tuple(value)) if isinstance(value, list) else value
        parts.append(f"{name}={shown}")
    return " ".join(parts)


def _roofline(result: KernelResult) -> str:
    """``14% memory``: the fraction of its tuning's roofline and the roof that binds; ``-`` if not known."""
    place = stored_roofline(result)
    return "-" if place is None else f"{100 * place.fraction:.0f}% {place.bound}"



def _described(kernel: CachedKernel, *, with_source: bool) -> dict[str, Any]:
    record = to_export_record(kernel)
    if not with_source:
        record["kernel"]["source"] = f"<{len(kernel.result.source)} characters; --source prints it>"
    binary = kernel.result.binary
    record["kernel"]["binary_b64"] = None if binary is None else f"<{len(binary)} bytes>"
    record.update(id=kernel.id, workload_key=kernel.workload.key, device_key=kernel.device.key)
    record.update(toolchain_key=kernel.toolchain.key, hits=kernel.hits, size_bytes=kernel.size_bytes)
    record.update(updated_at=kernel.updated_at.isoformat(), created_at=kernel.created_at.isoformat())
    return record


def show_command(args: argparse.Namespace) -> int:
    """A kernel by id, or every kernel of a workload key (one per device and toolchain): a summary each,
    with ``--source`` its source; with ``--json`` one JSON object by id, a JSON list by workload key."""
    with cache_session(args) as session:
        if _ID.fullmatch(args.kernel):
            if int(args.kernel) > MAX_ID:
                raise CliError(f"no cached kernel with id {args.kernel}: ids are at most {MAX_ID}")
            try:
                kernels = [get_kernel(session=session, kernel_id=int(args.kernel))]
            except DatabaseError as exc:
                raise CliError(f"{exc} (see `warpmap cache ls`)") from exc
        else:
            kernels = list_kernels(session=session, where=KernelFilter(workload=args.kernel))
    if not kernels:
        raise CliError(f"no cached kernel with id or workload key {args.kernel!r} (see `warpmap cache ls`)")
    if args.json:
        described = [_described(k, with_source=args.source) for k in kernels]
        print(json.dumps(described[0] if _ID.fullmatch(args.kernel) else described, indent=2, sort_keys=True))
        return 0
    print("\n\n".join("\n".join(summary_lines(k) + (source_lines(k.result) if args.source else []))
                      for k in kernels))
    return 0


def summary_lines(kernel: CachedKernel) -> list[str]:
    """A cached kernel in a few lines: what it computes, where, how fast, against which roofs."""
    result = kernel.result
    spec = spec_summary(kernel.workload.op, kernel.workload.spec)
    latency = f"{result.latency_us:.3f} us"
    if result.latency_p20_us is not None and result.latency_p80_us is not None:
        latency += f" (p20 {result.latency_p20_us:.3f}, p80 {result.latency_p80_us:.3f})"
    rates = [f"{value:.1f} {unit}" for value, unit in ((result.gflops, "GFLOP/s"), (result.gbs, "GB/s"))
             if value is not None]
    roofs = [f"{value:.0f} {unit}" for value, unit in ((result.peak_gflops, "GFLOP/s peak"),
                                                       (result.bandwidth_gbs, "GB/s"))
             if value is not None]
    place = stored_roofline(result)
    launches = _launches(result)
    lines = [
        f"kernel {kernel.id}: {kernel.workload.op} {spec}".rstrip() + f" ({kernel.workload.key})",
        f"device    {kernel.device.key}",
        f"toolchain {kernel.toolchain.key}",
        f"schedule  {', '.join(f'{k}={v}' for k, v in result.schedule.items())}",
        f"latency   {latency}" + (f"; {', '.join(rates)}" if rates else ""),
    ]
    if place is not None:
        lines.append(f"roofline  {100 * place.fraction:.0f}% {place.bound}-bound, of the tuning's roofs "
                     f"({', '.join(roofs)})")
    lines += [
        f"tuned     {kernel.created_at:%Y-%m-%d %H:%M} in {result.trials_used} trials; updated "
        f"{kernel.updated_at:%Y-%m-%d %H:%M}; served {kernel.hits} time(s)",
        "launches  " + "; ".join(f"{launch['entry']} grid {format_value(tuple(launch['grid']))} "
                                  f"block {format_value(tuple(launch['block']))}"
                                  + (f" shared {launch['shared_bytes']} B" if launch.get("shared_bytes") else "")
                                  for launch in launches),
        f"size      {human_bytes(kernel.size_bytes)} (binary {human_bytes(len(result.binary or b''))})",
    ]
    return lines


def _launches(result: KernelResult) -> list[dict[str, Any]]:
    """The stored program's launches, or the kernel's own record as its one launch."""
    return (result.program or {}).get("launches") or [
        {"entry": result.entry, "grid": result.grid, "block": result.block, "shared_bytes": result.shared_bytes,
         "source": result.source}]


def source_lines(result: KernelResult) -> list[str]:
    """Each launch's source under a heading (the kernel's own source when it has a single launch)."""
    lines: list[str] = []
    for launch in _launches(result):
        lines += ["", f"--- source of {launch['entry']} ---", launch["source"].rstrip("\n")]
    return lines


def stats_command(args: argparse.Namespace) -> int:
    with cache_session(args) as session:
        stats = cache_stats(session=session)
    if args.json:
        print(json.dumps({"rows": stats.rows, "bytes": stats.bytes}))
        return 0
    print(f"kernels: {stats.rows}\nsize:    {human_bytes(stats.bytes)} ({stats.bytes} bytes)")
    for title, groups in (("device", stats.by_device), ("operator", stats.by_op)):
        if groups:
            print()
            print_table([title, "kernels", "size"], [[name, rows, human_bytes(size)] for name, rows, size in groups])
    return 0


def evict_command(args: argparse.Namespace) -> int:
    if args.older_than is None and args.max_size is None:
        raise CliError("say what to evict: --older-than DURATION and/or --max-size SIZE")
    older_than = datetime.now(UTC) - parse_duration(args.older_than) if args.older_than else None
    max_bytes = parse_size(args.max_size) if args.max_size else None
    with cache_session(args) as session:
        report = evict(session=session, older_than=older_than, max_bytes=max_bytes, dry_run=args.dry_run)
    verb = "would remove" if args.dry_run else "removed"
    print(
        f"{verb} {report.removed} kernel(s), {human_bytes(report.removed_bytes)}; "
        f"{report.remaining} left, {human_bytes(report.remaining_bytes)}"
    )
    return 0


def export_command(args: argparse.Namespace) -> int:
    with cache_session(args) as session:
        if args.file == "-":
            count = export_jsonl(session=session, stream=sys.stdout, where=_filter(args))
        else:
            with open_file(args.file, "w") as stream:
                count = export_jsonl(session=session, stream=stream, where=_filter(args))
    print(f"exported {count} kernel(s)", file=sys.stderr)
    return 0


def open_file(name: str, mode: Literal["r", "w"]) -> TextIO:
    try:
        return Path(name).open(mode, encoding="utf-8")
    except OSError as exc:
        raise CliError(f"cannot open {name!r}: {exc.strerror}") from exc
