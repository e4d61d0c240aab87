"""A kernel function: name, parameters, body and launch attributes."""

from __future__ import annotations

import re
from dataclasses import dataclass

from compiler.ir.expr import Var
from compiler.ir.stmt import Body
from compiler.ir.types import PointerType, f32, i32, u32

Dim3 = tuple[int, int, int]

#: Scalar types a kernel may take by value (see the CUDA subset).
SCALAR_PARAM_TYPES = (i32, u32, f32)

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def dim3(value: int | tuple[int, ...], what: str) -> Dim3:
    """``value`` (an int or up to three ints) as a three-extent launch dimension."""
    dims = (value,) if isinstance(value, int) else tuple(value)
    if not 1 <= len(dims) <= 3 or any(not isinstance(d, int) or d < 1 for d in dims):
        raise ValueError(f"{what} must be one to three positive ints, got {value!r}")
    return (*dims, *(1,) * (3 - len(dims)))  # type: ignore[return-value]


@dataclass(frozen=True)
class Kernel:
    """One ``__global__`` function and how it is launched.

    ``block`` and ``grid`` are concrete (operator templates know their sizes when they build);
    ``min_blocks`` is the second ``__launch_bounds__`` argument; ``dynamic_shared_bytes`` is the
    dynamic shared memory the launch must request. ``host_schedule`` is how a host target shares the
    blocks among its threads: ``"static"`` (equal runs, fixed in advance) or ``"dynamic"`` (handed out
    in chunks as threads finish: for blocks of uneven cost, or cores shared with other work); GPU
    targets ignore it. ``host_max_workers`` bounds the threads of a host launch (a kernel whose scratch
    has a slot per thread, ``compiler.ir.intrinsics.worker_slot``, has that many slots); None: as many
    as the launch is given.
    """

    name: str
    params: tuple[Var, ...]
    body: Body
    block: Dim3
    grid: Dim3
    min_blocks: int | None = None
    dynamic_shared_bytes: int = 0
    host_schedule: str = "static"
    host_max_workers: int | None = None

    def __post_init__(self) -> None:
        if not _IDENTIFIER.fullmatch(self.name):
            raise ValueError(f"kernel name {self.name!r} is not a C identifier")
        seen: set[str] = set()
        for param in self.params:
            if not _IDENTIFIER.fullmatch(param.name) or param.name in seen:
                raise ValueError(f"kernel {self.name}: parameter name {param.name!r} is invalid or repeated")
            seen.add(param.name)
            if not isinstance(param.type, PointerType) and param.type not in SCALAR_PARAM_TYPES:
                raise TypeError(f"kernel {self.name}: parameter {param.name} has unusable type {param.type}")
        if self.host_schedule not in ("static", "dynamic"):
            raise ValueError(f"kernel {self.name}: host_schedule must be 'static' or 'dynamic', "
                             f"got {self.host_schedule!r}")
        if self.host_max_workers is not None and self.host_max_workers < 1:
            raise ValueError(f"kernel {self.name}: host_max_workers must be positive, got {self.host_max_workers}")
        if self.min_blocks is not None and self.min_blocks < 1:
            raise ValueError(f"kernel {self.name}: min_blocks must be positive, got {self.min_blocks}")

    @property
    def threads_per_block(self) -> int:
        x, y, z = self.block
        return x * y * z

