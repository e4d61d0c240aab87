"""Running a kernel from the tuning cache: the stored document and binaries, not a fresh build.

The cache keeps a tuned program as plain data (``db.records.KernelResult``: one launch's fields, plus the
whole program document when there are several launches or workspaces) and its binaries (an archive with
one member per launch, ``<index>-<entry>.<role>``, or one launch's binary as is). :func:`load_stored` turns
the two into a callable that runs the launches in order over the program's arguments, given by name
(keywords) or in argument order (positionally); arrays are updated in place.

- ``cpu``: each launch's shared object is written to a private cache folder (content-addressed, mode
  0700), opened with ctypes and called on numpy arrays (anything with ``__dlpack__`` on the host works
  too, without a copy); workspaces are 64-byte-aligned host buffers the kernel owns, one whose document
  says ``per_worker`` cut to as many slots as its launches run threads (records without the field
  allocate the stored shape).
- ``cuda``: the CUBINs are loaded through the driver (``compiler.backends.stored_cuda``); see there for
  the arguments it takes.

Loading a binary runs its code in this process: load only kernels from a cache you trust. A shared object
built with ``-march=native`` on another machine may use instructions this CPU lacks; callers that know the
stored device (``service.client.TunedKernel.load``) compare it with this host first.
"""

from __future__ import annotations

import ctypes
import hashlib
import io
import threading
import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from compiler.backends import cpu
from compiler.backends.cpu_target import aligned_empty
from compiler.diskcache import DiskCache, cache_key, default_cache_root
from compiler.numeric import STORAGE_DTYPES, poisoned
from compiler.program import Binding, Workspace
from compiler.source import KernelSource, Param

__all__ = ["StoredKernel", "StoredLaunch", "StoredProgram", "bind_arguments", "load_stored", "stored_program"]

#: The binary role each runnable target stores per launch (``LaunchBuild.binaries``' keys).
ROLES: Mapping[str, str] = {"cpu": "so", "cuda": "cubin"}
_ZIP_MAGIC = b"PK\x03\x04"
_ELF_MAGIC = b"\x7fELF"
_ELF_MACHINE_CUDA = 190  # EM_CUDA
STORED_CACHE_BYTES = 256 << 20


@dataclass(frozen=True)
class StoredLaunch:
    """One launch: its source and launch shape, what binds to each parameter, and its binary."""

    kernel: KernelSource
    bindings: tuple[Binding, ...]
    binary: bytes


@dataclass(frozen=True)
class StoredProgram:
    """A stored program, checked: its arguments (in order, with their element dtypes), workspaces and
    launches (in the order they run)."""

    target: str
    name: str
    arguments: tuple[str, ...]
    dtypes: Mapping[str, str]
    workspaces: tuple[Workspace, ...]
    launches: tuple[StoredLaunch, ...]


class _BadRecordError(ValueError):
    pass


def _field(document: Mapping[str, Any], name: str, kind: type | tuple[type, ...], where: str) -> Any:
    value = document.get(name) if isinstance(document, Mapping) else None
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise _BadRecordError(f"stored kernel: {where} has no valid {name!r} (got {value!r})")
    return value


def _dim3(document: Mapping[str, Any], name: str, where: str) -> tuple[int, int, int]:
    value = _field(document, name, (list, tuple), where)
    if len(value) != 3 or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise _BadRecordError(f"stored kernel: {where}.{name} must be three integers, got {value!r}")
    return (int(value[0]), int(value[1]), int(value[2]))


def _kernel(document: Mapping[str, Any], where: str) -> KernelSource:
    params = []
    for raw in _field(document, "params", (list, tuple), where):
        if not isinstance(raw, Mapping):
            raise _BadRecordError(f"stored kernel: {where} has a parameter that is not an object: {raw!r}")
        params.append(Param(_field(raw, "name", str, where), _field(raw, "dtype", str, where),
                            bool(raw.get("pointer", True))))
    return KernelSource(entry=_field(document, "entry", str, where), source=str(document.get("source", "")),
                        grid=_dim3(document, "grid", where), block=_dim3(document, "block", where),
                        params=tuple(params), shared_bytes=_field(document, "shared_bytes", int, where))


def _workspace(document: Mapping[str, Any]) -> Workspace:
    """A workspace of the program document; ``per_worker`` absent (records written before it): false,
    so the declared shape is allocated, as it was."""
    per_worker = document.get("per_worker", False) if isinstance(document, Mapping) else False
    if not isinstance(per_worker, bool):
        raise _BadRecordError(f"stored kernel: workspace has no valid 'per_worker' (got {per_worker!r})")
    shape = tuple(_field(document, "shape", (list, tuple), "workspace"))
    return Workspace(_field(document, "name", str, "workspace"), shape, _field(document, "dtype", str, "workspace"),
                     per_worker)


def _binaries(binary: bytes, count: int) -> dict[int, tuple[str, bytes]]:
    """Launch index -> (role, bytes): an archive's members, or the one launch's binary as given."""
    if not binary.startswith(_ZIP_MAGIC):
        if count != 1:
            raise _BadRecordError(f"stored kernel: {count} launches, but the binary is not an archive of them")
        return {0: ("", binary)}
    found: dict[int, tuple[str, bytes]] = {}
    try:
        with zipfile.ZipFile(io.BytesIO(binary)) as archive:
            for info in archive.infolist():
                stem, _, role = info.filename.rpartition(".")
                index = stem.partition("-")[0]
                if index.isdigit():
                    found[int(index)] = (role, archive.read(info))
    except zipfile.BadZipFile as exc:
        raise _BadRecordError(f"stored kernel: the binary archive is damaged: {exc}") from exc
    return found


def _binary_target(data: bytes) -> str | None:
    """``cuda`` for a CUBIN, ``cpu`` for a host shared object: the ELF header's machine field says which."""
    if not data.startswith(_ELF_MAGIC) or len(data) < 20:
        return None
    return "cuda" if int.from_bytes(data[18:20], "little") == _ELF_MACHINE_CUDA else "cpu"


def stored_program(document: Mapping[str, Any], binary: bytes, *, target: str | None = None) -> StoredProgram:
    """The program a cache record describes, checked against its binaries. ``document`` holds the
    ``KernelResult`` fields (``entry``, ``grid``, ``block``, ``shared_bytes``, ``params``, ``program``; the
    API's Kernel JSON has them all); ``target`` (``cpu`` or ``cuda``) is read from the document when None.
    A ValueError names what is missing or inconsistent."""
    if not isinstance(binary, bytes | bytearray) or not binary:
        raise ValueError("stored kernel: no binary (the cache keeps none for this kernel's target)")
    program = document.get("program") if isinstance(document, Mapping) else None
    if program:
        name = str(document.get("entry") or "program")
        launch_docs = _field(program, "launches", (list, tuple), "program")
        kernels = [_kernel(launch, f"launch {i}") for i, launch in enumerate(launch_docs)]
        bindings = [tuple(_field(launch, "bindings", (list, tuple), f"launch {i}"))
                    for i, launch in enumerate(launch_docs)]
        arguments = tuple(_field(program, "arguments", (list, tuple), "program"))
        workspaces = tuple(_workspace(w) for w in program.get("workspaces") or ())
        kind = target or program.get("target") or document.get("target")
    else:
        kernel = _kernel(document, "kernel")
        scalars = [p.name for p in kernel.params if not p.pointer]
        if scalars:
            raise ValueError(f"stored kernel {kernel.entry!r}: scalar parameters {scalars} have no stored values")
        name, kernels, workspaces = kernel.entry, [kernel], ()
        arguments = tuple(p.name for p in kernel.params)
        bindings = [arguments]
        kind = target or document.get("target")
    if not kernels:
        raise ValueError(f"stored kernel {name!r}: no launches")
    members = _binaries(bytes(binary), len(kernels))
    if kind is None:
        kind = _binary_target(members[0][1]) if 0 in members else None
    if kind is None or kind not in ROLES:
        raise ValueError(f"stored kernel {name!r}: target {kind!r} cannot be run from the cache "
                         f"(runnable: {', '.join(ROLES)})")
    launches = []
    for index, (kernel, bound) in enumerate(zip(kernels, bindings, strict=True)):
        role, data = members.get(index, ("", b""))
        if role not in ("", ROLES[kind]) or _binary_target(data) != kind:
            raise ValueError(f"stored kernel {name!r}: launch {index} ({kernel.entry}) has no {kind} binary "
                             f"({ROLES[kind]}) in the stored binaries")
        if len(bound) != len(kernel.params):
            raise ValueError(f"stored kernel {name!r}: launch {index} binds {len(bound)} of "
                             f"{len(kernel.params)} parameters")
        launches.append(StoredLaunch(kernel, bound, data))
    return StoredProgram(str(kind), name, arguments, _argument_dtypes(name, arguments, workspaces, launches),
                         workspaces, tuple(launches))


def _argument_dtypes(name: str, arguments: Sequence[str], workspaces: Sequence[Workspace],
                     launches: Sequence[StoredLaunch]) -> dict[str, str]:
    dtypes: dict[str, str] = {}
    buffers = {*arguments, *(w.name for w in workspaces)}
    for launch in launches:
        for param, bound in zip(launch.kernel.params, launch.bindings, strict=True):
            if param.pointer != isinstance(bound, str) or (param.pointer and bound not in buffers):
                raise ValueError(f"stored kernel {name!r}: {launch.kernel.entry}.{param.name} binds {bound!r}")
            if param.pointer and dtypes.setdefault(str(bound), param.dtype) != param.dtype:
                raise ValueError(f"stored kernel {name!r}: {bound!r} is used as two dtypes")
    missing = [a for a in arguments if a not in dtypes]
    if missing:
        raise ValueError(f"stored kernel {name!r}: no launch uses the arguments {missing}")
    return {a: dtypes[a] for a in arguments}


def bind_arguments(program: StoredProgram, args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The call's arguments by name: positionals in argument order, then keywords; a ValueError for too
    many, unknown, repeated or missing ones (naming the program's arguments)."""
    names = program.arguments
    signature = f"{program.name}({', '.join(names)})"
    if len(args) > len(names):
        raise ValueError(f"{signature} takes {len(names)} arguments, got {len(args)} positional")
    bound = dict(zip(names, args, strict=False))
    for key, value in kwargs.items():
        if key not in names:
            raise ValueError(f"{signature} has no argument {key!r}")
        if key in bound:
            raise ValueError(f"{signature}: argument {key!r} given twice")
        bound[key] = value
    missing = [n for n in names if n not in bound]
    if missing:
        raise ValueError(f"{signature}: missing arguments {missing}")
    return {n: bound[n] for n in names}


def host_array(name: str, value: Any, dtype: str, shape: tuple[int, ...] | None) -> np.ndarray:
    """``value`` as the C-contiguous host array a launch may write (no copy), or a ValueError saying why
    it does not fit: not an array, wrong dtype, layout or shape."""
    if not isinstance(value, np.ndarray) and hasattr(value, "__dlpack__"):
        try:
            value = np.from_dlpack(value)
        except (BufferError, RuntimeError, TypeError) as exc:
            raise ValueError(f"argument {name!r}: not a host array ({exc})") from exc
    if not isinstance(value, np.ndarray):
        raise ValueError(f"argument {name!r} must be a numpy array of {dtype}, got {type(value).__name__}")
    want = STORAGE_DTYPES[dtype]
    if value.dtype != want:
        raise ValueError(f"argument {name!r} must have dtype {want}{' (bfloat16 bits)' * (dtype == 'bfloat16')}, "
                         f"got {value.dtype}")
    if shape is not None and tuple(value.shape) != tuple(shape):
        raise ValueError(f"argument {name!r} must have shape {tuple(shape)}, got {tuple(value.shape)}")
    if not value.flags.c_contiguous:
        raise ValueError(f"argument {name!r} must be C-contiguous (use numpy.ascontiguousarray)")
    if not value.flags.writeable:
        raise ValueError(f"argument {name!r} is read-only")
    return value


class StoredKernel:
    """A stored program opened on its target; call it with the arguments by name or in order.

    ``shapes`` (argument -> shape), when known, is checked on every call (the stored launches do not
    record their tensors' shapes). Calls are serialised: the workspaces belong to this object.
    """

    def __init__(self, program: StoredProgram, run: Callable[[Mapping[str, Any]], None],
                 shapes: Mapping[str, tuple[int, ...]] | None = None) -> None:
        self.program = program
        self.shapes = dict(shapes) if shapes is not None else None
        self._run = run
        self._lock = threading.Lock()

    @property
    def arguments(self) -> tuple[str, ...]:
        return self.program.arguments

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        buffers = bind_arguments(self.program, args, kwargs)
        with self._lock:
            self._run(buffers)

    def __repr__(self) -> str:
        return f"<StoredKernel {self.program.name}({', '.join(self.arguments)}) on {self.program.target}>"


def _private_cache(cache_dir: Path | None) -> DiskCache:
    root = cache_dir or default_cache_root() / "stored"
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    return DiskCache(root, STORED_CACHE_BYTES)


def _cpu_runner(program: StoredProgram, shapes: Mapping[str, tuple[int, ...]] | None, cache_dir: Path | None,
                workers: int | None) -> Callable[[Mapping[str, Any]], None]:
    cache = _private_cache(cache_dir)
    threads = workers or cpu.CpuConfig(cache_dir=cache.root).workers
    functions = []
    for launch in program.launches:
        path = cache.put(cache_key("stored-so", hashlib.sha256(launch.binary).hexdigest()), launch.binary)
        try:
            library = ctypes.CDLL(str(path))
        except OSError as exc:  # another ISA's or OS's object, or a library this host lacks
            raise ValueError(f"stored kernel {program.name!r}: {launch.kernel.entry}'s shared object does not "
                             f"load here: {exc}") from exc
        function = getattr(library, launch.kernel.entry, None)
        if function is None:
            raise ValueError(f"stored kernel {program.name!r}: its binary has no entry {launch.kernel.entry!r}")
        function.argtypes = [*(cpu._ctype(p) for p in launch.kernel.params), ctypes.c_int]
        function.restype = None
        functions.append(function)
    # Every call passes ``threads``: a workspace with a slot per worker needs no more slots than that.
    workspaces = {w.name: aligned_empty(w.allocated_shape(threads), STORAGE_DTYPES[w.dtype])
                  for w in program.workspaces}
    for w in program.workspaces:
        array = workspaces[w.name]
        np.copyto(array, poisoned(array.shape, w.dtype))  # a launch that reads before writing shows

    def run(buffers: Mapping[str, Any]) -> None:
        arrays = {name: host_array(name, value, program.dtypes[name], (shapes or {}).get(name))
                  for name, value in buffers.items()}
        arrays.update(workspaces)
        calls = []
        for launch, function in zip(program.launches, functions, strict=True):
            values = cpu.check_args(launch.kernel, [arrays[b] if isinstance(b, str) else b for b in launch.bindings])
            calls.append((function, values))
        for function, values in calls:
            function(*values, threads)

    return run


def load_stored(document: Mapping[str, Any], binary: bytes, *, target: str | None = None,
                shapes: Mapping[str, Sequence[int]] | None = None, cache_dir: Path | None = None,
                workers: int | None = None, device: int = 0) -> StoredKernel:
    """The callable that runs the stored program (see the module's docstring). ``shapes``: the arguments'
    shapes, checked on each call when given; ``cache_dir``: where the cpu's shared objects are written
    (``<warpmap cache>/stored``); ``workers``: host threads per cpu launch (all cores this process may
    use); ``device``: the GPU ordinal for cuda. A ValueError when the record cannot be run."""
    program = stored_program(document, binary, target=target)
    known = {name: tuple(int(d) for d in shape) for name, shape in (shapes or {}).items()}
    unknown = [name for name in known if name not in program.arguments]
    if unknown:
        raise ValueError(f"stored kernel {program.name!r}: shapes given for unknown arguments {unknown}")
    if program.target == "cuda":
        from compiler.backends import stored_cuda  # the driver bindings load only for a GPU kernel

        return StoredKernel(program, stored_cuda.runner(program, known or None, device), known or None)
    return StoredKernel(program, _cpu_runner(program, known or None, cache_dir, workers), known or None)
