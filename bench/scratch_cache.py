"""The cache folder a bench compiles into: the one given with ``--cache-dir``, else a fresh temporary one.

A bench must neither fill the user's ``$WARPMAP_CACHE_DIR`` nor be sped up by what is already in it.
The emulator and NVRTC caches read ``WARPMAP_CACHE_DIR`` when they are used, so setting it before the
bench starts working is enough.
"""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import tempfile
from pathlib import Path


def add_cache_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cache-dir", type=Path, metavar="DIR",
                        help="compile caches here (default: a temporary folder, removed at exit)")


def use_cache_dir(path: Path | None) -> Path:
    """Point ``WARPMAP_CACHE_DIR`` at ``path``, or at a temporary folder removed when the bench exits."""
    if path is None:
        path = Path(tempfile.mkdtemp(prefix="warpmap-bench-"))
        atexit.register(shutil.rmtree, path, ignore_errors=True)
    os.environ["WARPMAP_CACHE_DIR"] = str(path)
    return path
