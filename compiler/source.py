"""The hand-off between code generation and every backend: one kernel as source text plus launch data."""

from __future__ import annotations

from dataclasses import dataclass

#: Element types a kernel parameter can carry, by their numpy-style names. ``bfloat16`` has no numpy
#: dtype: backends exchange it as ``uint16`` bit patterns.
PARAM_DTYPES = frozenset({"float32", "float16", "bfloat16", "int32", "uint32", "bool"})

Dim3 = tuple[int, int, int]


@dataclass(frozen=True)
class Param:
    """One kernel parameter: a pointer to global memory, or a scalar passed by value."""

    name: str
    dtype: str
    pointer: bool = True

    def __post_init__(self) -> None:
        if self.dtype not in PARAM_DTYPES:
            raise ValueError(f"parameter {self.name!r}: unknown dtype {self.dtype!r}")


@dataclass(frozen=True)
class KernelSource:
    """A complete CUDA C++ translation unit with one ``extern "C"`` entry and how to launch it.

    ``shared_bytes`` is the dynamic shared memory requested at launch (static ``__shared__`` arrays
    are part of the source). ``params`` are in argument order.
    """

    entry: str
    source: str
    grid: Dim3
    block: Dim3
    params: tuple[Param, ...]
    shared_bytes: int = 0

    def __post_init__(self) -> None:
        for label, dims in (("grid", self.grid), ("block", self.block)):
            if len(dims) != 3 or any(d < 1 for d in dims):
                raise ValueError(f"{self.entry}: {label} must be three positive extents, got {dims}")
        if self.shared_bytes < 0:
            raise ValueError(f"{self.entry}: shared_bytes must be >= 0, got {self.shared_bytes}")

    @property
    def threads_per_block(self) -> int:
        x, y, z = self.block
        return x * y * z

    @property
    def num_blocks(self) -> int:
        x, y, z = self.grid
        return x * y * z
