"""The measuring process's environment: OpenMP threads bound to places, and the CPUs to launch on handed
down from the tuning, which an OpenMP runtime loaded before warpmap cannot narrow."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from compiler.backends import get_target
from compiler.cpu_device import KERNEL_CPUS_VARIABLE, PROCESS_CPUS
from search.tune import measuring_environment

pytestmark = pytest.mark.skipif(get_target("cpu").unavailable_reason() is not None, reason="no host compiler")

EARLY_OPENMP_PROBE = """
import ctypes, os, sys
ctypes.CDLL("libgomp.so.1")  # an OpenMP runtime loaded before warpmap, as a numpy on an OpenMP BLAS does
from compiler.cpu_device import PROCESS_CPUS
print(len(os.sched_getaffinity(0)), len(PROCESS_CPUS))
"""


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="binding narrows nothing on one CPU")
def test_the_cpus_a_tuning_hands_down_survive_an_openmp_runtime_loaded_first() -> None:
    """What ``search.tune.measuring_environment`` gives the measuring process: without it, a runtime
    loaded before warpmap binds the main thread and warpmap would see one CPU."""

    def probe(extra: dict[str, str]) -> tuple[int, ...]:
        environment = {k: v for k, v in os.environ.items() if k != KERNEL_CPUS_VARIABLE}
        done = subprocess.run([sys.executable, "-c", EARLY_OPENMP_PROBE], env={**environment, **extra},
                              capture_output=True, text=True, timeout=60, check=True)
        return tuple(map(int, done.stdout.split()))

    assert probe({"OMP_PROC_BIND": "true"}) == (1, 1)  # the hazard
    handed = measuring_environment()
    assert handed["OMP_PROC_BIND"] == "true"
    assert probe(handed) == (1, len(PROCESS_CPUS))
    assert probe({**handed, KERNEL_CPUS_VARIABLE: "not a list"}) == (1, 1)  # ignored: detected, narrowed
