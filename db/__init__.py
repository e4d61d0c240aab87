"""The tuning database: models, repository functions, cache keys.

The public surface lives here; every repository function is keyword-only and takes ``session=``
from :func:`session_scope`::

    engine = create_engine_for(url)
    upgrade(url)
    with session_scope(engine) as session:
        stored = save_kernel(session=session, workload=w, device=d, toolchain=t, result=r)
        hit = lookup_kernel(session=session, workload=w, device=d, toolchain=t, nearest=True)
"""

from db.api_keys import authenticate_api_key, create_api_key, list_api_keys, revoke_api_key
from db.cache import (
    CacheStats,
    EvictionReport,
    ImportFormatError,
    ImportReport,
    KernelFilter,
    cache_stats,
    evict,
    export_jsonl,
    import_jsonl,
    list_kernels,
)
from db.errors import (
    ConflictError,
    DatabaseError,
    NotFoundError,
    SchemaVersionError,
    UnavailableError,
)
from db.jobs import (
    cancel_job,
    count_jobs,
    end_job,
    get_job,
    job_kernel_ids,
    list_jobs,
    record_progress,
    release_job,
    start_job,
    submit_job,
    submit_unless_tuned,
)
from db.migrate import current_revision, downgrade, head_revision, upgrade
from db.records import (
    ApiKeyRecord,
    CachedKernel,
    CacheHit,
    DeviceInfo,
    JobRecord,
    KernelResult,
    ToolchainInfo,
    TrialRecord,
    TrialResult,
    WorkerRecord,
    WorkloadSpec,
)
from db.repository import (
    count_trials,
    ensure_device,
    ensure_toolchain,
    ensure_workload,
    get_kernel,
    list_trials,
    lookup_kernel,
    record_trial,
    save_kernel,
)
from db.session import create_engine_for, session_scope
from db.warm import WarmStart, warm_start_schedules
from db.workers import list_workers, register_worker, stop_worker, touch_worker

__all__ = [
    "ApiKeyRecord",
    "CacheHit",
    "CacheStats",
    "CachedKernel",
    "ConflictError",
    "DatabaseError",
    "DeviceInfo",
    "EvictionReport",
    "ImportFormatError",
    "ImportReport",
    "JobRecord",
    "KernelFilter",
    "KernelResult",
    "NotFoundError",
    "SchemaVersionError",
    "ToolchainInfo",
    "TrialRecord",
    "TrialResult",
    "UnavailableError",
    "WarmStart",
    "WorkerRecord",
    "WorkloadSpec",
    "authenticate_api_key",
    "cache_stats",
    "cancel_job",
    "count_jobs",
    "count_trials",
    "create_api_key",
    "create_engine_for",
    "current_revision",
    "downgrade",
    "end_job",
    "ensure_device",
    "ensure_toolchain",
    "ensure_workload",
    "evict",
    "export_jsonl",
    "get_job",
    "get_kernel",
    "head_revision",
    "import_jsonl",
    "job_kernel_ids",
    "list_api_keys",
    "list_jobs",
    "list_kernels",
    "list_trials",
    "list_workers",
    "lookup_kernel",
    "record_progress",
    "record_trial",
    "register_worker",
    "release_job",
    "revoke_api_key",
    "save_kernel",
    "session_scope",
    "start_job",
    "stop_worker",
    "submit_job",
    "submit_unless_tuned",
    "touch_worker",
    "upgrade",
    "warm_start_schedules",
]
