"""How long the ``warpmap`` command takes to start: the median wall time of a few light commands.

Each command runs as a fresh ``python -m service.cli`` process, so the figure is what a user waits
for before anything useful happens. ``cache ls`` runs on an empty database, migrated once first.
The caches and the database live in a temporary folder unless ``--cache-dir`` names one.

Usage: ``python bench/cli_startup.py [--runs 7] [--python PATH] [--repo DIR] [--cache-dir DIR]``

``--python`` and ``--repo`` time another checkout, e.g. the old main:
``python bench/cli_startup.py --python /work/main/.venv/bin/python --repo /work/main``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

COMMANDS: tuple[tuple[str, ...], ...] = (("--help",), ("--version",), ("ops",), ("cache", "ls"))


def time_command(python: str, repo: Path, argv: tuple[str, ...], env: dict[str, str], runs: int) -> str:
    """The median wall time of ``runs`` runs, or why the command failed."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run([python, "-m", "service.cli", *argv], cwd=repo, env=env, capture_output=True,
                              text=True, check=False)
        times.append(time.perf_counter() - start)
        if done.returncode != 0:
            lines = (done.stderr or done.stdout).strip().splitlines() or ["(no output)"]
            return f"exit {done.returncode}: {lines[-1][:70]}"
    return f"{statistics.median(times) * 1e3:7.0f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="runs per command; the median is shown (default 7)")
    parser.add_argument("--python", default=sys.executable, help="interpreter with warpmap installed")
    parser.add_argument("--repo", type=Path, default=Path(__file__).resolve().parent.parent,
                        help="checkout to run in (default: this one)")
    parser.add_argument("--cache-dir", type=Path, help="cache and data folder (default: a temporary one)")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error(f"--runs must be at least 1, got {args.runs}")
    with tempfile.TemporaryDirectory(prefix="warpmap-startup-") as scratch:
        root = args.cache_dir or Path(scratch)
        env = {**os.environ, "WARPMAP_CACHE_DIR": str(root / "cache"), "XDG_DATA_HOME": str(root / "data"),
               "XDG_CACHE_HOME": str(root / "xdg-cache"),
               "WARPMAP_DATABASE_URL": f"sqlite:///{root / 'data' / 'startup.db'}"}
        subprocess.run([args.python, "-m", "service.cli", "db", "upgrade"], cwd=args.repo, env=env,
                       capture_output=True, check=False)
        print(f"{args.python} in {args.repo}, median of {args.runs} runs")
        for argv in COMMANDS:
            print(f"  warpmap {' '.join(argv):<12} {time_command(args.python, args.repo, argv, env, args.runs)}")


if __name__ == "__main__":
    main()
