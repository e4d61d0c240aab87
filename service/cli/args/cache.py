"""Arguments of ``warpmap cache ls | show | stats | evict | export | import``."""

from __future__ import annotations

import argparse
from typing import Any

from service.cli.args.db import add_database_option


def _add_filters(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--op", help="operator name, e.g. matmul")
    parser.add_argument("--workload", help="exact workload key, e.g. matmul:1776f0bef7b8c162")
    parser.add_argument("--device", help="device key, or part of the device name (case-insensitive)")
    parser.add_argument("--arch", help="compute capability or ISA, e.g. sm_90")
    parser.add_argument("--toolchain", help="exact toolchain key")
    parser.add_argument("--older-than", metavar="DURATION", help="only entries last updated before, e.g. 30d")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("cache", help="inspect and manage the tuned-kernel cache")
    commands = parser.add_subparsers(dest="cache_command", required=True, metavar="ACTION")

    def command(name: str, help_text: str, module: str = "service.cli.cache") -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text)
        add_database_option(sub)
        sub.set_defaults(handler=f"{module}:{name}_command")
        return sub

    ls = command("ls", "list cached kernels, newest first")
    _add_filters(ls)
    ls.add_argument("--limit", type=int, default=50, help="at most this many rows (default 50)")
    ls.add_argument("--json", action="store_true", help="one JSON object per line")

    show = command("show", "print a cached kernel, by id or by workload key")
    show.add_argument("kernel", help="kernel id or workload key, as printed by `warpmap cache ls`")
    show.add_argument("--source", action="store_true", help="include the source (CUDA, or C++ for the cpu)")
    show.add_argument("--json", action="store_true",
                      help="the record as JSON (an object by id, a list by workload key); binaries left out")

    stats = command("stats", "number of kernels and bytes, by device and operator")
    stats.add_argument("--json", action="store_true", help="print rows and bytes as JSON")

    ev = command("evict", "remove old entries, then least recently used ones over a size budget")
    ev.add_argument("--older-than", metavar="DURATION", help="remove entries not used for this long, e.g. 90d")
    ev.add_argument("--max-size", metavar="SIZE", help="then keep at most this many bytes, e.g. 2GiB")
    ev.add_argument("--dry-run", action="store_true", help="report what would go, remove nothing")

    export = command("export", "write kernels as JSON lines (binaries base64)")
    _add_filters(export)
    export.add_argument("file", nargs="?", default="-", help="output file (default: standard output)")

    imp = command("import", "merge a JSON-lines export; every spec is validated, faster entries win",
                  "service.cli.cache_import")
    imp.add_argument("file", help="input file, or - for standard input")
