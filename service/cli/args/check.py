"""Arguments of ``warpmap check``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from compiler.device import DEFAULT_GPU, DEVICES

#: Names of the targets; ``compiler.backends.TARGETS`` maps them to modules (a test keeps them equal).
TARGET_NAMES = ("cpu", "cuda", "emu")


class _DeprecatedTarget(argparse.Action):
    """``--device NAME``: the old spelling of ``--target NAME``, still accepted, with a warning."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: str | Sequence[Any] | None, option_string: str | None = None) -> None:
        print(f"warpmap check: {option_string} is deprecated; use --target {values}", file=sys.stderr)
        setattr(namespace, self.dest, values)


__all__ = ["DEFAULT_GPU", "TARGET_NAMES", "register"]


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "check",
        help="verify a schedule space against numpy",
        description="Build the schedules of an operator's space (all, or a seeded sample), run each on the "
        "target with random inputs and compare with the numpy reference. Exits 1 if any schedule fails.",
        epilog="`warpmap ops` lists the operators with their spec fields, bounds and an example spec; "
        "`warpmap ops NAME` shows one.",
    )
    parser.add_argument("--spec", required=True,
                        help='operator spec as JSON, e.g. \'{"op": "matmul", "m": 64, "n": 64, "k": 64}\' '
                        "(see `warpmap ops`)")
    parser.add_argument("--level", type=int, default=1, choices=(1, 2), help="schedule space level (default 1)")
    parser.add_argument("--sample", type=int, metavar="N", help="check a seeded sample of N schedules")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed for the sample and the inputs, 0 or more (default 0)")
    parser.add_argument("--target", default="emu", choices=TARGET_NAMES,
                        help="where kernels compile and run: emu (the CUDA templates on the CUDA emulator, "
                        "correctness only), cuda (an NVIDIA GPU) or cpu (the host's own templates, "
                        "through its C++ dialect) (default emu)")
    parser.add_argument("--device", dest="target", choices=TARGET_NAMES, action=_DeprecatedTarget,
                        help="deprecated spelling of --target")
    parser.add_argument("--gpu", type=str.lower, choices=sorted(DEVICES),
                        help="preset GPU whose limits shape the space of the emu and cuda targets, any case "
                        f"(default: this machine's GPU, read from the driver; {DEFAULT_GPU} without one)")
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="seconds a kernel may run, above 0 (default 60)")
    parser.add_argument("--jobs", type=int, default=2, help="schedules checked at once (default 2)")
    parser.set_defaults(handler="service.cli.check:run")
