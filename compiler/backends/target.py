"""The one interface every target implements, and the values that cross it.

A target turns a :class:`~compiler.program.Program` into an :class:`Artifact` (``compile``: every launch
rendered in the target's dialect and built, content-addressed and cached), opens it (``load``: the
binaries and the program's workspaces), runs it (``run``: the launches in order over the program's
arguments, by name) and times it (``time``: :class:`~compiler.backends.timing.Samples` under a
:class:`~compiler.backends.timing.Protocol`). Callers never ask which target they hold; what differs
between targets (dialect, compiler, resource limits, how a launch is made) stays inside its module.

A build that does not succeed is a :class:`CompileFailure` value, never an exception: ``kind`` is
``"compile_error"`` (the source or its build is broken, or the program cannot be rendered in the
dialect) or ``"invalid"`` (it built, but the schedule does not fit the device: spills, registers or
shared memory past its limits), so a search can prune the second and count the first as a bug.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np

from compiler.backends.ptxas_report import ResourceUsage
from compiler.backends.timing import Protocol as TimingProtocol
from compiler.backends.timing import Samples
from compiler.cpu_device import CpuDevice
from compiler.device import DeviceSpec
from compiler.diskcache import cache_key
from compiler.program import Program
from compiler.source import KernelSource

FailureKind = Literal["compile_error", "invalid"]


@dataclass(frozen=True)
class LaunchBuild:
    """One launch as the target built it: the source in its dialect, the compiler's resource report per
    arch (ptxas's; empty where the target has none) and the target's binaries (role -> file or bytes)."""

    source: KernelSource
    usage: Mapping[str, ResourceUsage] = field(default_factory=dict)
    binaries: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Artifact:
    """A program compiled for one target: what is loaded, run, timed and stored, never rebuilt to run.

    ``key`` addresses the content: the target's fingerprint and every launch's source.
    """

    target: str
    program: Program
    key: str
    launches: tuple[LaunchBuild, ...]

    @property
    def sources(self) -> tuple[KernelSource, ...]:
        return tuple(launch.source for launch in self.launches)


@dataclass(frozen=True)
class CompileFailure:
    """Why a program did not become an artifact. ``launches`` holds what was built before the launch that
    failed (its source and report, for display); ``log`` is the compiler's full output where there is one."""

    kind: FailureKind
    message: str
    log: str = ""
    launches: tuple[LaunchBuild, ...] = ()


@dataclass
class Loaded:
    """An artifact opened on its target: the target's handles and the program's workspaces, which belong
    to it (allocated once at load, poisoned before each checked run)."""

    artifact: Artifact
    workspaces: dict[str, Any]
    handles: Any = None


class Target(Protocol):
    """What ``compiler.backends.get_target`` returns. ``template_target`` names the templates the target
    runs (``cuda`` for both GPU targets, ``cpu`` for the host)."""

    # Read-only, so that a frozen dataclass is a Target.
    @property
    def name(self) -> str: ...

    @property
    def template_target(self) -> str: ...

    def unavailable_reason(self) -> str | None:
        """None when programs can run here, else one sentence saying why they cannot."""
        ...

    def device(self) -> DeviceSpec | CpuDevice:
        """The machine that spaces and templates read: the real one when present."""
        ...

    def fingerprint(self) -> dict[str, str]:
        """What enters cache keys: toolchain versions and flags, and the device's identity. Raises
        :class:`~compiler.backends.errors.BackendUnavailableError` where the target cannot run."""
        ...

    def compile(self, program: Program) -> Artifact | CompileFailure: ...

    def load(self, artifact: Artifact) -> Loaded: ...

    def run(self, loaded: Loaded, buffers: Mapping[str, np.ndarray], *, timeout_s: float) -> None:
        """Run the launches in order; arrays in ``buffers`` (the program's arguments by name) are updated
        in place. Raises :class:`~compiler.backends.errors.KernelRunError` (or its
        ``KernelTimeoutError``) when the program does not complete."""
        ...

    def time(self, loaded: Loaded, buffers: Mapping[str, np.ndarray], protocol: TimingProtocol) -> Samples: ...


def artifact_key(target: str, fingerprint: Mapping[str, str], sources: tuple[KernelSource, ...]) -> str:
    """The content address of a program built for ``target``: its fingerprint and each launch's source
    and launch shape."""
    parts = [f"{name}={value}" for name, value in sorted(fingerprint.items())]
    for source in sources:
        parts += [source.entry, source.source, repr((source.grid, source.block, source.shared_bytes))]
    return cache_key("artifact", target, *parts)


def program_buffers(loaded: Loaded, buffers: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """The program's arguments from ``buffers`` and its workspaces from ``loaded``, by name; a ValueError
    naming what is missing or unknown."""
    program = loaded.artifact.program
    missing = [name for name in program.arguments if name not in buffers]
    extra = [name for name in buffers if name not in program.arguments]
    if missing or extra:
        raise ValueError(f"program {program.name!r} takes arguments {list(program.arguments)}; "
                         f"missing {missing}, unknown {extra}")
    return {**loaded.workspaces, **buffers}
