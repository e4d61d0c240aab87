"""Which registered worker a request's target means: its device and toolchain are the cache key.

``cpu`` is served by workers of target ``cpu``; ``cuda`` by any GPU worker (``cuda`` or ``cuda:N``);
``cuda:N`` by the workers of GPU N (``cuda`` counts as GPU 0). With no target, ``cuda`` when a GPU
worker is registered, else ``cpu``. Workers that stopped are not candidates; live ones come first.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from compiler.backends import get_target
from compiler.ops import get_operator
from db import list_workers
from service.api.limits import invalid
from service.api.state import ApiState


def serves(requested: str, worker_target: str) -> bool:
    """Whether a worker of ``worker_target`` runs jobs asked for ``requested``.

    >>> serves("cuda", "cuda:1"), serves("cuda:0", "cuda"), serves("cuda:1", "cuda:0"), serves("cpu", "cuda")
    (True, True, False, False)
    """
    if requested == "cuda":
        return worker_target == "cuda" or worker_target.startswith("cuda:")
    if requested.startswith("cuda:"):
        return worker_target == requested or (requested == "cuda:0" and worker_target == "cuda")
    return worker_target == requested


def default_target(workers: Sequence[Any]) -> str:
    return "cuda" if any(serves("cuda", w.target) for w in workers if w.stopped_at is None) else "cpu"


def choose(workers: Sequence[Any], requested: str | None) -> tuple[str, Any]:
    """``(target, worker)`` for a request, or a 422 naming ``target`` when no registered worker serves it."""
    target = requested or default_target(workers)
    candidates = [w for w in workers if w.stopped_at is None and serves(target, w.target)]
    if not candidates:
        registered = sorted({w.target for w in workers if w.stopped_at is None})
        known = f"registered targets: {', '.join(registered)}" if registered else "no worker is registered"
        raise invalid(("body", "target"), f"no registered worker serves target {target!r} ({known})")
    candidates.sort(key=lambda w: (not w.alive, -w.last_seen_at.timestamp() if w.last_seen_at else 0.0, w.name))
    return target, candidates[0]


def check_template(operator: Any, target: str) -> None:
    """A 422 naming ``operator.dtype`` when the operator has no template for its dtype on ``target``'s
    kind of device (float16 on the cpu): refused here, not queued to fail in a worker."""
    family = get_target(target.partition(":")[0]).template_target
    try:
        get_operator(operator.op).template_for(operator, family)
    except ValueError as exc:
        raise invalid(("body", "operator", "dtype"), str(exc)) from None


async def registered_workers(state: ApiState) -> list[Any]:
    """Every registered worker, the list reused for ``api_worker_cache_s`` seconds."""
    async def load() -> list[Any]:
        return await state.read(list_workers, alive_within_s=state.settings.api_worker_alive_s)

    return list(await state.workers.fetch("all", load))
