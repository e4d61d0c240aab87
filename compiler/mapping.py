"""Task mappings (Hidet's ``hidet.ir.mapping``, task for task): which tasks each worker performs.

``spatial(2, 3)`` gives 6 workers one task each (worker ``w`` gets ``(w // 3, w % 3)``); ``repeat(2, 3)``
gives 1 worker all 6 tasks, row by row. ``outer * inner`` splits every task of ``outer`` into an ``inner``
grid: worker ``w`` is outer worker ``w // inner.num_workers`` and inner worker ``w % inner.num_workers``,
its tasks ``outer_task * inner.task_shape + inner_task`` with the outer tasks in the outer loop. ``ranks``
orders dimensions (rank 0 varies slowest, so ``ranks=[1, 0]`` is column-major); ``m.spatial(...)`` is
``m * spatial(...)``. Nodes are frozen dataclasses: hashable, comparable, immutable values.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class LoopAttr:
    """How the loop of one repeat dimension is emitted; ``str()`` gives Hidet's spelling.

    ``LoopAttr()`` is ``"."`` (a plain loop), ``LoopAttr(unroll=True)`` is ``"u"`` (``#pragma unroll``),
    ``LoopAttr(unroll=True, factor=4)`` is ``"u4"`` and ``LoopAttr(unroll=True, explicit=True)`` is ``"u+"``
    (the loop is unrolled by the code generator itself).
    """

    unroll: bool = False
    factor: int | None = None
    explicit: bool = False

    def __post_init__(self) -> None:
        has_factor = self.factor is not None
        bad_factor = has_factor and (type(self.factor) is not int or self.factor < 1 or self.explicit)
        if bad_factor or ((has_factor or self.explicit) and not self.unroll):
            raise ValueError(f"invalid {self!r}: factor needs unroll, is a positive int, excludes explicit")

    def __str__(self) -> str:
        if not self.unroll:
            return "."
        return "u+" if self.explicit else f"u{self.factor or ''}"

    @staticmethod
    def for_extent(extent: int) -> LoopAttr:
        """Hidet's default when no attrs are given: loops shorter than 4 are unrolled explicitly."""
        return LoopAttr(unroll=True, explicit=True) if extent < 4 else LoopAttr()


_LOOP_ATTR = r"\.|u\+|u\d*"
_LOOP_ATTRS = rf"(?:{_LOOP_ATTR})*"


def parse_loop_attrs(text: str, num_loops: int) -> tuple[LoopAttr, ...]:
    """Parse Hidet's loop attrs: ``.``, ``u``, ``uN`` or ``u+`` per loop; one attr applies to all loops.

    >>> [str(a) for a in parse_loop_attrs("u+.", 2)], [str(a) for a in parse_loop_attrs("u4", 3)]
    (['u+', '.'], ['u4', 'u4', 'u4'])

    An empty string means plain loops. Hidet's parallel ``p`` (a CPU loop attribute) is rejected.
    """
    if not isinstance(text, str):
        raise ValueError(f"loop attrs must be a string such as 'u+.', got {text!r}")
    s = text.replace(" ", "")
    if not re.fullmatch(_LOOP_ATTRS, s) or re.search(r"u0+(?!\d)", s):
        raise ValueError(f"invalid loop attrs {text!r}: expected '.', 'u', 'uN' (N > 0) or 'u+' per loop")
    attrs = [
        LoopAttr(unroll=True, factor=int(t[1:]) if t[1:].isdigit() else None, explicit=t == "u+")
        if t != "."
        else LoopAttr()
        for t in re.findall(_LOOP_ATTR, s)
    ]
    if len(attrs) <= 1:
        return ((attrs or [LoopAttr()])[0],) * num_loops
    if len(attrs) != num_loops:
        raise ValueError(f"loop attrs {text!r} give {len(attrs)} attributes for {num_loops} loops")
    return tuple(attrs)


Ranks = Sequence[int] | None


@runtime_checkable
class SymbolicWorker(Protocol):
    """A worker index that is an expression (e.g. ``threadIdx.x`` in a kernel) rather than an int."""

    def map_tasks(self, mapping: TaskMapping) -> Iterator[tuple[Any, ...]]: ...


def _check_shape(shape: Sequence[int]) -> tuple[int, ...]:
    shape = tuple(shape)
    if any(type(v) is not int or v < 1 for v in shape):
        raise ValueError(f"task shape {shape} must hold positive ints")
    return shape


def _check_ranks(shape: tuple[int, ...], ranks: Ranks) -> tuple[int, ...]:
    if ranks is None:
        return tuple(range(len(shape)))
    ranks = tuple(ranks)
    if any(type(r) is not int for r in ranks) or sorted(ranks) != list(range(len(shape))):
        raise ValueError(f"ranks {list(ranks)} are not a permutation of 0..{len(shape) - 1} for {shape}")
    return ranks


def strides_from_ranks(shape: Sequence[int], ranks: Sequence[int]) -> tuple[int, ...]:
    """Strides of a dense layout of ``shape`` whose dimension of rank 0 is outermost.

    >>> strides_from_ranks((2, 3, 4), (0, 1, 2)), strides_from_ranks((2, 3, 4), (2, 0, 1))
    ((12, 4, 1), (1, 8, 2))
    """
    shape = _check_shape(shape)
    ranks = _check_ranks(shape, ranks)
    return tuple(math.prod(e for e, r in zip(shape, ranks, strict=True) if r > rank) for rank in ranks)


def _shape_args(shape: tuple[int, ...], ranks: tuple[int, ...]) -> str:
    args = ", ".join(map(str, shape))
    return args if ranks == tuple(range(len(shape))) else f"{args}, ranks={list(ranks)}"


class TaskMapping:
    """Base of the mapping nodes. Subclasses are frozen dataclasses, so mappings are hashable values."""

    # Every subclass provides these two (as fields, properties or class constants) and ``_tasks`` for
    # in-range workers.
    @property
    def num_workers(self) -> int:
        raise NotImplementedError

    @property
    def task_shape(self) -> tuple[int, ...]:
        raise NotImplementedError

    def _tasks(self, w: int) -> list[tuple[int, ...]]:
        raise NotImplementedError

    def worker2task(self, w: int) -> list[tuple[int, ...]]:
        """The tasks of integer worker ``w``, in execution order.

        Workers past ``num_workers`` get no task: a kernel with more threads than workers guards the
        mapping with ``w < num_workers``, as Hidet's generated code does.

        >>> (repeat(2, 2) * spatial(2, 2)).worker2task(1)
        [(0, 1), (0, 3), (2, 1), (2, 3)]
        """
        if type(w) is not int or w < 0:
            raise ValueError(f"worker must be a non-negative int, got {w!r} for {self!r}")
        return self._tasks(w) if w < self.num_workers else []

    def on(self, w: int | SymbolicWorker) -> Iterator[tuple[Any, ...]]:
        """Iterate the tasks of worker ``w``; a symbolic worker generates the loops itself."""
        if type(w) is int:
            return iter(self.worker2task(w))
        if isinstance(w, SymbolicWorker):
            return w.map_tasks(self)
        raise ValueError(f"worker must be an int or a symbolic worker, got {type(w).__name__} {w!r}")

    def __mul__(self, other: object) -> TaskMapping:
        if not isinstance(other, TaskMapping):
            return NotImplemented
        return ComposedMapping(self, other)

    def spatial(self, *shape: int, ranks: Ranks = None) -> TaskMapping:
        return self * spatial(*shape, ranks=ranks)

    def repeat(self, *shape: int, ranks: Ranks = None, attrs: str | None = None) -> TaskMapping:
        return self * repeat(*shape, ranks=ranks, attrs=attrs)

    def projection(self, dim2value: Mapping[int, int]) -> TaskMapping:
        """Pin dimensions to 0: each pinned dimension gets extent 1, workers and task counts are kept.

        >>> spatial(2, 3).projection({1: 0}).worker2task(4)
        [(1, 0)]
        """
        return ProjectedMapping(self, tuple(dim2value.items()))


@dataclass(frozen=True, repr=False)
class _GridMapping(TaskMapping):
    shape: tuple[int, ...]
    ranks: tuple[int, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", _check_shape(self.shape))
        object.__setattr__(self, "ranks", _check_ranks(self.shape, self.ranks))

    @cached_property  # derived values are cached per instance: they do not take part in == or hash
    def strides(self) -> tuple[int, ...]:
        return strides_from_ranks(self.shape, self.ranks)

    @property
    def task_shape(self) -> tuple[int, ...]:
        return self.shape


@dataclass(frozen=True, repr=False)
class SpatialMapping(_GridMapping):
    """``prod(shape)`` workers with one task each; worker ``w`` gets task ``w // stride % extent``."""

    @cached_property
    def num_workers(self) -> int:
        return math.prod(self.shape)

    def _tasks(self, w: int) -> list[tuple[int, ...]]:
        return [tuple(w // s % e for e, s in zip(self.shape, self.strides, strict=True))]

    def __repr__(self) -> str:
        return f"spatial({_shape_args(self.shape, self.ranks)})"


@dataclass(frozen=True, repr=False)
class RepeatMapping(_GridMapping):
    """One worker performing all tasks of ``shape``, the dimension of rank 0 in the outermost loop."""

    attrs: tuple[LoopAttr, ...]

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "attrs", tuple(self.attrs))
        if len(self.attrs) != len(self.shape) or not all(isinstance(a, LoopAttr) for a in self.attrs):
            raise ValueError(f"repeat {self.shape} needs {len(self.shape)} LoopAttrs, got {self.attrs}")

    num_workers = 1  # a class constant, not a dataclass field

    def _tasks(self, w: int) -> list[tuple[int, ...]]:
        strides = self.strides  # a bijection onto range(prod(shape)): sorting by it is the loop order
        grid = itertools.product(*map(range, self.shape))
        return sorted(grid, key=lambda task: sum(i * s for i, s in zip(task, strides, strict=True)))

    def __repr__(self) -> str:
        args = _shape_args(self.shape, self.ranks)
        if self.attrs != tuple(LoopAttr.for_extent(e) for e in self.shape):
            args += f", attrs={''.join(map(str, self.attrs))!r}"
        return f"repeat({args})"


@dataclass(frozen=True, repr=False)
class ComposedMapping(TaskMapping):
    """``outer * inner``: every task of ``outer`` is split into the task grid of ``inner``."""

    outer: TaskMapping
    inner: TaskMapping

    def __post_init__(self) -> None:
        if not isinstance(self.outer, TaskMapping) or not isinstance(self.inner, TaskMapping):
            raise ValueError(f"can only compose task mappings, got {self.outer!r} and {self.inner!r}")
        a, b = self.outer.task_shape, self.inner.task_shape
        if len(a) != len(b):
            raise ValueError(f"cannot compose task shapes of different rank: {a} ({self.outer!r}) * {b}")

    @cached_property
    def num_workers(self) -> int:
        return self.outer.num_workers * self.inner.num_workers

    @cached_property
    def task_shape(self) -> tuple[int, ...]:
        return tuple(a * b for a, b in zip(self.outer.task_shape, self.inner.task_shape, strict=True))

    def _tasks(self, w: int) -> list[tuple[int, ...]]:
        n_inner, inner_shape = self.inner.num_workers, self.inner.task_shape
        inner_tasks = self.inner._tasks(w % n_inner)
        return [
            tuple(a * e + b for a, e, b in zip(outer_task, inner_shape, inner_task, strict=True))
            for outer_task in self.outer._tasks(w // n_inner)
            for inner_task in inner_tasks
        ]

    def __repr__(self) -> str:
        if isinstance(self.inner, _GridMapping):
            outer = f"({self.outer!r})" if _starred(self.outer) else repr(self.outer)
            return f"{outer}.{self.inner!r}"
        inner = f"({self.inner!r})" if isinstance(self.inner, ComposedMapping) else repr(self.inner)
        return f"{self.outer!r} * {inner}"


def _starred(m: TaskMapping) -> bool:
    """Whether ``repr(m)`` is an ``a * b`` expression, which a trailing ``.method()`` would split."""
    return isinstance(m, ComposedMapping) and not isinstance(m.inner, _GridMapping)


@dataclass(frozen=True, repr=False)
class ProjectedMapping(TaskMapping):
    """``base`` with some dimensions pinned to 0 (the only value Hidet accepts); their extent becomes 1."""

    base: TaskMapping
    dim2value: tuple[tuple[int, int], ...]

    def __post_init__(self) -> None:
        items = self.dim2value.items() if isinstance(self.dim2value, Mapping) else self.dim2value
        pairs = tuple(sorted((d, v) for d, v in items))
        object.__setattr__(self, "dim2value", pairs)
        rank = len(self.base.task_shape)
        dims = [d for d, _ in pairs]
        if len(set(dims)) != len(dims) or any(type(d) is not int or not 0 <= d < rank for d in dims):
            raise ValueError(f"projection dims {dims} are not distinct dims of {self.base.task_shape}")
        if any(v != 0 or type(v) is not int for _, v in pairs):
            raise ValueError(f"projection values must be 0, got {dict(pairs)} for {self.base.task_shape}")

    @property
    def num_workers(self) -> int:
        return self.base.num_workers

    @property
    def task_shape(self) -> tuple[int, ...]:
        pinned = dict(self.dim2value)
        return tuple(1 if d in pinned else e for d, e in enumerate(self.base.task_shape))

    def _tasks(self, w: int) -> list[tuple[int, ...]]:
        pinned = dict(self.dim2value)
        return [tuple(pinned.get(d, i) for d, i in enumerate(task)) for task in self.base._tasks(w)]

    def __repr__(self) -> str:
        base = f"({self.base!r})" if _starred(self.base) else repr(self.base)
        return f"{base}.projection({dict(self.dim2value)})"


def spatial(*shape: int, ranks: Ranks = None) -> SpatialMapping:
    """One task per worker over ``shape``, the dimension of rank 0 varying slowest.

    >>> [spatial(2, 3).worker2task(w)[0] for w in range(4)]
    [(0, 0), (0, 1), (0, 2), (1, 0)]
    >>> [spatial(2, 3, ranks=[1, 0]).worker2task(w)[0] for w in range(4)]
    [(0, 0), (1, 0), (0, 1), (1, 1)]
    """
    shape = _check_shape(shape)
    return SpatialMapping(shape, _check_ranks(shape, ranks))


def repeat(*shape: int, ranks: Ranks = None, attrs: str | None = None) -> RepeatMapping:
    """One worker loops over ``shape``; ``attrs`` (see ``parse_loop_attrs``) says how each loop is emitted.

    Without attrs, loops of extent < 4 are unrolled explicitly (``u+``) and the others are plain (``.``):

    >>> m = repeat(2, 8)
    >>> [str(a) for a in m.attrs], m.worker2task(0)[:3]
    (['u+', '.'], [(0, 0), (0, 1), (0, 2)])
    """
    shape = _check_shape(shape)
    defaults = tuple(LoopAttr.for_extent(e) for e in shape)
    loop_attrs = defaults if attrs is None else parse_loop_attrs(attrs, len(shape))
    return RepeatMapping(shape, _check_ranks(shape, ranks), loop_attrs)


def auto_map(*shape: int, workers: int, ranks: Ranks = None) -> TaskMapping:
    """``repeat(...) * spatial(...)`` giving contiguous tasks to contiguous workers.

    From the dimension of highest rank down, each spatial extent is ``gcd(workers left, extent)``:

    >>> auto_map(8, 96, workers=64)   # spatial: gcd(64, 96) = 32, then gcd(2, 8) = 2
    repeat(4, 3).spatial(2, 32)
    >>> auto_map(8, 32, workers=64), auto_map(8, 128, workers=64)
    (repeat(4, 1).spatial(2, 32), repeat(8, 2).spatial(1, 64))
    >>> auto_map(8, 16, 24, workers=32)
    repeat(8, 4, 3).spatial(1, 4, 8)
    >>> auto_map(8, 96, workers=64, ranks=[1, 0])
    repeat(1, 12, ranks=[1, 0]).spatial(8, 8, ranks=[1, 0])

    The number of tasks must be a multiple of ``workers`` (``auto_map(8, 41, workers=64)`` raises).
    """
    shape = _check_shape(shape)
    ranks = _check_ranks(shape, ranks)
    if type(workers) is not int or workers < 1:
        raise ValueError(f"workers must be a positive int, got {workers!r}")
    if math.prod(shape) % workers:
        raise ValueError(f"task shape {shape}: {math.prod(shape)} tasks, not a multiple of {workers} workers")
    spatial_shape, left = [1] * len(shape), workers
    for rank in reversed(range(len(shape))):
        dim = ranks.index(rank)
        spatial_shape[dim] = math.gcd(left, shape[dim])
        left //= spatial_shape[dim]
    repeat_shape = [e // s for e, s in zip(shape, spatial_shape, strict=True)]
    return repeat(*repeat_shape, ranks=ranks) * spatial(*spatial_shape, ranks=ranks)
