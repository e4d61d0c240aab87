"""The ``cpu`` target: a program's launches rendered in the host dialect (``compiler.codegen.cpp``), each
built into a shared object by ``compiler.backends.cpu`` (g++ with OpenMP, content-addressed cache),
opened with ctypes and run in this process, in order, on all the cores this process may use.

Workspaces are host buffers aligned to 64 bytes (a cache line, and the widest vector load), allocated
once at ``load`` and poisoned with NaN before each checked ``run``; one with a slot per worker
(``Workspace.per_worker``) gets as many slots as a launch here has threads, at most those declared. A
run that passes its time limit is reported as a ``KernelTimeoutError``; the call cannot be stopped from
Python, so its thread is left to finish in the background (isolating candidates that crash or hang is the
search harness's job).
``time`` follows ``compiler.backends.timing``'s protocol over the whole program, the monotonic host
clock around each repetition, a buffer of twice the last-level cache written between repetitions when
the protocol asks for cold caches.
"""

from __future__ import annotations

import threading
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from compiler.backends import cpu
from compiler.backends.cpu import CpuConfig
from compiler.backends.errors import KernelTimeoutError
from compiler.backends.target import Artifact, CompileFailure, LaunchBuild, Loaded, artifact_key, program_buffers
from compiler.backends.timing import Protocol, Samples, measure
from compiler.codegen.cpp import render_host
from compiler.cpu_device import CpuDevice, detect_cpu
from compiler.numeric import STORAGE_DTYPES, poisoned
from compiler.program import Program, Workspace, launch_arguments

#: Workspaces start on a multiple of this many bytes.
ALIGNMENT = 64


def aligned_empty(shape: tuple[int, ...], dtype: np.dtype, alignment: int = ALIGNMENT) -> np.ndarray:
    """An uninitialised C-contiguous array whose first element sits on a multiple of ``alignment`` bytes.

    >>> aligned_empty((3, 5), np.dtype("float32")).ctypes.data % 64
    0
    """
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + alignment, dtype=np.uint8)
    offset = -raw.ctypes.data % alignment
    return raw[offset:offset + nbytes].view(dtype).reshape(shape)


def _workspace(workspace: Workspace, workers: int) -> np.ndarray:
    shape = workspace.allocated_shape(workers)
    array = aligned_empty(shape, np.dtype(STORAGE_DTYPES[workspace.dtype]))
    np.copyto(array, poisoned(shape, workspace.dtype))
    return array


@dataclass(frozen=True)
class CpuTarget:
    """``config``: where builds are kept and how many threads a launch uses (``CpuConfig.default()`` when
    None); ``cpu``: the host's description (detected when None)."""

    name: str = "cpu"
    template_target: str = "cpu"
    config: CpuConfig | None = None
    cpu: CpuDevice | None = None

    def _config(self) -> CpuConfig:
        return self.config or CpuConfig.default()

    def unavailable_reason(self) -> str | None:
        return cpu.unavailable_reason(self._config())

    def device(self) -> CpuDevice:
        return self.cpu or detect_cpu()

    def fingerprint(self) -> dict[str, str]:
        return cpu.fingerprint(self._config(), self.device())

    def measured_peak_gflops(self) -> float:
        """The FP32 peak of the cores a launch uses, measured (``compiler.backends.cpu_peak``): call it
        where kernels are timed."""
        from compiler.backends.cpu_peak import measured_peak_gflops

        return measured_peak_gflops(self._config(), self.device())

    def measured_bandwidth_gbs(self, footprint: int, cold_caches: bool = False) -> float:
        """GB/s the cores a launch uses read ``footprint`` bytes at, measured
        (``compiler.backends.cpu_bandwidth``): call it where kernels are timed. With ``cold_caches``
        (a protocol that flushes them) the operands come from memory whatever their size, so the probe
        reads at least the flush buffer's size, past every cache."""
        from compiler.backends.cpu_bandwidth import measured_bandwidth_gbs

        device = self.device()
        size = max(footprint, cpu.flush_bytes(device)) if cold_caches else footprint
        return measured_bandwidth_gbs(self._config(), device, size)

    def compile(self, program: Program) -> Artifact | CompileFailure:
        cfg, device = self._config(), self.device()
        launches: list[LaunchBuild] = []
        for launch in program.launches:
            try:
                source = render_host(launch.kernel)
            except Exception as exc:  # a kernel the host dialect cannot spell is a bug in its template
                trace = "".join(traceback.format_exception(exc)).rstrip()
                return CompileFailure("compile_error", f"render raised {type(exc).__name__}: {exc}\n{trace}",
                                      launches=tuple(launches))
            built = cpu.compile(source, cfg, device)
            if isinstance(built, cpu.CompileFailure):
                return CompileFailure("compile_error", built.message, built.log, (*launches, LaunchBuild(source)))
            launches.append(LaunchBuild(source, binaries={"so": built}))
        sources = tuple(b.source for b in launches)
        return Artifact(self.name, program, artifact_key(self.name, self.fingerprint(), sources), tuple(launches))

    def load(self, artifact: Artifact) -> Loaded:
        cfg = self._config()
        kernels = [cpu.load(build.binaries["so"], cfg) for build in artifact.launches]
        # Every launch is called with cfg.workers threads (LoadedKernel.workers), so a slot per worker
        # needs no more slots than that, whatever the template declared without knowing the host.
        workspaces = {w.name: _workspace(w, cfg.workers) for w in artifact.program.workspaces}
        return Loaded(artifact, workspaces, kernels)

    def launch_calls(self, loaded: Loaded, buffers: Mapping[str, np.ndarray]) -> list[Callable[[], None]]:
        """One ctypes call per launch, in order, on ``buffers`` (the program's arguments by name) and the
        loaded workspaces, arguments checked and bound once: a call checks nothing, so this is what a
        benchmark times."""
        calls: list[Callable[[], None]] = []
        arrays = program_buffers(loaded, buffers)
        for kernel, args in zip(loaded.handles, launch_arguments(loaded.artifact.program, arrays), strict=True):
            calls.append(_bound(kernel, cpu.check_args(kernel.artifact.kernel, args), (loaded, arrays)))
        return calls

    def call(self, loaded: Loaded, buffers: Mapping[str, np.ndarray]) -> Callable[[], None]:
        """The whole program as one call of ``launch_calls``'s kind: its launches in order."""
        calls = self.launch_calls(loaded, buffers)

        def program() -> None:
            for call in calls:
                call()

        return program

    def build(self, program: Program) -> Loaded:
        """``program`` compiled and loaded; a program that does not compile raises RuntimeError with the
        compiler's message (a tuning records it as a trial's failure instead)."""
        artifact = self.compile(program)
        if isinstance(artifact, CompileFailure):
            raise RuntimeError(f"{program.name}: {artifact.kind}: {artifact.message}")
        return self.load(artifact)

    def run(self, loaded: Loaded, buffers: Mapping[str, np.ndarray], *, timeout_s: float) -> None:
        program = loaded.artifact.program
        for workspace in program.workspaces:
            array = loaded.workspaces[workspace.name]
            np.copyto(array, poisoned(array.shape, workspace.dtype))
        whole = self.call(loaded, buffers)
        failure: list[BaseException] = []

        def body() -> None:
            try:
                whole()
            except BaseException as exc:  # handed to the caller's thread
                failure.append(exc)

        # The GIL is released during each call, so the caller can give up waiting on a hung kernel.
        worker = threading.Thread(target=body, name=f"wm-cpu-{program.name}", daemon=True)
        worker.start()
        worker.join(timeout_s)
        if worker.is_alive():
            raise KernelTimeoutError(f"{program.name}: still running after {timeout_s:.1f} s "
                                     "(its thread is left to finish)")
        if failure:
            raise failure[0]

    def time(self, loaded: Loaded, buffers: Mapping[str, np.ndarray], protocol: Protocol) -> Samples:
        flush = None
        if protocol.flush_caches:
            scratch = np.zeros(cpu.flush_bytes(self.device()) // 4, dtype=np.float32)

            def flush() -> None:
                np.add(scratch, 1.0, out=scratch)  # a write to every line evicts what the kernel left cached

        return measure(self.call(loaded, buffers), protocol, flush=flush)


def _bound(kernel: cpu.LoadedKernel, values: list[object], keep: object) -> Callable[[], None]:
    """A call of ``kernel`` on checked ``values``: they are raw addresses, so the call holds ``keep``, the
    arrays behind them (and the loaded program), alive for as long as it lives."""
    function, workers = kernel.function, kernel.workers

    def call(keep: object = keep) -> None:
        function(*values, workers)

    return call


TARGET = CpuTarget()
