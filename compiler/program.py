"""What a template builds: a target-neutral program of lowered kernels, launched in order.

A :class:`Program` names its arguments (the operator's inputs and outputs, by the names
``Operator.inputs`` and ``Operator.outputs`` give them), the scratch buffers it needs between launches
(:class:`Workspace`), and its launches. Each :class:`Launch` is one lowered ``compiler.ir.Kernel`` (which
carries its grid, block and dynamic shared memory) and, per kernel parameter, what binds to it: the
name of a program argument or workspace for a pointer, a number for a scalar. Targets render and
compile the kernels; nothing here knows any target.

>>> from compiler.ir import f32, kernel, lower, threadIdx
>>> with kernel("fill", block=32) as k:
...     y = k.tensor("y", f32, (32,))
...     y[threadIdx.x] = 1.0
>>> program = Program.single(lower(k.kernel))
>>> program.arguments, [launch.bindings for launch in program.launches]
(('y',), [('y',)])
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from math import prod

import numpy as np

from compiler.ir.kernel import Kernel
from compiler.ir.types import PointerType

#: What binds to one kernel parameter: a buffer's name (pointer) or a value (scalar by value).
Binding = str | int | float


@dataclass(frozen=True)
class Workspace:
    """A buffer the program allocates for itself, alive across its launches (partial results).

    ``per_worker``: the first axis is a slot per host thread of the launches that use it (their kernels
    index it with ``compiler.ir.worker_slot``), and ``shape[0]`` slots cover the most threads any of them
    runs on (``Kernel.host_max_workers``). The template cannot know the host it will run on; the target
    that loads the program can, and allocates ``allocated_shape(threads)`` for a launch on that many
    threads. A target that allocates the declared shape (the GPU targets, which have no host threads)
    is correct too, only larger.

    >>> Workspace("bw", (256, 24, 768, 32), "float32", per_worker=True).allocated_shape(2)
    (2, 24, 768, 32)
    >>> Workspace("partials", (4, 3), "float32").allocated_shape(2)
    (4, 3)
    """

    name: str
    shape: tuple[int, ...]
    dtype: str
    per_worker: bool = False

    def __post_init__(self) -> None:
        if any(d < 1 for d in self.shape):
            raise ValueError(f"workspace {self.name!r}: extents must be positive, got {self.shape}")
        if self.per_worker and not self.shape:
            raise ValueError(f"workspace {self.name!r}: a slot per worker needs an axis for the slots")

    @property
    def elements(self) -> int:
        return prod(self.shape)

    def allocated_shape(self, workers: int) -> tuple[int, ...]:
        """The shape to allocate for launches on at most ``workers`` host threads: the declared one, its
        slots cut to ``workers`` where it has a slot per worker."""
        if workers < 1:
            raise ValueError(f"workspace {self.name!r}: workers must be at least 1, got {workers}")
        if not self.per_worker:
            return self.shape
        return (min(self.shape[0], workers), *self.shape[1:])


def _param_dtype(kernel: Kernel, index: int) -> tuple[str, bool]:
    """The element dtype of parameter ``index`` and whether it is a pointer."""
    ty = kernel.params[index].type
    if isinstance(ty, PointerType):
        return ty.element.dtype, True
    return ty.dtype, False  # type: ignore[union-attr]


@dataclass(frozen=True)
class Launch:
    """One lowered kernel and what binds to each of its parameters, in parameter order."""

    kernel: Kernel
    bindings: tuple[Binding, ...]

    def __post_init__(self) -> None:
        if len(self.bindings) != len(self.kernel.params):
            raise ValueError(f"{self.kernel.name}: {len(self.kernel.params)} parameters, "
                             f"{len(self.bindings)} bindings")
        for index, binding in enumerate(self.bindings):
            _, pointer = _param_dtype(self.kernel, index)
            if pointer != isinstance(binding, str):
                what = "a buffer name" if pointer else "a scalar value"
                raise ValueError(f"{self.kernel.name}: parameter {self.kernel.params[index].name!r} "
                                 f"binds {what}, got {binding!r}")

    @staticmethod
    def by_name(kernel: Kernel) -> Launch:
        """The launch whose pointer parameters bind to the buffers of the same names (a kernel with scalar
        parameters needs its bindings spelled out)."""
        return Launch(kernel, tuple(p.name for p in kernel.params))

    def buffer_bindings(self) -> tuple[tuple[str, str, str], ...]:
        """(parameter, buffer, dtype) for each pointer parameter."""
        out = []
        for index, binding in enumerate(self.bindings):
            dtype, pointer = _param_dtype(self.kernel, index)
            if pointer:
                out.append((self.kernel.params[index].name, str(binding), dtype))
        return tuple(out)


@dataclass(frozen=True)
class Program:
    """Launches of lowered kernels over the program's arguments and workspaces, run in order."""

    name: str
    arguments: tuple[str, ...]
    launches: tuple[Launch, ...]
    workspaces: tuple[Workspace, ...] = ()

    def __post_init__(self) -> None:
        if not self.launches:
            raise ValueError(f"program {self.name!r} has no launches")
        names = [*self.arguments, *(w.name for w in self.workspaces)]
        if len(set(names)) != len(names):
            raise ValueError(f"program {self.name!r}: argument and workspace names repeat: {names}")
        workspaces = {w.name: w for w in self.workspaces}
        dtypes: dict[str, str] = {w.name: w.dtype for w in self.workspaces}
        used: set[str] = set()
        for launch in self.launches:
            for param, buffer, dtype in launch.buffer_bindings():
                if buffer not in self.arguments and buffer not in workspaces:
                    raise ValueError(f"program {self.name!r}: {launch.kernel.name}.{param} binds {buffer!r}, "
                                     "which is neither an argument nor a workspace")
                if dtypes.setdefault(buffer, dtype) != dtype:
                    raise ValueError(f"program {self.name!r}: {buffer!r} is {dtypes[buffer]} in one launch "
                                     f"and {dtype} in {launch.kernel.name}")
                if buffer in workspaces:
                    _check_slots(self.name, workspaces[buffer], launch.kernel)
                used.add(buffer)
        unused = [name for name in names if name not in used]
        if unused:
            raise ValueError(f"program {self.name!r}: no launch uses {unused}")

    @staticmethod
    def single(kernel: Kernel) -> Program:
        """A program of one launch whose arguments are the kernel's pointer parameters."""
        launch = Launch.by_name(kernel)
        return Program(kernel.name, tuple(b for _, b, _ in launch.buffer_bindings()), (launch,))

    def dtype_of(self, buffer: str) -> str:
        """The element dtype an argument or workspace is used with."""
        for launch in self.launches:
            for _, name, dtype in launch.buffer_bindings():
                if name == buffer:
                    return dtype
        raise KeyError(buffer)


def _check_slots(program: str, workspace: Workspace, kernel: Kernel) -> None:
    """A workspace with a slot per worker is cut to the launch's threads, so a launch that uses it must
    bound its threads, and by no more than the declared slots: else a thread would index past the cut."""
    if not workspace.per_worker:
        return
    bound = kernel.host_max_workers
    if bound is None or bound > workspace.shape[0]:
        runs = "on as many threads as it is given" if bound is None else f"on up to {bound} threads"
        raise ValueError(f"program {program!r}: {workspace.name!r} has {workspace.shape[0]} slots, a slot per "
                         f"worker, but {kernel.name} runs {runs}")


def launch_arguments(
    program: Program, buffers: Mapping[str, np.ndarray]
) -> list[list[np.ndarray | int | float]]:
    """For each launch, its arguments in parameter order, drawn from ``buffers`` (arguments and workspaces
    by name): the same array object wherever a buffer is bound, so one launch's writes reach the next."""
    missing = [name for name in (*program.arguments, *(w.name for w in program.workspaces)) if name not in buffers]
    if missing:
        raise ValueError(f"program {program.name!r}: no buffer given for {missing}")
    return [[buffers[b] if isinstance(b, str) else b for b in launch.bindings] for launch in program.launches]
