"""Tune a small matmul on the cpu over HTTP, then run the kernel the service sends back against numpy.

It starts nothing: run a service first (``warpmap serve``) and give it a key with the ``tune`` scope
(``warpmap keys create --scope tune`` prints one as the last word of its output)::

    python examples/tune_over_http.py --url http://127.0.0.1:8000 --api-key wm_...

A second run is a cache hit: the same kernel comes back at once.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

from compiler.backends.timing import measure
from service.client import Client, ClientError, TunedKernel, TuningFailedError, TuningTimeoutError

SPEC = {"op": "matmul", "m": 97, "n": 131, "k": 203, "dtype": "float32"}


def tune(client: Client, *, trials: int, wait: float) -> TunedKernel:
    return client.tune(SPEC, target="cpu", budget={"trials": trials}, wait=wait)


def check(kernel: TunedKernel) -> tuple[float, float, float]:
    """(relative error against numpy, this machine's median latency in ms, numpy's) on random inputs."""
    matmul = kernel.load()
    rng = np.random.default_rng(0)
    a = rng.standard_normal(matmul.shapes["a"], dtype=np.float32)
    b = rng.standard_normal(matmul.shapes["b"], dtype=np.float32)
    c = np.full(matmul.shapes["c"], np.nan, dtype=np.float32)
    matmul(a=a, b=b, c=c)
    result = c.copy()
    # Timed before numpy's BLAS runs: its idle threads spin for a while after each call and would take the
    # cores from the kernel's OpenMP threads.
    ours = measure(lambda: matmul(a, b, c)).median_ns / 1e6
    expected = a.astype(np.float64) @ b.astype(np.float64)
    error = float(np.linalg.norm(result - expected) / np.linalg.norm(expected))
    theirs = measure(lambda: np.matmul(a, b, out=c)).median_ns / 1e6
    return error, ours, theirs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000", help="the service (default: %(default)s)")
    parser.add_argument("--api-key", default=os.environ.get("WARPMAP_API_KEY"),
                        help="a key with the tune scope (default: $WARPMAP_API_KEY)")
    parser.add_argument("--trials", type=int, default=20, help="tuning budget if the cache misses")
    parser.add_argument("--wait", type=float, default=600.0, help="seconds to wait for the tuning")
    args = parser.parse_args(argv)
    try:
        with Client(args.url, api_key=args.api_key) as client:
            kernel = tune(client, trials=args.trials, wait=args.wait)
    except (ClientError, TuningFailedError, TuningTimeoutError) as exc:
        print(f"tune_over_http: {exc}", file=sys.stderr)
        return 1
    roofline = ("" if kernel.roofline_fraction is None
                else f", {kernel.roofline_fraction:.0%} of its roofline ({kernel.bound}-bound)")
    print(f"kernel {kernel.id} ({kernel.entry}) for {kernel.device.name}: {kernel.latency_ms:.4f} ms on the "
          f"worker after {kernel.trials_used} trials{roofline}")
    error, ours, theirs = check(kernel)
    print(f"relative error against numpy: {error:.2e}")
    print(f"latency here: {ours:.4f} ms (median; numpy's matmul: {theirs:.4f} ms)")
    return 0 if error <= 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main())
