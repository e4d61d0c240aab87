"""``warpmap tune``: search a workload's schedule space on a target, keep the best in the tuning cache.

The cache is looked up first (workload, device, toolchain): a hit is printed as it is stored, unless
``--force``. A tuning's Optuna study lives in the same database, one per workload, device, toolchain
and level, so an interrupted tuning resumes where it stopped and never measures a point twice. The
tuning is a job like the service's (``wm_jobs``, its progress and every trial in ``wm_trials``), so the
API reports it the same way; a workload that a service or another ``tune`` is tuning now is refused,
and ``warpmap tunings cancel`` (or the API's ``DELETE``) stops this one after its trial in progress.
Unless ``--cold``, the tuning first measures the workload's best schedules that the cache holds under
other devices or toolchains (``db.warm`` says which).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import socket
import sys
from datetime import datetime
from typing import Any

from compiler.backends import Target, get_target
from compiler.ops import get_operator
from compiler.roofline import roofline_fields, stored_roofline
from compiler.space import EmptySpaceError
from db.jobs import end_job, record_progress, start_job, submit_job
from db.migrate import current_revision, head_revision, upgrade
from db.records import CacheHit, DeviceInfo, ToolchainInfo, WorkloadSpec
from db.repository import count_trials, lookup_kernel, record_trial, save_kernel
from db.session import create_engine_for, session_scope
from db.warm import WarmStart, warm_start_schedules
from search.measure import available_memory_bytes
from search.records import cache_identity, program_source, tuned_result
from search.strategies import Budget, StudyMismatchError
from search.tune import Progress as TuneProgress
from search.tune import TuneError, TuneResult, tune
from service.cli.cache import human_bytes
from service.cli.check import parse_spec_argument
from service.cli.db import database_url, shown
from service.cli.errors import CliError
from service.cli.progress import progress_reporter
from service.cli.specs import check_memory
from service.cli.table import print_table
from service.jobs.devices import default_worker_name, queue_name
from service.jobs.runner import progress_document, trial_result
from service.tuning import study_key, warpmap_version


def validate_options(args: argparse.Namespace) -> None:
    if args.trials < 1:
        raise CliError(f"--trials must be at least 1, got {args.trials}")
    if args.seconds is not None and not (args.seconds > 0 and math.isfinite(args.seconds)):
        raise CliError(f"--seconds must be a number above 0, got {args.seconds}")
    if args.patience is not None and args.patience < 1:
        raise CliError(f"--patience must be at least 1, got {args.patience}")
    if not (args.timeout > 0 and math.isfinite(args.timeout)):
        raise CliError(f"--timeout must be a number of seconds above 0, got {args.timeout}")
    if args.seed < 0:
        raise CliError(f"--seed must be 0 or more, got {args.seed}")


def choose_target(name: str | None) -> Target:
    """The target ``--target`` names, else the GPU when one can run kernels here, else the host."""
    if name is None:
        cuda = get_target("cuda")
        name = "cuda" if cuda.unavailable_reason() is None else "cpu"
    target = get_target(name)
    reason = target.unavailable_reason()
    if reason is not None:
        raise CliError(f"target {name!r} cannot run kernels here: {reason}")
    return target


def check_space(spec: Any, target: Target, level: int) -> None:
    """A CliError when the target has no template for the spec, or its space has no schedule for it."""
    try:
        get_operator(spec.op).space(spec, target.device(), level)
    except EmptySpaceError as exc:
        raise CliError(f"no schedule can serve this spec on {target.name}: {exc}") from None
    except ValueError as exc:  # no template for this dtype on this target, or no such level
        raise CliError(str(exc)) from None


def ready_database(url: str) -> None:
    """Bring an embedded SQLite database to the newest schema; a server's schema is its operator's to move."""
    if current_revision(url) == head_revision():
        return
    if url.startswith("sqlite"):
        upgrade(url)
        return
    raise CliError(f"the database at {shown(url)} is not at the newest schema; run `warpmap db upgrade` first")


def run(args: argparse.Namespace) -> int:
    validate_options(args)
    spec = parse_spec_argument(args.spec)
    target = choose_target(args.target)
    check_space(spec, target, args.level)
    check_memory(spec, available_memory_bytes())
    url = database_url(args)
    ready_database(url)
    workload = WorkloadSpec(op=spec.op, spec=spec.model_dump(mode="json"))
    device, toolchain = cache_identity(target.fingerprint(), warpmap_version())
    engine = create_engine_for(url)
    try:
        if not args.force:
            with session_scope(engine) as session:
                hit = lookup_kernel(session=session, workload=workload, device=device, toolchain=toolchain)
            if hit is not None:
                _print(_from_cache(hit, target.name), args.json)
                return 0
        warm: list[WarmStart] = []
        if not args.cold:
            with session_scope(engine) as session:
                warm = warm_start_schedules(session=session, workload=workload, device=device, toolchain=toolchain,
                                            own=args.force)
        job = _JobRecorder.open(engine, workload, device, toolchain, args, target.name)
        try:
            result = _tune(args, spec, target, url, study_key(workload, device, toolchain, args.level), job,
                           [w.schedule for w in warm], _warm_text(warm, device, toolchain) if warm else None)
        except BaseException as exc:
            job.end("failed", "interrupted" if isinstance(exc, KeyboardInterrupt) else f"{type(exc).__name__}: {exc}")
            raise
        if job.cancelled:
            print(f"warpmap tune: tuning {job.job_id} was cancelled; no kernel was filed, its {job.number} "
                  f"measured trial(s) stay: warpmap tunings show {job.job_id}", file=sys.stderr)
            return 1
        if result is None:
            job.end("failed", "no correct candidate was found")
            print(f"warpmap tune: every trial and why it failed: warpmap tunings show {job.job_id}", file=sys.stderr)
            return 1
        with session_scope(engine) as session:
            save_kernel(session=session, workload=workload, device=device, toolchain=toolchain,
                        result=tuned_result(result))
        job.end("succeeded", None)
    finally:
        engine.dispose()
    _print({**_from_tuning(result), "warm_start": len(warm), "tuning": job.job_id}, args.json)
    return 0


def _abandoned(worker: str | None) -> bool:
    """Whether ``worker`` is a ``warpmap tune`` of this host that is no longer running (killed mid-tuning):
    its job is taken over, and its study resumed, rather than refused forever."""
    host, _, rest = (worker or "").partition(":")
    pid, _, name = rest.partition(":")
    if host != socket.gethostname() or not name.startswith("tune:") or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, another account's
        return False
    return False


class _JobRecorder:
    """The tuning's job record: its trials and progress written as they come, like a worker's."""

    def __init__(self, engine: Any, job_id: int, first_number: int) -> None:
        self.engine, self.job_id, self.number = engine, job_id, first_number
        # Set when a progress write reads the job back cancelled (`warpmap tunings cancel`, the API's DELETE).
        self.cancelled = False

    @classmethod
    def open(cls, engine: Any, workload: WorkloadSpec, device: DeviceInfo, toolchain: ToolchainInfo,
             args: argparse.Namespace, target: str) -> _JobRecorder:
        budget = {"trials": args.trials, "seconds": args.seconds, "patience": args.patience}
        with session_scope(engine) as session:
            job, created = submit_job(session=session, workload=workload, device=device, toolchain=toolchain,
                                      strategy=args.strategy, budget=budget, target=target,
                                      queue=queue_name(target, device),
                                      options={"level": args.level, "seed": args.seed, "timeout_s": args.timeout,
                                               "warm_start": not args.cold})
            if not created and not _abandoned(job.worker):
                raise CliError(f"this workload is being tuned on this device now (job {job.id}, {job.status}"
                               f"{f' on {job.worker}' if job.worker else ''}); follow it with `warpmap tunings "
                               f"show {job.id}`, or stop it with `warpmap tunings cancel {job.id}`")
            start_job(session=session, job_id=job.id, worker=default_worker_name(f"tune:{target}"))
            return cls(engine, job.id, count_trials(session=session, job_id=job.id))

    def trial(self, trial: Any) -> None:
        with session_scope(self.engine) as session:
            record_trial(session=session, job_id=self.job_id, trial=trial_result(trial, self.number))
        self.number += 1

    def progress(self, progress: TuneProgress) -> None:
        with session_scope(self.engine) as session:
            current = record_progress(session=session, job_id=self.job_id, progress=progress_document(progress))
        self.cancelled = current.status == "cancelled"

    def end(self, status: str, error: str | None) -> None:
        with session_scope(self.engine) as session:
            end_job(session=session, job_id=self.job_id, status=status, error=error)


def _tune(args: argparse.Namespace, spec: Any, target: Target, url: str, study_key: str,
          job: _JobRecorder, warm: list[dict[str, Any]], warm_note: str | None) -> TuneResult | None:
    import optuna  # here, not above: start-up cost of every other command

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    budget = Budget(trials=args.trials, seconds=args.seconds, patience=args.patience)
    storage = optuna.storages.RDBStorage(url)
    if args.force:  # a forced tuning starts over; without it, an interrupted one resumes its study
        with contextlib.suppress(KeyError):
            optuna.delete_study(study_name=study_key, storage=storage)
    live = sys.stderr.isatty()
    report, bar = progress_reporter(args.trials, live)
    print(f"tuning {spec.op} {spec.canonical_json()} on {target.name} ({args.strategy}, up to {args.trials} "
          "trials)", file=sys.stderr, flush=True)
    if warm_note:
        print(f"warm start: {warm_note} from the cache, measured first", file=sys.stderr, flush=True)
    try:
        if bar is not None:
            bar.start()

        def progressed(progress: TuneProgress) -> None:
            job.progress(progress)
            report(progress)

        return tune(spec, target, strategy=args.strategy, budget=budget, level=args.level, seed=args.seed,
                    storage=storage, study_key=study_key, timeout_s=args.timeout, on_progress=progressed,
                    sink=job.trial, should_stop=lambda: job.cancelled, warm_start=warm)
    except EmptySpaceError as exc:
        raise CliError(f"no schedule can serve this spec on {target.name}: {exc}") from None
    except StudyMismatchError as exc:
        raise CliError(f"{exc}; tune with --level {args.level} again after `warpmap cache evict`, or pick "
                       "another database") from None
    except TuneError as exc:
        if not job.cancelled:  # cancelled before anything was correct: the caller says so
            print(f"warpmap tune: {exc}", file=sys.stderr)
        return None
    finally:
        if bar is not None:
            bar.stop()
        storage.engine.dispose()


def _warm_text(warm: list[WarmStart], device: DeviceInfo, toolchain: ToolchainInfo) -> str:
    """``3 schedules (this workload's best on 2 other devices and under 1 other toolchain here)``; ``here``
    names the key's own kernel, which a forced tuning starts from."""
    mine = sum((w.device, w.toolchain) == (device.key, toolchain.key) for w in warm)
    here = sum(w.device == device.key for w in warm) - mine
    elsewhere = len(warm) - here - mine
    parts = ["here" if mine else "",
             f"on {elsewhere} other device{'s' if elsewhere > 1 else ''}" if elsewhere else "",
             f"under {here} other toolchain{'s' if here > 1 else ''} here" if here else ""]
    return (f"{len(warm)} schedule{'s' if len(warm) > 1 else ''} (this workload's best "
            f"{' and '.join(p for p in parts if p)})")


def _from_cache(hit: CacheHit, target: str) -> dict[str, Any]:
    kernel = hit.kernel.result
    return {
        "cache": "hit", "target": target, "schedule": dict(kernel.schedule), "latency_ms": kernel.latency_us / 1e3,
        **({"latency_p20_ms": kernel.latency_p20_us / 1e3, "latency_p80_ms": kernel.latency_p80_us / 1e3}
           if kernel.latency_p20_us is not None and kernel.latency_p80_us is not None else {}),
        "gflops": kernel.gflops, "gbs": kernel.gbs, "trials": kernel.trials_used,
        "peak_gflops": kernel.peak_gflops, "bandwidth_gbs": kernel.bandwidth_gbs,
        **roofline_fields(stored_roofline(kernel)),
        # The operands' least traffic, which the stored GB/s and median imply (bytes = GB/s x us x 1e3).
        **({"min_bytes": round(kernel.gbs * kernel.latency_us * 1e3)} if kernel.gbs is not None else {}),
        # When the stored figure was measured and how often it has been served: a user deciding whether
        # to --force a new tuning (a new driver, a busier machine) needs its age.
        "tuned_at": hit.kernel.updated_at.isoformat(), "hits": hit.kernel.hits,
        "kernel": {"id": hit.kernel.id, "entry": kernel.entry, "source": kernel.source},
    }


def _from_tuning(result: TuneResult) -> dict[str, Any]:
    counts: dict[str, int] = {}
    for trial in result.trials:
        counts[trial.status.value] = counts.get(trial.status.value, 0) + 1
    return {
        "cache": "miss", "target": result.target, "schedule": dict(result.values),
        "latency_ms": result.latency_ms,
        "latency_p20_ms": result.samples.p20_ns / 1e6, "latency_p80_ms": result.samples.p80_ns / 1e6,
        "gflops": result.gflops, "gbs": result.gbs, "peak_fraction": result.peak_fraction,
        "peak_gflops": result.peak_gflops, "peak_measured": result.peak_measured,
        "bandwidth_gbs": result.bandwidth_gbs, "bandwidth_measured": result.bandwidth_measured,
        "roofline_fraction": result.roofline_fraction, "bound": result.bound, "min_bytes": result.min_bytes,
        "trials": len(result.trials), "statuses": counts, "stopped": result.stopped,
        # How many of the fastest were re-timed side by side: the reported latency is the winner's
        # re-timed median, which may differ from the figure the progress showed for its trial.
        "retimed": len(result.retimed),
        "kernel": {"entry": result.artifact.program.name, "source": program_source(result.artifact)},
    }


def _peak_how(report: dict[str, Any]) -> str:
    # Say what the peak is: measured, or an estimate by the clock the OS reports (which boost exceeds);
    # a cache hit gives the roofs its tuning held it against.
    if "peak_measured" not in report:
        return "as its tuning measured it"
    return ("measured: register FMAs on every core" if report["peak_measured"]
            else "estimated from the device's description")


def _roofline_row(report: dict[str, Any]) -> str:
    """The fraction of the roofline, and the roof that binds with where its figure comes from."""
    share = f"{100 * report['roofline_fraction']:.0f}%"
    if report["bound"] == "compute":
        return f"{share}: compute-bound, {report['peak_gflops']:.0f} GFLOP/s ({_peak_how(report)})"
    if "bandwidth_measured" not in report:
        how = "as its tuning measured it"
    else:
        how = ("measured: vector loads of as many bytes on every core" if report["bandwidth_measured"]
               else "estimated from the device's description")
    footprint = f" over its {human_bytes(report['min_bytes'])}" if "min_bytes" in report else ""
    return f"{share}: memory-bound, {report['bandwidth_gbs']:.0f} GB/s{footprint} ({how})"


def _print(report: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(report))
        return
    rows: list[tuple[str, str]] = []
    rows.append(("schedule", ", ".join(f"{k}={v}" for k, v in report["schedule"].items())))
    retimed = report.get("retimed", 0)
    rows.append(("latency", f"{report['latency_ms']:.4g} ms" + (
        f" (p20 {report['latency_p20_ms']:.4g}, p80 {report['latency_p80_ms']:.4g})"
        if "latency_p20_ms" in report else "") + (
        f"; the fastest of {retimed} re-timed side by side" if retimed > 1 else "")))
    if report.get("gflops") is not None:
        rows.append(("GFLOP/s", f"{report['gflops']:.1f}"))
    if report.get("gbs") is not None:
        rows.append(("GB/s", f"{report['gbs']:.1f} (the operands' least traffic over the median)"))
    if report.get("roofline_fraction") is not None:
        rows.append(("of roofline", _roofline_row(report)))
    elif report.get("peak_fraction") is not None:
        rows.append(("of peak", f"{100 * report['peak_fraction']:.0f}% of {report['peak_gflops']:.0f} GFLOP/s "
                                f"({_peak_how(report)})"))
    rows.append(("trials", str(report["trials"]) + (
        f" ({', '.join(f'{n} {s}' for s, n in sorted(report['statuses'].items()))}; stopped: {report['stopped']})"
        if "statuses" in report else "")))
    if "tuning" in report:
        rows.append(("tuning", f"{report['tuning']} (its trials: warpmap tunings show {report['tuning']})"))
    if "tuned_at" in report:
        when = datetime.fromisoformat(report["tuned_at"]).strftime("%Y-%m-%d %H:%M UTC")
        rows.append(("tuned", f"{when}, served {report['hits']} time(s) from the cache; --force tunes again"))
    print_table(("field", "value"), rows, title=f"{report['target']}: {report['cache']}")
