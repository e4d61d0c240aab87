"""An operator assembled from parts: workload functions from its spec module, kernels from a template per dtype.

Every operator is "one workload, one template per input dtype". A template is anything with
``space(spec, device, level) -> Space`` and ``build(spec, schedule) -> Program``: a module
(``matmul_simt``) or a :class:`Template` of two functions; adding one is an entry in ``templates``.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from compiler.device import DeviceSpec
from compiler.ops.base import TensorSpec
from compiler.ops.spec import OpSpec
from compiler.program import Program
from compiler.space import Space


@dataclass(frozen=True)
class Workload:
    """What an operator computes, independent of any kernel: test data, the reference, the counts."""

    inputs: Callable[[Any, np.random.Generator], dict[str, np.ndarray]]
    outputs: Callable[[Any], tuple[TensorSpec, ...]]
    reference: Callable[[Any, Mapping[str, np.ndarray]], dict[str, np.ndarray]]
    flops: Callable[[Any], int]
    min_bytes: Callable[[Any], int]


@dataclass(frozen=True)
class Template:
    """A template given as its two functions."""

    space: Callable[[Any, DeviceSpec, int], Space[Any]]
    build: Callable[[Any, Any], Program]


@dataclass(frozen=True)
class TemplatedOperator:
    """An :class:`~compiler.ops.base.Operator` dispatching ``space`` and ``build`` to a template by dtype."""

    name: str
    spec_model: type[OpSpec]
    workload: Workload
    #: Input dtype -> a template module or :class:`Template`.
    templates: Mapping[str, Any]

    def template_for(self, spec: Any) -> Any:
        """The template module for ``spec.dtype``, or a ValueError naming the dtype."""
        try:
            return self.templates[spec.dtype]
        except KeyError:
            known = ", ".join(sorted(self.templates))
            raise ValueError(
                f"no {self.name} template installed for dtype {spec.dtype!r}; available: {known}"
            ) from None

    def space(self, spec: Any, device: DeviceSpec, level: int) -> Space[Any]:
        space: Space[Any] = self.template_for(spec).space(spec, device, level)
        return space

    def build(self, spec: Any, schedule: Hashable) -> Program:
        program: Program = self.template_for(spec).build(spec, schedule)
        return program

    def inputs(self, spec: Any, rng: np.random.Generator) -> dict[str, np.ndarray]:
        return self.workload.inputs(spec, rng)

    def outputs(self, spec: Any) -> tuple[TensorSpec, ...]:
        return self.workload.outputs(spec)

    def reference(self, spec: Any, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return self.workload.reference(spec, inputs)

    def flops(self, spec: Any) -> int:
        return self.workload.flops(spec)

    def min_bytes(self, spec: Any) -> int:
        return self.workload.min_bytes(spec)
