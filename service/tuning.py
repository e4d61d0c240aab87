"""What every tuning shares, wherever it runs (``warpmap tune``, the service's workers): the build string
of this warpmap and the name of a workload's Optuna study.

One study per (workload, device, toolchain, level): a tuning interrupted anywhere (a killed worker, a
restarted service, a ``warpmap tune`` stopped with Ctrl-C) resumes from the study the next one opens,
because both spell its name the same way.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from compiler.toolchain import source_digest
from db.keys import warpmap_build
from db.records import DeviceInfo, ToolchainInfo, WorkloadSpec


def warpmap_version() -> str:
    """This warpmap's build string: the release and a digest of the sources that shape its kernels."""
    try:
        release = version("warpmap")
    except PackageNotFoundError:
        release = "0+unknown"
    return warpmap_build(version=release.split("+")[0], sources=source_digest())


def study_key(workload: WorkloadSpec, device: DeviceInfo, toolchain: ToolchainInfo, level: int) -> str:
    """The Optuna study name of one tuning; the same key resumes the same study."""
    return f"{workload.key}@{device.key}@{toolchain.key}@level{level}"
