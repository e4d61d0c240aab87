"""Arguments of ``warpmap ops``."""

from __future__ import annotations

from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("ops", help="list the operators and the fields of their specs",
                                   description="List each operator with its spec fields (type, default, "
                                   "bounds) and an example spec for `warpmap check --spec`.")
    parser.add_argument("operator", nargs="?", help="show this operator only, with its description")
    parser.set_defaults(handler="service.cli.ops:run")
