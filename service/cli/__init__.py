"""The ``warpmap`` command line: one module per command group, each adding its own subparser."""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys
from collections.abc import Sequence
from types import ModuleType

from service.cli.errors import CliError


def _command_modules() -> list[ModuleType]:
    """Every module of this package that defines ``register(subparsers)``, in name order."""
    names = (info.name for info in pkgutil.iter_modules(__path__) if not info.name.startswith("_"))
    modules = (importlib.import_module(f"{__name__}.{name}") for name in names)
    return [module for module in modules if hasattr(module, "register")]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="warpmap", description="Autotuning for task-mapping GPU kernels.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in _command_modules():
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
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
