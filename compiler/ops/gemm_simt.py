"""A float32 GEMM mainloop on CUDA cores, written with task mappings; templates plug in their operands.

A block computes a ``block_m x block_n`` tile of ``C = A @ B`` (A logically ``[M, K]``, B ``[K, N]``).
The block's threads form the compute mapping
``spatial(warps_m, warps_n).repeat(repeat_m, repeat_n).spatial(lanes_m, lanes_n).repeat(thread_m, thread_n)``:
warps side by side, each covering its part of the tile ``repeat`` times with a footprint in which every
lane owns a ``thread_m x thread_n`` patch. K advances ``block_k`` at a time through two shared buffers;
each thread fetches its share of the next k tile into registers while the block multiplies the current
one, then stores it into the other buffer, so one barrier per step suffices.

What the mainloop does not know is where operand elements live: an :class:`OperandLoader` answers
"element (x, k) of this operand" with an expression and a predicate. A strided matrix
(:class:`StridedOperand`) is one loader; an implicit-GEMM convolution supplies one that gathers image
patches, and reuses everything else::

    with kernel("conv", block=tile.threads, grid=...) as k:
        ...
        acc = simt_gemm(tile, patches, weights, origin=(m0, n0), k_extent=c * r * s)
        for i, j in tile.compute.on(threadIdx.x):
            ...  # write acc[i, j], element (m0 + i, n0 + j) of C, where it is in bounds

Its space reuses the tile's rules: ``tile.threads``, ``tile.shared_bytes()``,
``tile.estimated_registers(...)`` and ``tile.loads_divide(...)``.

Shared tiles are stored k-major (``[k][x]``, rows padded by ``SHARED_PAD``) for both operands: in the
inner product a warp reads a row of each, which is conflict-free (lanes either share an address or hit
distinct banks).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Protocol

from compiler.ir import (
    Buffer,
    Expr,
    else_,
    f32,
    if_,
    lane,
    let,
    local_index,
    local_shape,
    logical_and,
    make_vector,
    range_,
    registers,
    select,
    shared,
    sync_threads,
    task_registers,
    threadIdx,
)
from compiler.ir.local import TaskRegisters
from compiler.mapping import ComposedMapping, RepeatMapping, TaskMapping, auto_map, repeat, spatial
from compiler.space import ScheduleDoesNotFitError

WARP_SIZE = 32
#: Floats added to each k row of a shared tile. A thread fetching consecutive k of one row stores them
#: down a column; without padding the lanes of a warp would hit one bank ``block_k`` ways. Four keeps
#: rows 16-byte aligned for vector stores.
SHARED_PAD = 4
#: Registers a thread needs beside its tiles (indices, addresses, loop counters): a working estimate.
REGISTER_OVERHEAD = 32


@dataclass(frozen=True)
class SimtTile:
    """How a block's threads share a ``block_m x block_n`` tile of C, and the k step.

    >>> tile = SimtTile(warps_m=2, warps_n=2, repeat_m=2, repeat_n=1, lanes_m=4, thread_m=4, thread_n=4,
    ...                 block_k=8)
    >>> tile.threads, tile.block_m, tile.block_n, tile.lanes_n
    (128, 64, 64, 8)
    """

    warps_m: int
    warps_n: int
    repeat_m: int
    repeat_n: int
    lanes_m: int
    thread_m: int
    thread_n: int
    block_k: int

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if type(value) is not int or value < 1:
                raise ValueError(f"{type(self).__name__}.{name} must be a positive int, got {value!r}")
        if WARP_SIZE % self.lanes_m:
            raise ValueError(f"lanes_m={self.lanes_m} does not divide the {WARP_SIZE} lanes of a warp")

    @property
    def lanes_n(self) -> int:
        return WARP_SIZE // self.lanes_m

    @property
    def threads(self) -> int:
        return self.warps_m * self.warps_n * WARP_SIZE

    @property
    def block_m(self) -> int:
        return self.warps_m * self.repeat_m * self.lanes_m * self.thread_m

    @property
    def block_n(self) -> int:
        return self.warps_n * self.repeat_n * self.lanes_n * self.thread_n

    @property
    def accumulators(self) -> int:
        """C elements each thread accumulates."""
        return self.repeat_m * self.repeat_n * self.thread_m * self.thread_n

    @property
    def fragments(self) -> int:
        """Shared-memory elements each thread reads per k step (its slices of an A column and a B row)."""
        return self.repeat_m * self.thread_m + self.repeat_n * self.thread_n

    @property
    def compute(self) -> TaskMapping:
        """Which elements of the block's C tile each thread accumulates (tile-relative tasks)."""
        return (
            spatial(self.warps_m, self.warps_n)
            .repeat(self.repeat_m, self.repeat_n, attrs="u")
            .spatial(self.lanes_m, self.lanes_n)
            .repeat(self.thread_m, self.thread_n, attrs="u")
        )

    @property
    def rows(self) -> TaskMapping:
        """``compute`` without its column repeats: task ``(i, _)`` for each row ``i`` the thread owns once.

        (A projection of ``compute`` would keep the column loops and visit every row ``thread_n`` times.)
        """
        return (
            spatial(self.warps_m, self.warps_n)
            .repeat(self.repeat_m, 1, attrs="u")
            .spatial(self.lanes_m, self.lanes_n)
            .repeat(self.thread_m, 1, attrs="u")
        )

    @property
    def cols(self) -> TaskMapping:
        """``compute`` without its row repeats: task ``(_, j)`` for each column ``j`` the thread owns."""
        return (
            spatial(self.warps_m, self.warps_n)
            .repeat(1, self.repeat_n, attrs="u")
            .spatial(self.lanes_m, self.lanes_n)
            .repeat(1, self.thread_n, attrs="u")
        )

    def estimated_registers(self, vector_a: int = 1, vector_b: int = 1) -> int:
        """Accumulators, fragments, prefetched elements and an overhead: a pre-compile estimate (within
        about 20 of what ptxas reports for sm_90; the compile itself prunes what spills)."""
        staged_a = max(vector_a, self.block_m * self.block_k // self.threads)
        staged_b = max(vector_b, self.block_n * self.block_k // self.threads)
        return self.accumulators + self.fragments + staged_a + staged_b + REGISTER_OVERHEAD

    def loads_divide(self, a_k_contiguous: bool, vector_a: int, b_k_contiguous: bool, vector_b: int) -> bool:
        """Whether both operand tiles can be shared out among the threads (see :func:`load_mapping`)."""
        return (load_mapping(self.block_m, self.block_k, a_k_contiguous, vector_a, self.threads) is not None
                and load_mapping(self.block_n, self.block_k, b_k_contiguous, vector_b, self.threads) is not None)

    def shared_bytes(self) -> int:
        """Static shared memory of the two k-major, padded buffers of both operands."""
        return 2 * self.block_k * (self.block_m + self.block_n + 2 * SHARED_PAD) * 4


class OperandLoader(Protocol):
    """Reads element ``(x, k)`` of one GEMM operand of the current block (x: a row of A, a column of B).

    ``load`` returns a value and the predicate under which it may be read (out of range: zero is used).
    With ``vector > 1`` the value is a vector of that many elements starting at ``(x, k)`` along the
    contiguous dimension (k if ``k_contiguous``, else x); the mainloop only asks at multiples of
    ``vector`` there, and the predicate covers the whole vector.
    """

    @property
    def k_contiguous(self) -> bool: ...

    @property
    def vector(self) -> int: ...

    def load(self, x: Expr, k: Expr) -> tuple[Expr, Expr]: ...


@dataclass(frozen=True)
class StridedOperand:
    """A ``[extent_x, extent_k]`` matrix of one batch: ``tensor[batch, x, k]``, or ``tensor[batch, k, x]``
    when ``k_contiguous`` is False (a column-major A, a row-major B)."""

    tensor: Buffer
    batch: Expr
    extent_x: int
    extent_k: int
    k_contiguous: bool
    vector: int = 1

    def __post_init__(self) -> None:
        contiguous = self.extent_k if self.k_contiguous else self.extent_x
        if self.vector not in (1, 2, 4) or contiguous % self.vector:
            raise ValueError(f"{self.tensor.name}: {self.vector}-element loads need a contiguous extent that "
                             f"is a multiple of {self.vector}, got {contiguous}")

    def load(self, x: Expr, k: Expr) -> tuple[Expr, Expr]:
        index = (self.batch, x, k) if self.k_contiguous else (self.batch, k, x)
        inside = logical_and(x < self.extent_x, k < self.extent_k)
        if self.vector == 1:
            return self.tensor[index], inside
        return self.tensor.load_vector(*index, lanes=self.vector), inside


def vector_aligned(contiguous_extent: int, vector: int) -> bool:
    """Whether ``vector``-element loads along a dimension of this extent stay aligned and whole."""
    return contiguous_extent % vector == 0


def load_mapping(tile_x: int, block_k: int, k_contiguous: bool, vector: int, threads: int) -> TaskMapping | None:
    """Which loads of a ``tile_x x block_k`` operand tile each thread makes, or None if none fits.

    A task is one load of ``vector`` elements; consecutive threads take consecutive loads along the
    contiguous dimension (coalesced). Tasks must be a multiple of the threads (every thread loads the
    same number) or divide them (the surplus threads load nothing).

    >>> load_mapping(64, 8, True, 1, 256)
    repeat(2, 1, attrs='uu').spatial(32, 8)
    >>> load_mapping(64, 8, False, 4, 256), load_mapping(12, 8, True, 1, 64)
    (spatial(8, 16), None)
    """
    along = block_k if k_contiguous else tile_x
    if along % vector:
        return None
    shape = (tile_x, block_k // vector) if k_contiguous else (block_k, tile_x // vector)
    tasks = prod(shape)
    if tasks % threads == 0:
        mapping = auto_map(*shape, workers=threads)
        assert isinstance(mapping, ComposedMapping) and isinstance(mapping.outer, RepeatMapping)
        if mapping.outer.shape == (1, 1):
            return mapping.inner
        # Fetched values live in registers: every loop indexing them must be unrolled.
        return repeat(*mapping.outer.shape, attrs="u") * mapping.inner
    if threads % tasks == 0:
        return spatial(*shape)
    return None


@dataclass(frozen=True)
class _Operand:
    """One operand's way from global memory through registers to its shared buffer."""

    loader: OperandLoader
    mapping: TaskMapping
    origin: Expr
    staged: Buffer  # registers: this thread's fetched elements, [*local_shape(mapping), vector]
    tile: Buffer  # shared [2, block_k, tile_x + SHARED_PAD]
    block_k: int

    def _coords(self, task: tuple[Expr, ...]) -> tuple[Expr, Expr]:
        """Tile-relative (x, k) of the first element of a load task."""
        v = self.loader.vector
        return (task[0], task[1] * v) if self.loader.k_contiguous else (task[1] * v, task[0])

    def fetch(self, k_tile: Expr | int) -> None:
        """Global -> registers: this thread's loads of k tile ``k_tile``; zero outside the operand."""
        v = self.loader.vector
        for task in self.mapping.on(threadIdx.x):
            x, kk = self._coords(task)
            value, inside = self.loader.load(self.origin + x, k_tile * self.block_k + kk)
            where = local_index(self.mapping, task)
            if v == 1:
                self.staged[(*where, 0)] = select(inside, value, 0.0)
                continue
            with if_(inside):
                fetched = let("fetched", value)
                for t in range(v):
                    self.staged[(*where, t)] = lane(fetched, t)
            with else_():
                for t in range(v):
                    self.staged[(*where, t)] = 0.0

    def store(self, buffer: Expr | int) -> None:
        """Registers -> shared buffer ``buffer`` (k-major); one vector store when x is contiguous."""
        v = self.loader.vector
        for task in self.mapping.on(threadIdx.x):
            x, kk = self._coords(task)
            where = local_index(self.mapping, task)
            if self.loader.k_contiguous:
                for t in range(v):
                    self.tile[buffer, kk + t, x] = self.staged[(*where, t)]
            elif v == 4:
                self.tile.store_vector((buffer, kk, x), make_vector(*(self.staged[(*where, t)] for t in range(v))))
            else:
                for t in range(v):
                    self.tile[buffer, kk, x + t] = self.staged[(*where, t)]


def _operand(name: str, loader: OperandLoader, origin: Expr, tile_x: int, tile: SimtTile) -> _Operand:
    mapping = load_mapping(tile_x, tile.block_k, loader.k_contiguous, loader.vector, tile.threads)
    if mapping is None:
        raise ScheduleDoesNotFitError(f"{name}: {tile_x} x {tile.block_k} tile in {loader.vector}-element loads "
                                      f"does not divide among {tile.threads} threads")
    staged = registers(f"fetch_{name}", f32, (*local_shape(mapping), loader.vector))
    buffer = shared(f"smem_{name}", f32, (2, tile.block_k, tile_x + SHARED_PAD))
    return _Operand(loader, mapping, origin, staged, buffer, tile.block_k)


def simt_gemm(tile: SimtTile, a: OperandLoader, b: OperandLoader, *, origin: tuple[Expr, Expr],
              k_extent: int) -> TaskRegisters:
    """Emit the mainloop into the kernel being written; return the accumulators of ``tile.compute``.

    ``origin`` is the block's first (row, column) of C; ``a`` and ``b`` read rows of A and columns of B
    at absolute coordinates. Element ``(i, j)`` of the returned registers (for the thread's tasks
    ``i, j`` of ``tile.compute``) is ``sum_k A[row0 + i, k] * B[k, col0 + j]``. Raises
    :class:`~compiler.space.ScheduleDoesNotFitError` when the operand tiles cannot be shared out among the
    threads (see :func:`load_mapping`).
    """
    if k_extent < 1:
        raise ValueError(f"k_extent must be positive, got {k_extent}")
    op_a = _operand("a", a, origin[0], tile.block_m, tile)
    op_b = _operand("b", b, origin[1], tile.block_n, tile)
    compute = tile.compute
    rows, cols = tile.rows, tile.cols  # the thread's slices of a column of A and a row of B
    frag_a = task_registers("frag_a", f32, rows)
    frag_b = task_registers("frag_b", f32, cols)
    acc = task_registers("acc", f32, compute)
    for i, j in compute.on(threadIdx.x):
        acc[i, j] = 0.0

    num_k_tiles = -(-k_extent // tile.block_k)
    op_a.fetch(0)
    op_b.fetch(0)
    op_a.store(0)
    op_b.store(0)
    sync_threads()
    for k_tile in range_(num_k_tiles, name="k_tile"):
        buffer = k_tile % 2
        with if_(k_tile + 1 < num_k_tiles):
            op_a.fetch(k_tile + 1)  # in flight while the block multiplies the current tile
            op_b.fetch(k_tile + 1)
        for kk in range_(tile.block_k, name="kk", unroll=True):
            for i, _ in rows.on(threadIdx.x):
                frag_a[i, 0] = op_a.tile[buffer, kk, i]
            for _, j in cols.on(threadIdx.x):
                frag_b[0, j] = op_b.tile[buffer, kk, j]
            for i, j in compute.on(threadIdx.x):
                acc[i, j] += frag_a[i, 0] * frag_b[0, j]
        with if_(k_tile + 1 < num_k_tiles):
            op_a.store(1 - buffer)  # the other buffer: its last readers passed the previous barrier
            op_b.store(1 - buffer)
        sync_threads()
    return acc
