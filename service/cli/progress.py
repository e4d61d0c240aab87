"""A tuning's progress on the terminal: one rich progress bar on a live terminal, one plain line per trial
in a log. ``warpmap tune`` reports its own trials with it, ``warpmap tunings watch`` another process's."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from search.results import Progress as TuneProgress


def progress_reporter(trials: int | None, live: bool) -> tuple[Callable[[TuneProgress], None], Progress | None]:
    """``on_progress`` for a terminal (``live``: the bar, which the caller starts and stops) or a log.
    ``trials`` is the budget (None: the tuning is bounded by time or patience alone)."""
    if live:
        bar = Progress(TextColumn("trial"), MofNCompleteColumn(), BarColumn(), TextColumn("{task.fields[status]}"),
                       TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(), console=Console(stderr=True),
                       transient=True)
        task = bar.add_task("tune", total=trials, status="")

        def show(progress: TuneProgress) -> None:
            bar.update(task, completed=progress.done, status=status_text(progress))

        return show, bar

    of = f"/{trials}" if trials else ""

    def line(progress: TuneProgress) -> None:
        try:
            eta = "" if progress.eta_s is None else f", ETA {progress.eta_s:.0f} s"
            print(f"trial {progress.done}{of}: {status_text(progress)} ({progress.elapsed_s:.0f} s{eta})",
                  file=sys.stderr, flush=True)
        except BrokenPipeError:
            # The log's reader went away (`warpmap tune ... 2>&1 | head`): the tuning is worth more than
            # its progress lines, so it goes on, silently, to the cache.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stderr.fileno())

    return line, None


def status_text(progress: TuneProgress) -> str:
    counts = ", ".join(f"{n} {status}" for status, n in sorted(progress.counts.items()))
    best = f"best {progress.best_ms:.4g} ms" if progress.best_ms is not None else "no result yet"
    return f"{best}; {counts}"
