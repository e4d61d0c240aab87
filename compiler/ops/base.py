"""The contract every operator module implements, so search, checking and the service treat them alike."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from compiler.cpu_device import CpuDevice
from compiler.device import DeviceSpec
from compiler.ops.spec import OpSpec
from compiler.program import Program
from compiler.space import Space


@dataclass(frozen=True)
class TensorSpec:
    """Shape and element type of one kernel argument, by its parameter name.

    For an output, ``reduction`` is how many terms each element sums (``k`` of a matmul, ``c * r * s``
    of a convolution, 1 for elementwise results): verification allows rounding error that grows with
    it (see :func:`compiler.numeric.tolerance`).
    """

    name: str
    shape: tuple[int, ...]
    dtype: str
    reduction: int = 1

    def __post_init__(self) -> None:
        if self.reduction < 1:
            raise ValueError(f"{self.name}: reduction length must be at least 1, got {self.reduction}")


class Operator(Protocol):
    """One operator (``matmul``, ``conv2d`` ...) and the templates that implement it.

    ``inputs`` are host arrays in storage form (see ``compiler.numeric``), keyed by kernel parameter
    name; ``outputs`` describe the buffers a kernel writes, each with the reduction length of its
    elements (what the correctness check's tolerance scales with). ``reference`` returns float64 arrays keyed
    like ``outputs``.
    """

    name: str
    spec_model: type[OpSpec]

    def space(self, spec: Any, device: DeviceSpec | CpuDevice, level: int) -> Space[Any]:
        """The schedules of the template that serves ``spec`` on ``device`` (a GPU's description or the
        host's: which one decides the template target)."""
        ...

    def build(self, spec: Any, schedule: Hashable, target: str) -> Program:
        """The program of ``schedule``, from the template for ``target`` (a target's ``template_target``:
        ``"cuda"`` or ``"cpu"``)."""
        ...

    def template_for(self, spec: Any, target: str) -> Any:
        """The template serving ``spec.dtype`` on ``target`` (``"cuda"`` or ``"cpu"``), or a ValueError
        naming the operator, the dtype, the target and the dtypes that target has."""
        ...

    def inputs(self, spec: Any, rng: np.random.Generator) -> dict[str, np.ndarray]: ...

    def outputs(self, spec: Any) -> tuple[TensorSpec, ...]: ...

    def reference(self, spec: Any, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]: ...

    def flops(self, spec: Any) -> int: ...

    def min_bytes(self, spec: Any) -> int: ...
