"""The ``warpmap`` command line.

The parser is built from :mod:`service.cli.args`, which imports nothing heavy; each command's
implementation lives in its own module here (``check``, ``cache``, ...) and is imported only when
that command runs, so ``warpmap --help`` does not wait for NVRTC, SQLAlchemy or numpy to load.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys
from collections.abc import Callable, Sequence
from typing import Any

from service.cli import args as _args
from service.cli.errors import CliError


class _VersionAction(argparse.Action):
    """``--version``: looks the version up only when asked (package metadata is slow to import)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        from importlib.metadata import PackageNotFoundError, version  # here, not above: start-up cost

        try:
            text = version("warpmap")
        except PackageNotFoundError:
            text = "unknown (not installed)"
        print(f"warpmap {text}")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="warpmap", description="Autotuning for task-mapping GPU kernels.")
    parser.add_argument("--version", action=_VersionAction, help="print warpmap's version and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for info in pkgutil.iter_modules(_args.__path__):
        importlib.import_module(f"{_args.__name__}.{info.name}").register(sub)
    return parser


def handler(args: argparse.Namespace) -> Callable[[argparse.Namespace], int]:
    """The function that implements the parsed command, importing its module now (start-up cost)."""
    module, _, name = args.handler.partition(":")
    return getattr(importlib.import_module(module), name)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(handler(args)(args) or 0)
    except CliError as exc:
        print(f"warpmap {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`warpmap cache ls | head`): silence the flush Python retries at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
