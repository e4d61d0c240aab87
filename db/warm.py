"""What the cache knows that a new tuning can start from: schedules that were best elsewhere.

A tuning of a workload on a device the cache has not seen it on starts with a few evaluations of
schedules the cache holds: the same workload's best on other devices (the same ``arch`` first, then
the most recently tuned), then the best of the same operator's nearest shapes on this device. A GPU's
best schedule is often near the top of a similar GPU's space (on the hub's convolution files the A4000's
best is the A6000's second), and a shape's best is a fair guess for a shape near it. The search
evaluates each one that is a valid point of its space, after the template's default, and goes on as
usual; one that is not is passed over at no cost.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from db.models import Device, Kernel, Workload
from db.records import DeviceInfo, WorkloadSpec

#: How many of the same operator's cached kernels are read to find the nearest shapes.
SCANNED = 500
#: Integer spec fields that name a place, not a size: a reduction's axis.
NOT_SIZES = frozenset({"axis", "axes"})


@dataclass(frozen=True)
class WarmStart:
    """A schedule to evaluate first, and where it was best (for the progress line and the trial log)."""

    schedule: dict[str, Any]
    source: str  # "other device" or "nearby shape"
    workload: str  # the workload key it was tuned for
    device: str  # the device key it was tuned on


def shape_distance(a: dict[str, Any], b: dict[str, Any]) -> float | None:
    """How far apart two specs of one operator are: the sum of |log2| of the ratios of their sizes
    (positive integer fields, and lists of them of one length: a reduction's shape); None when any
    other field (dtype, layout, an axis, a flag) differs, since a schedule does not carry over."""
    distance = 0.0
    for name in a.keys() | b.keys():
        x, y = a.get(name), b.get(name)
        if name in NOT_SIZES:
            if x != y:
                return None
        elif _sizes(x) and _sizes(y) and len(x) == len(y):
            distance += sum(abs(math.log2(p / q)) for p, q in zip(x, y, strict=True))
        elif _size(x) and _size(y):
            distance += abs(math.log2(x / y))
        elif x != y or type(x) is not type(y):
            return None
    return distance


def _size(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _sizes(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(_size(v) for v in value)


def warm_start_schedules(
    *, session: Session, workload: WorkloadSpec, device: DeviceInfo, per_source: int = 4
) -> list[WarmStart]:
    """Up to ``per_source`` schedules of each kind (see the module docstring), the likeliest first;
    none of ``workload`` on ``device`` itself (that is a cache hit, not a start)."""
    rows = session.execute(
        select(Kernel.schedule, Kernel.updated_at, Workload.key, Workload.spec, Device.key, Device.arch)
        .join(Workload, Kernel.workload_id == Workload.id)
        .join(Device, Kernel.device_id == Device.id)
        .where(Workload.op == workload.op)
        .order_by(Kernel.updated_at.desc(), Kernel.id.desc())
        .limit(SCANNED)
    ).all()
    key, spec = workload.key, dict(workload.spec)
    elsewhere = [r for r in rows if r[2] == key and r[4] != device.key]
    elsewhere.sort(key=lambda r: r[5] != device.arch)  # stable: the most recent first within each group
    nearby: list[tuple[float, Any]] = []
    for row in rows:
        if row[2] == key or row[4] != device.key:
            continue
        distance = shape_distance(spec, _spec_data(row[3]))
        if distance is not None:
            nearby.append((distance, row))
    nearby.sort(key=lambda pair: pair[0])
    found = [WarmStart(dict(r[0]), "other device", r[2], r[4]) for r in elsewhere[:per_source]]
    found += [WarmStart(dict(r[0]), "nearby shape", r[2], r[4]) for _, r in nearby[:per_source]]
    return found


def _spec_data(stored: Any) -> dict[str, Any]:
    # The column holds the versioned envelope {"schema": 1, "data": spec}.
    return dict(stored["data"]) if isinstance(stored, dict) and "data" in stored else dict(stored)
