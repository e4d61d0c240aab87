"""Arguments of ``warpmap tune``."""

from __future__ import annotations

from typing import Any

from service.cli.args.db import add_database_option

#: Where ``tune`` can measure; ``emu`` gives no timings, so it is not one.
TUNE_TARGETS = ("cpu", "cuda")
#: The strategy names ``tune`` accepts (``search.strategies`` keeps the list; a test keeps them equal).
STRATEGY_NAMES = ("default", "tpe", "gp", "random", "exhaustive", "hybrid", "hybrid:joint")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "tune",
        help="find the fastest correct schedule of an operator and keep it in the cache",
        description="Search the operator's schedule space on the target: every candidate is built, checked "
        "against numpy and timed; the best is re-timed and stored in the tuning cache. A workload already "
        "tuned on this device and toolchain is answered from the cache unless --force.",
        epilog="`warpmap ops` lists the operators and their spec fields; `warpmap cache ls` shows what is stored.",
    )
    parser.add_argument("--spec", required=True,
                        help='operator spec as JSON, e.g. \'{"op": "matmul", "m": 512, "n": 512, "k": 512}\'')
    parser.add_argument("--target", choices=TUNE_TARGETS,
                        help="where to tune: cuda (an NVIDIA GPU) or cpu (the host) (default: the GPU when one "
                        "is found, else cpu)")
    parser.add_argument("--strategy", default="default", choices=STRATEGY_NAMES,
                        help="how the space is searched (default: the strategy measured best, see the README)")
    parser.add_argument("--trials", type=int, default=40, help="measure at most N candidates (default 40)")
    parser.add_argument("--seconds", type=float, help="stop after this many seconds of search")
    parser.add_argument("--patience", type=int,
                        help="stop after N candidates in a row without a 1%% gain")
    parser.add_argument("--level", type=int, default=2, choices=(1, 2), help="schedule space level (default 2)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the search and the inputs (default 0)")
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="seconds a candidate may take to build or to run (default 120)")
    parser.add_argument("--force", action="store_true", help="tune even when the cache has this workload")
    parser.add_argument("--cold", action="store_true",
                        help="do not start from the best schedules the cache holds for this workload on other "
                             "devices or under other toolchains")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object")
    add_database_option(parser)
    parser.set_defaults(handler="service.cli.tune:run")
