"""Arguments of ``warpmap doctor``."""

from __future__ import annotations

from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("doctor", help="check the toolchain: NVRTC, CUDA headers, host compiler, GPUs",
                                   description="Check what this machine offers warpmap. Exits 1 when a piece "
                                   "that every run needs is missing (NVRTC, the CUDA headers, the emulator's "
                                   "C++ compiler); no GPU is a normal state.")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--peak", action="store_true",
                        help="also measure the host's roofs on every core (a few seconds): the FP32 peak with a "
                        "kernel of FMAs, beside the estimate from the OS clock, and the bandwidth from memory")
    parser.set_defaults(handler="service.cli.doctor:run")
