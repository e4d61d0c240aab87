"""Database records to response bodies: pure functions, one per shape of CONTRACT section 4."""

from __future__ import annotations

import base64
from typing import Any, cast

from compiler.roofline import roofline_fields, stored_roofline
from db.records import CachedKernel, DeviceInfo, JobRecord, ToolchainInfo, TrialRecord
from service.api import schemas


def device(info: DeviceInfo) -> schemas.Device:
    return schemas.Device(name=info.name, arch=info.arch, driver=info.driver, compute_units=info.compute_units,
                          memory_bytes=info.memory_bytes, l2_bytes=info.l2_bytes, key=info.key)


def toolchain(info: ToolchainInfo) -> schemas.Toolchain:
    return schemas.Toolchain(warpmap=info.warpmap, nvrtc=info.nvrtc, host_compiler=info.host_compiler,
                             key=info.key)


def target_of(info: DeviceInfo) -> str:
    """``cuda`` for a compute capability (``sm_90``), ``cpu`` for a host ISA.

    >>> target_of(DeviceInfo("H100", "sm_90", "580")), target_of(DeviceInfo("EPYC", "cpu-f32x16-ab12", "none"))
    ('cuda', 'cpu')
    """
    return "cuda" if info.arch.startswith("sm_") else "cpu"


def _summary_fields(kernel: CachedKernel) -> dict[str, Any]:
    result = kernel.result
    return {
        "id": kernel.id, "operator": {"op": kernel.workload.op, **dict(kernel.workload.spec)},
        "target": target_of(kernel.device), "device": device(kernel.device), "toolchain": toolchain(kernel.toolchain),
        "schedule": dict(result.schedule), "latency_ms": result.latency_us / 1e3,
        "latency_p20_ms": _ms(result.latency_p20_us), "latency_p80_ms": _ms(result.latency_p80_us),
        "gflops": result.gflops, "gbs": result.gbs, "peak_gflops": result.peak_gflops,
        "bandwidth_gbs": result.bandwidth_gbs, **roofline_fields(stored_roofline(result)),
        "trials_used": result.trials_used, "hits": kernel.hits, "created_at": kernel.created_at,
        "updated_at": kernel.updated_at,
    }


def _ms(microseconds: float | None) -> float | None:
    return None if microseconds is None else microseconds / 1e3


def summary(kernel: CachedKernel) -> schemas.KernelSummary:
    return schemas.KernelSummary(**_summary_fields(kernel))


def kernel(kernel: CachedKernel, exact: bool | None = None) -> schemas.Kernel:
    result = kernel.result
    binary = None if result.binary is None else base64.b64encode(result.binary).decode("ascii")
    return schemas.Kernel(
        **_summary_fields(kernel), entry=result.entry, source=result.source, binary=binary, grid=list(result.grid),
        block=list(result.block), shared_bytes=result.shared_bytes,
        params=[schemas.Param(**dict(p)) for p in result.params],
        program=None if result.program is None else dict(result.program), exact=exact,
    )


def tuning(job: JobRecord, kernel_id: int | None) -> schemas.Tuning:
    options = dict(job.options or {})
    progress = {k: v for k, v in dict(job.progress or {}).items() if k in schemas.Progress.model_fields}
    # The wm_jobs CHECK constraint holds status to db.models.JOB_STATUSES, the values JobStatus spells.
    status = cast(schemas.JobStatus, job.status)
    return schemas.Tuning(
        id=job.id, status=status, operator={"op": job.workload.op, **dict(job.workload.spec)},
        target=job.target, queue=job.queue, device=device(job.device), strategy=job.strategy,
        budget=dict(job.budget), level=int(options.get("level", 2)),
        warm_start=bool(options.get("warm_start", True)), worker=job.worker,
        progress=schemas.Progress(**progress), error=job.error, attempts=job.attempts, created_at=job.created_at,
        started_at=job.started_at, finished_at=job.finished_at, kernel_id=kernel_id,
    )


def trial(record: TrialRecord) -> schemas.Trial:
    result = record.result
    return schemas.Trial(
        number=result.number, status=result.status, params=dict(result.params), message=result.message,
        latency_ms=_ms(result.latency_median_us), latency_p20_ms=_ms(result.latency_p20_us),
        latency_p80_ms=_ms(result.latency_p80_us), samples=result.samples, compile_ms=result.compile_ms,
        registers=result.registers, shared_bytes=result.shared_bytes,
    )


def worker(record: Any) -> schemas.Worker:
    return schemas.Worker(name=record.name, target=record.target, queue=record.queue, device=device(record.device),
                          alive=record.alive, last_seen_at=record.last_seen_at, job_id=record.job_id)
