"""The ``matmul`` operator: spec, reference and counts from ``matmul_spec``, kernels from a template per dtype.

``TEMPLATES`` maps an input dtype to the template module that serves it; a template module provides
``space(spec, device, level) -> Space`` and ``build(spec, schedule) -> KernelSource``. Adding a template
is one entry in that table.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from types import ModuleType
from typing import Any

import numpy as np

from compiler.device import DeviceSpec
from compiler.ops import matmul_mma, matmul_simt
from compiler.ops.base import TensorSpec
from compiler.ops.matmul_spec import (
    MatmulSpec,
    matmul_flops,
    matmul_inputs,
    matmul_min_bytes,
    matmul_outputs,
    matmul_reference,
)
from compiler.source import KernelSource
from compiler.space import Space

#: Input dtype -> the template module computing it.
TEMPLATES: dict[str, ModuleType] = {
    "float32": matmul_simt,
    "float16": matmul_mma,
    "bfloat16": matmul_mma,
}


def template_for(spec: MatmulSpec) -> ModuleType:
    """The template module for ``spec.dtype``, or a ValueError naming the dtype."""
    try:
        return TEMPLATES[spec.dtype]
    except KeyError:
        known = ", ".join(sorted(TEMPLATES))
        raise ValueError(f"no matmul template installed for dtype {spec.dtype!r}; available: {known}") from None


class Matmul:
    """``C[b] = A[b] @ B[b]`` (see :class:`MatmulSpec`), dispatched to a template by dtype."""

    name = "matmul"
    spec_model = MatmulSpec

    def space(self, spec: MatmulSpec, device: DeviceSpec, level: int) -> Space[Any]:
        space: Space[Any] = template_for(spec).space(spec, device, level)
        return space

    def build(self, spec: MatmulSpec, schedule: Hashable) -> KernelSource:
        source: KernelSource = template_for(spec).build(spec, schedule)
        return source

    def inputs(self, spec: MatmulSpec, rng: np.random.Generator) -> dict[str, np.ndarray]:
        return matmul_inputs(spec, rng)

    def outputs(self, spec: MatmulSpec) -> tuple[TensorSpec, ...]:
        return matmul_outputs(spec)

    def reference(self, spec: MatmulSpec, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return matmul_reference(spec, inputs)

    def flops(self, spec: MatmulSpec) -> int:
        return matmul_flops(spec)

    def min_bytes(self, spec: MatmulSpec) -> int:
        return matmul_min_bytes(spec)


OPERATOR = Matmul()
