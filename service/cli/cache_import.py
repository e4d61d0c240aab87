"""``warpmap cache import``: merge an export, validating every spec with the operators' models.

Its own module because validation loads the operator templates, which the other cache commands do
not need (see :mod:`service.cli`).
"""

from __future__ import annotations

import argparse
import sys

from db.cache import ImportFormatError, import_jsonl
from db.records import WorkloadSpec
from service.cli.cache import cache_session, open_file
from service.cli.errors import CliError
from service.cli.specs import validated_spec


def import_command(args: argparse.Namespace) -> int:
    with cache_session(args) as session:
        try:
            if args.file == "-":
                report = import_jsonl(session=session, stream=sys.stdin, validate=_validate_workload)
            else:
                with open_file(args.file, "r") as stream:
                    report = import_jsonl(session=session, stream=stream, validate=_validate_workload)
        except ImportFormatError as exc:
            raise CliError(f"{args.file}: {exc}; nothing was imported") from exc
        except UnicodeDecodeError as exc:
            raise CliError(f"{args.file}: not UTF-8 text ({exc.reason}); nothing was imported") from exc
    kept = f"{report.kept} kept (the local one was as fast or faster)"
    print(f"read {report.read} kernel(s): {report.stored} stored, {kept}")
    return 0


def _validate_workload(workload: WorkloadSpec) -> None:
    """The same check ``warpmap check --spec`` makes; a stored spec is the spec without its ``op``."""
    validated_spec({**workload.spec, "op": workload.op})
