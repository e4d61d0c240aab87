"""What the cache knows that a new tuning can start from: the workload's best schedules elsewhere.

A tuning of a workload the cache has no kernel for (under this device and toolchain) starts by measuring
up to four of the workload's best schedules the cache does hold: this device's under another toolchain
first (an upgrade of warpmap or of the compiler files kernels anew), then other devices' of the same
``arch``, then the most recently tuned others. A tuning forced to run again starts from the key's
own kernel before them all. A GPU's
best schedule is often near the top of a similar GPU's space (on the hub's convolution files the
A4000's optimum is the A6000's second best), so a cache shared by several kinds of device makes each
new one's short tuning a good deal better (README, "Search strategies"). The search takes each
schedule as the nearest point of its own space (``Space.restore``), after the template's default, and
goes on as usual.

The best schedules of the operator's nearby shapes on the same device were measured as starts too
(``bench/search_efficiency.py --warm``) and left out: on the cpu they cost trials on one measured shape
and saved a few on another, where the template's default, measured first anyway, is a start as good.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from db.models import Device, Kernel, Toolchain, Workload
from db.records import DeviceInfo, ToolchainInfo, WorkloadSpec


@dataclass(frozen=True)
class WarmStart:
    """A schedule to measure first, and the device it was best on."""

    schedule: dict[str, Any]
    device: str  # the device key
    toolchain: str  # the toolchain key


def warm_start_schedules(
    *, session: Session, workload: WorkloadSpec, device: DeviceInfo, toolchain: ToolchainInfo, limit: int = 4,
    own: bool = False,
) -> list[WarmStart]:
    """Up to ``limit`` distinct best schedules of ``workload`` from other keys of the cache, the likeliest
    first (see the module docstring). The key's own kernel is a cache hit, not a start, unless ``own``:
    a tuning forced to run again (``warpmap tune --force``) starts from it, first of all."""
    rows = session.execute(
        select(Kernel.schedule, Device.key, Device.arch, Toolchain.key)
        .join(Workload, Kernel.workload_id == Workload.id)
        .join(Device, Kernel.device_id == Device.id)
        .join(Toolchain, Kernel.toolchain_id == Toolchain.id)
        .where(Workload.key == workload.key)
        .order_by(Kernel.updated_at.desc(), Kernel.id.desc())
    ).all()
    mine = (device.key, toolchain.key)
    others = [row for row in rows if own or (row[1], row[3]) != mine]

    def rank(row: Any) -> int:
        return -1 if (row[1], row[3]) == mine else 0 if row[1] == device.key else 1 if row[2] == device.arch else 2

    ranked = sorted(others, key=rank)  # stable: within each rank the most recently tuned first
    found: list[WarmStart] = []
    for schedule, device_key, _, toolchain_key in ranked:
        if len(found) == limit:
            break
        if all(w.schedule != schedule for w in found):  # two keys that agree are one start
            found.append(WarmStart(dict(schedule), device_key, toolchain_key))
    return found
