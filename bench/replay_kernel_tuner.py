"""Kernel Tuner's strategies on a replayed space, in its simulation mode (bench-only dependency).

The file's measurements are written as a Kernel Tuner cache (its own JSON format: one entry per
configuration, the time as the median of the runtimes, failed configurations as its error markers),
and its restrictions are the same as the replay target's: a configuration is valid when the file
lists it. The evaluations a strategy made are read back in order, repeats dropped, so the quality
counts distinct configurations exactly as ours do.
"""

from __future__ import annotations

import json
import logging
import random
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np
from kernel_tuner import tune_kernel

_ERRORS = {"compile": "CompilationFailedConfig", "runtime": "RuntimeFailedConfig"}


class KernelTunerReplay:
    """Runs Kernel Tuner strategies on one replay (``bench.strategy_replay.Replay``)."""

    def __init__(self, replay: Any) -> None:
        self.replay = replay
        self.names = list(replay.params)
        self.tune_params = {n: list(c) for n, c in replay.params.items()}
        self.directory = tempfile.TemporaryDirectory(prefix="kt-replay-")
        self.cache = Path(self.directory.name) / "cache.json"
        entries = {}
        for point, time_ms in replay.times.items():
            entry: dict[str, Any] = dict(zip(self.names, point, strict=True))
            failed = _ERRORS.get(replay.statuses[point], "RuntimeFailedConfig")
            entry["time"] = time_ms if time_ms is not None else failed
            entry.update(compile_time=0.0, verification_time=0.0, benchmark_time=0.0)
            entries[",".join(str(v) for v in point)] = entry
        self.cache.write_text(json.dumps({
            "device_name": "Simulation", "kernel_name": "replay", "problem_size": [1],
            "tune_params_keys": self.names, "tune_params": self.tune_params, "objective": "time",
            "cache": entries,
        }))
        listed = set(replay.times)

        def listed_in_file(config: dict[str, Any]) -> bool:
            # A plain function of one dict: Kernel Tuner's "monolithic" restriction form.
            return tuple(config[n] for n in self.names) in listed

        self.restrictions = [listed_in_file]

    def run(self, strategy: str, seed: int, fevals: int) -> list[float | None]:
        """The times of the distinct configurations ``strategy`` evaluated, in order (None: failed)."""
        random.seed(seed)
        np.random.seed(seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            logging.disable(logging.WARNING)
            try:
                results, _ = tune_kernel(
                    "replay", "__global__ void replay() {}", [1], [], self.tune_params,
                    restrictions=self.restrictions, strategy=strategy,
                    strategy_options={"max_fevals": fevals}, simulation_mode=True, cache=str(self.cache),
                    quiet=True, verbose=False,
                )
            finally:
                logging.disable(logging.NOTSET)
        seen: set[tuple[Any, ...]] = set()
        times: list[float | None] = []
        for result in results:
            point = tuple(result[n] for n in self.names)
            if point in seen or point not in self.replay.times:
                continue
            seen.add(point)
            times.append(self.replay.times[point])
        return times[:fevals]
