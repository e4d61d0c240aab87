"""The ``emu`` target: the CUDA templates' programs checked on the CPU, through the emulator.

``compile`` renders each launch as CUDA, builds it with NVRTC for sm_80 and sm_90 and holds ptxas's
report against the device's limits (``compiler.backends.cuda_build``: what a GPU would refuse is
``invalid`` here too), then builds it for the emulator. ``run`` launches the emulator's builds in order.
The emulator gives no timings: ``time`` refuses.

Every run also looks for shared-memory races (``detect_races``, on by default): a missing
``__syncthreads()`` often gives the right numbers in the emulator's fixed fiber order, so the output
comparison alone would pass it. The race detector's build calls a hook on every memory access (about
7x slower to run, 1.5x to compile), so on a large grid it runs only :func:`race_blocks`, the blocks
whose guards differ (corners, edges) and one from the middle, on copies of the arguments, and the
plain build computes the outputs. A grid no larger than that sample runs only the checked build.
"""

from __future__ import annotations

import itertools
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from compiler.backends import cuda_build
from compiler.backends.emu import (
    EmuConfig,
    EmulationCompileError,
    EmulationError,
    EmulationTimeoutError,
    compile_kernel,
    launch,
)
from compiler.backends.emu.build import compile_flags, toolchain_digest, toolchain_problem
from compiler.backends.errors import BackendUnavailableError, KernelRunError, KernelTimeoutError, TimingUnavailableError
from compiler.backends.nvrtc import DEFAULT_ARCHS
from compiler.backends.target import Artifact, CompileFailure, LaunchBuild, Loaded, artifact_key, program_buffers
from compiler.backends.timing import Protocol, Samples
from compiler.device import DeviceSpec, gpu_device
from compiler.diskcache import DiskCache, default_cache_root
from compiler.numeric import poisoned
from compiler.program import Program, launch_arguments
from compiler.source import KernelSource

#: Bytes of NVRTC builds kept (the CUBINs whose reports decide what fits).
CUBIN_CACHE_BYTES = 512 << 20


def race_blocks(grid: tuple[int, int, int]) -> list[int]:
    """Linear indices (x fastest) of the first, middle and last block along each grid dimension, and
    every combination of them: at most 27 blocks.

    >>> race_blocks((4, 1, 1))
    [0, 2, 3]
    >>> len(race_blocks((100, 100, 100)))
    27
    """
    picks = [sorted({0, g // 2, g - 1}) for g in grid]
    return sorted(x + grid[0] * (y + grid[1] * z) for x, y, z in itertools.product(*picks))


def _copies(args: Sequence[np.ndarray | int | float]) -> list[np.ndarray | int | float]:
    """The arguments with each array copied once, so an array passed twice stays one buffer."""
    copied: dict[int, np.ndarray] = {}
    out: list[np.ndarray | int | float] = []
    for a in args:
        if isinstance(a, np.ndarray):
            if id(a) not in copied:
                copied[id(a)] = a.copy()
            out.append(copied[id(a)])
        else:
            out.append(a)
    return out


def poison_workspaces(program: Program) -> dict[str, np.ndarray]:
    """A fresh NaN-poisoned host buffer per workspace of ``program``."""
    return {w.name: poisoned(w.shape, w.dtype) for w in program.workspaces}


@dataclass(frozen=True)
class EmuTarget:
    """``config``: the emulator's settings (``EmuConfig.default()`` when None, read at each call);
    ``detect_races``: look for shared-memory races in every run (see the module's docstring);
    ``gpu``: the device whose limits decide what fits (this machine's GPU, else the default preset);
    ``archs``: what NVRTC builds each launch for; ``cubin_cache``: where those builds are kept."""

    name: str = "emu"
    template_target: str = "cuda"
    config: EmuConfig | None = None
    detect_races: bool = True
    gpu: DeviceSpec | None = None
    archs: tuple[str, ...] = DEFAULT_ARCHS
    cubin_cache: DiskCache | None = None

    def _config(self) -> EmuConfig:
        return self.config or EmuConfig.default()

    def _whole_grid_checked(self, kernel: KernelSource) -> bool:
        grid = kernel.grid
        return self.detect_races and len(race_blocks(grid)) == grid[0] * grid[1] * grid[2]

    def unavailable_reason(self) -> str | None:
        return toolchain_problem(self._config())

    def device(self) -> DeviceSpec:
        return self.gpu or gpu_device()

    def fingerprint(self) -> dict[str, str]:
        """What decides the emulator's builds, for cache keys: its own sources, the host compiler's
        version and the kernel flags (include paths left out: they name where warpmap is installed)."""
        cfg = self._config()
        problem = toolchain_problem(cfg)
        if problem is not None:
            raise BackendUnavailableError(problem)
        version = subprocess.run([cfg.cxx, "--version"], capture_output=True, text=True, timeout=30, check=False)
        flags = [f for f in compile_flags(cfg, detect_races=False) if not f.startswith("-I")]
        return {"target": self.name, "emulator": toolchain_digest(), "cxx": version.stdout.splitlines()[0],
                "flags": " ".join(flags), "device": self.device().name, "archs": " ".join(self.archs)}

    def compile(self, program: Program) -> Artifact | CompileFailure:
        sources = cuda_build.render(program)
        if isinstance(sources, CompileFailure):
            return sources
        cache = self.cubin_cache or DiskCache(default_cache_root() / "cubin", CUBIN_CACHE_BYTES)
        checked = cuda_build.build_launches(sources, self.device(), self.archs, cache)
        if isinstance(checked, CompileFailure):
            return checked
        cfg = self._config()
        launches: list[LaunchBuild] = []
        for build in checked:
            kernel, binaries = build.source, {}
            try:
                if not self._whole_grid_checked(kernel):
                    binaries["plain"] = compile_kernel(kernel, config=cfg)
                if self.detect_races:
                    binaries["races"] = compile_kernel(kernel, config=cfg, detect_races=True)
            except EmulationCompileError as exc:
                return CompileFailure("compile_error", f"{exc}", exc.log, (*launches, build))
            launches.append(LaunchBuild(kernel, build.usage, binaries))
        fingerprint = {"emulator": toolchain_digest(), "cxx": cfg.cxx, "races": str(self.detect_races)}
        return Artifact(self.name, program, artifact_key(self.name, fingerprint, sources), tuple(launches))

    def load(self, artifact: Artifact) -> Loaded:
        """Nothing to open ahead: each launch is a child of the launch server, given its build's path."""
        return Loaded(artifact, poison_workspaces(artifact.program))

    def run(self, loaded: Loaded, buffers: Mapping[str, np.ndarray], *, timeout_s: float) -> None:
        for name, fresh in poison_workspaces(loaded.artifact.program).items():
            np.copyto(loaded.workspaces[name], fresh)
        program, cfg = loaded.artifact.program, self._config()
        launch_args = launch_arguments(program, program_buffers(loaded, buffers))
        # Launches run in order on the same buffers: each sees what the ones before it wrote.
        for build, args in zip(loaded.artifact.launches, launch_args, strict=True):
            try:
                if "plain" not in build.binaries:
                    launch(build.binaries["races"], args, timeout_s=timeout_s, config=cfg)
                    continue
                if "races" in build.binaries:
                    launch(build.binaries["races"], _copies(args), timeout_s=timeout_s, config=cfg,
                           blocks=race_blocks(build.source.grid))
                launch(build.binaries["plain"], args, timeout_s=timeout_s, config=cfg)
            except EmulationTimeoutError as exc:
                raise KernelTimeoutError(str(exc)) from exc
            except EmulationCompileError as exc:
                raise KernelRunError(f"{exc}\n{exc.log}") from exc
            except EmulationError as exc:
                raise KernelRunError(str(exc)) from exc

    def time(self, loaded: Loaded, buffers: Mapping[str, np.ndarray], protocol: Protocol) -> Samples:
        raise TimingUnavailableError("the emu target gives no timings: it runs CUDA on the CPU to check "
                                     "correctness only; time on the cuda or cpu target")


TARGET = EmuTarget()
