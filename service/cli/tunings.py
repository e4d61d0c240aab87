"""``warpmap tunings ls | show | watch | cancel``: what was tuned, how far it got, every trial it
measured; following one to its end, and stopping one.

A tuning is a job of the tuning database, whichever way it came: ``warpmap tune`` files one, and so
does ``POST /v1/tunings`` (the id is the API's). Cancelling is a write to the job's row, which is all
that every runner reads: a service worker or a ``warpmap tune`` reads the status back with each
progress write and ends after the trial in progress; a queued job is skipped by whichever worker takes
it (``db.start_job`` will not start a cancelled job), so neither the service nor its queue need be up.

Examples::

    warpmap tunings ls --status running
    warpmap tunings show 12 --sort latency --limit 10
    warpmap tunings show 12 --json | jq '.trials[] | select(.status != "ok")'
    warpmap tunings watch 12 && warpmap cache ls --op matmul
    warpmap tunings cancel 12
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from db.errors import ConflictError, NotFoundError
from db.jobs import cancel_job, get_job, list_jobs
from db.models import ACTIVE_JOB_STATUSES
from db.records import JobRecord, TrialRecord
from db.repository import count_trials, list_trials
from db.session import session_scope
from service.cli.cache import MAX_ID, cache_engine, cache_session, spec_summary
from service.cli.errors import CliError
from service.cli.table import print_table

if TYPE_CHECKING:  # it loads the compiler's backends (about 90 ms): only ``watch`` needs it, and imports it there
    from search.results import Progress

#: How much of a trial's message the table shows: its first line, cut here (``--json`` has it whole).
MESSAGE_CHARS = 80


def ls_command(args: argparse.Namespace) -> int:
    if args.limit < 1:
        raise CliError(f"--limit must be at least 1, got {args.limit}")
    with cache_session(args) as session:
        jobs = list_jobs(session=session, status=args.status, op=args.op, limit=args.limit)
    if args.json:
        for job in jobs:
            print(json.dumps(tuning_document(job)))
        return 0
    print_table(["ID", "STATUS", "OP", "TARGET", "TRIALS", "BEST_MS", "WORKER", "CREATED", "SPEC"],
                [[job.id, job.status, job.workload.op, job.target, _trials_column(job), _best_ms(job.progress),
                  job.worker or "-", f"{job.created_at:%Y-%m-%d %H:%M}", spec_summary(job.workload.op,
                                                                                     job.workload.spec)]
                 for job in jobs])
    print(f"{len(jobs)} tuning(s)")
    return 0


def show_command(args: argparse.Namespace) -> int:
    if args.limit is not None and args.limit < 0:
        raise CliError(f"--limit must be 0 (all) or more, got {args.limit}")
    with cache_session(args) as session:
        job = _job(session, args.tuning)
        trials = list_trials(session=session, job_id=job.id)
    ordered = sort_trials(trials, args.sort)
    # The table stops at 50 trials unless told otherwise; JSON, read by programs, has all of them.
    limit = args.limit if args.limit is not None else (0 if args.json else 50)
    shown = ordered[:limit] if limit else ordered
    if args.json:
        print(json.dumps({"tuning": tuning_document(job), "trials_total": len(trials),
                          "trials": [trial_document(t) for t in shown]}, indent=2))
        return 0
    for line in summary_lines(job, trials):
        print(line)
    if not trials:
        return 0
    print()
    names = param_names(trials)
    # A message column only when some trial shown has one (a failure's reason, mostly).
    messages = any(t.result.message.strip() for t in shown)
    print_table(["#", "STATUS", "MEDIAN_US", "P20_US", "P80_US", "COMPILE_MS", *names] + ["MESSAGE"] * messages,
                [[t.result.number, t.result.status, _us(t.result.latency_median_us), _us(t.result.latency_p20_us),
                  _us(t.result.latency_p80_us), _ms(t.result.compile_ms),
                  *(_param(t.result.params.get(name)) for name in names)]
                 + [first_line(t.result.message)] * messages
                 for t in shown])
    if len(shown) < len(ordered):
        print(f"{len(shown)} of {len(ordered)} trials; --limit 0 shows all")
    return 0


def watch_command(args: argparse.Namespace) -> int:
    """Follow a tuning, whoever runs it, until it ends: its progress as ``warpmap tune`` shows its own,
    then the summary of ``show``. Exit status 0 when it succeeded, 1 when it failed or was cancelled."""
    if not (args.interval > 0 and math.isfinite(args.interval)):
        raise CliError(f"--interval must be a number of seconds above 0, got {args.interval}")
    from service.cli.progress import progress_reporter

    report, bar = None, None
    shown_done: int | None = None
    with cache_engine(args) as engine:
        job = _read_job(engine, args.tuning)
        if job.status == "queued":
            print(f"tuning {job.id}: queued, waiting for a worker", file=sys.stderr, flush=True)
        try:
            while True:
                progress = _progress_of(job)
                if progress is not None and progress.done != shown_done:
                    if report is None:
                        report, bar = progress_reporter(progress.budget_trials or job.budget.get("trials"),
                                                        sys.stderr.isatty())
                        if bar is not None:
                            bar.start()
                    report(progress)
                    shown_done = progress.done
                if job.status not in ACTIVE_JOB_STATUSES:
                    break
                time.sleep(args.interval)
                job = _read_job(engine, args.tuning)
        finally:
            if bar is not None:
                bar.stop()
        with session_scope(engine) as session:
            trials = list_trials(session=session, job_id=job.id)
    for line in summary_lines(job, trials):
        print(line)
    return 0 if job.status == "succeeded" else 1


def _job(session: Session, tuning: int) -> JobRecord:
    """Tuning ``tuning``, or a CliError naming it when there is none (ids past 64 bits never reach SQL)."""
    if not 0 <= tuning <= MAX_ID:
        raise CliError(f"no tuning with id {tuning} (see `warpmap tunings ls`)")
    try:
        return get_job(session=session, job_id=tuning)
    except NotFoundError as exc:
        raise CliError(f"{exc} (see `warpmap tunings ls`)") from exc


def _read_job(engine: Engine, tuning: int) -> JobRecord:
    """The job as committed now: a session of its own, so each read sees what a runner wrote since."""
    with session_scope(engine) as session:
        return _job(session, tuning)


def _progress_of(job: JobRecord) -> Progress | None:
    """The job's progress document as ``warpmap tune`` reports its own; None before its first trial ends."""
    from search.results import Progress

    document = job.progress
    if document.get("trials_done") is None:
        return None
    return Progress(int(document["trials_done"]), document.get("trials_budget"), dict(document.get("counts") or {}),
                    document.get("best_ms"), float(document.get("elapsed_s") or 0.0))


def cancel_command(args: argparse.Namespace) -> int:
    with cache_session(args) as session:
        before = _job(session, args.tuning)
        try:
            cancel_job(session=session, job_id=args.tuning)
        except ConflictError:
            ended = get_job(session=session, job_id=args.tuning).status  # read again: it may have just ended
            raise CliError(f"tuning {args.tuning} already ended as {ended}; nothing to cancel") from None
        trials = count_trials(session=session, job_id=args.tuning)
    if before.status == "running":
        where = f" on {before.worker}" if before.worker else ""
        print(f"tuning {args.tuning} cancelled: it was running{where} and stops after its trial in progress; "
              f"its {trials} measured trial(s) stay (warpmap tunings show {args.tuning})")
    else:
        print(f"tuning {args.tuning} cancelled: it was {before.status}; no worker will start it")
    return 0


def sort_trials(trials: Sequence[TrialRecord], how: str) -> list[TrialRecord]:
    """In the order they ran (as ``list_trials`` reads them), or fastest first with the failed ones after
    them, by number."""
    if how == "number":
        return list(trials)
    timed = sorted((t for t in trials if t.result.latency_median_us is not None),
                   key=lambda t: (t.result.latency_median_us, t.result.number))
    untimed = sorted((t for t in trials if t.result.latency_median_us is None), key=lambda t: t.result.number)
    return timed + untimed


def summary_lines(job: JobRecord, trials: Sequence[TrialRecord]) -> list[str]:
    """What a tuning is, where it stands and how it ended, a few lines of plain text."""
    spec = spec_summary(job.workload.op, job.workload.spec)
    budget = ", ".join(f"{name} {value}" for name, value in job.budget.items() if value is not None) or "none"
    options = ", ".join(f"{name} {value}" for name, value in job.options.items())
    lines = [
        f"tuning {job.id}: {job.status}",
        f"workload  {job.workload.op} {spec}".rstrip() + f" ({job.workload.key})",
        f"target    {job.target} on {job.device.key}",
        f"toolchain {job.toolchain.key}",
        f"strategy  {job.strategy}; budget {budget}" + (f"; {options}" if options else ""),
        f"times     {_times(job)}",
    ]
    counts: dict[str, int] = {}
    for trial in trials:
        counts[trial.result.status] = counts.get(trial.result.status, 0) + 1
    timed = [t.result.latency_median_us for t in trials if t.result.latency_median_us is not None]
    described = ", ".join(f"{count} {status}" for status, count in sorted(counts.items(), key=lambda kv: -kv[1]))
    line = f"trials    {len(trials)}" + (f" ({described})" if described else "")
    if timed:
        line += f"; fastest median {min(timed):.3f} us"
    lines.append(line)
    if job.worker:
        lines.append(f"worker    {job.worker} (attempt {job.attempts})")
    if job.error:
        lines.append(f"error     {job.error}")
    return lines


def param_names(trials: Sequence[TrialRecord]) -> list[str]:
    """Every parameter name the trials have, in the order they first appear: one column each."""
    names: dict[str, None] = {}
    for trial in trials:
        names.update(dict.fromkeys(trial.result.params))
    return list(names)


def first_line(message: str) -> str:
    line = message.strip().splitlines()[0] if message.strip() else ""
    return line if len(line) <= MESSAGE_CHARS else line[: MESSAGE_CHARS - 1] + "…"


def tuning_document(job: JobRecord) -> dict[str, Any]:
    return {
        "id": job.id,
        "status": job.status,
        "op": job.workload.op,
        "spec": dict(job.workload.spec),
        "workload": job.workload.key,
        "target": job.target,
        "device": job.device.key,
        "toolchain": job.toolchain.key,
        "strategy": job.strategy,
        "budget": dict(job.budget),
        "options": dict(job.options),
        "progress": dict(job.progress),
        "worker": job.worker,
        "attempts": job.attempts,
        "error": job.error,
        "created_at": _iso(job.created_at),
        "started_at": _iso(job.started_at),
        "finished_at": _iso(job.finished_at),
    }


def trial_document(trial: TrialRecord) -> dict[str, Any]:
    """Every field of the trial as stored, and when it was recorded."""
    return {**asdict(trial.result), "created_at": _iso(trial.created_at)}


def _trials_column(job: JobRecord) -> str:
    done = job.progress.get("trials_done")
    budget = job.progress.get("trials_budget") or job.budget.get("trials")
    if done is None:
        return "-" if budget is None else f"0/{budget}"
    return f"{done}/{budget}" if budget else str(done)


def _best_ms(progress: Mapping[str, Any]) -> str:
    best = progress.get("best_ms")
    return "-" if best is None else f"{best:.4f}"


def _times(job: JobRecord) -> str:
    text = f"created {job.created_at:%Y-%m-%d %H:%M:%S}"
    if job.started_at is not None:
        text += f", started {job.started_at:%H:%M:%S}"
    if job.finished_at is not None:
        text += f", ended {job.finished_at:%H:%M:%S}"
        if job.started_at is not None:
            text += f" ({(job.finished_at - job.started_at).total_seconds():.0f} s)"
    return text


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _param(value: Any) -> Any:
    """A parameter's value as a table cell (a list reads as a shape, ``4x2``); ``-`` where a trial lacks it."""
    if value is None:
        return "-"
    return tuple(value) if isinstance(value, list) else value


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()
