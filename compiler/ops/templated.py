"""An operator assembled from parts: workload functions from its spec module, kernels from a template per
(target, dtype).

Every operator is "one workload, one template per template target and input dtype": the same spec
serves every target. A template is anything with ``space(spec, device, level) -> Space`` and
``build(spec, schedule) -> Program``: a module (``matmul_simt``) or a :class:`Template` of two
functions; adding one is an entry in ``templates``, keyed by ``(template_target, dtype)``, where the
template target is ``"cuda"`` (the ``emu`` and ``cuda`` targets) or ``"cpu"``. ``space`` finds the
template target from the device it is given (``compiler.device.template_target``); ``build`` is told it.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from compiler.cpu_device import CpuDevice
from compiler.device import DeviceSpec, template_target
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

    #: ``space(spec, device, level)``: the device is a DeviceSpec or a CpuDevice, by the template's target.
    space: Callable[[Any, Any, int], Space[Any]]
    build: Callable[[Any, Any], Program]


@dataclass(frozen=True)
class TemplatedOperator:
    """An :class:`~compiler.ops.base.Operator` dispatching ``space`` and ``build`` to a template by
    (template target, dtype)."""

    name: str
    spec_model: type[OpSpec]
    workload: Workload
    #: (template target, input dtype) -> a template module or :class:`Template`.
    templates: Mapping[tuple[str, str], Any]

    def template_for(self, spec: Any, target: str) -> Any:
        """The template for ``spec.dtype`` on ``target``, or a ValueError naming the operator, the dtype,
        the target and what that target has."""
        try:
            return self.templates[(target, spec.dtype)]
        except KeyError:
            there = sorted(dtype for t, dtype in self.templates if t == target)
            known = f"dtypes {', '.join(there)}" if there else "no templates at all"
            raise ValueError(f"no {self.name} template for dtype {spec.dtype!r} on target {target!r}; "
                             f"that target has {known}") from None

    def space(self, spec: Any, device: DeviceSpec | CpuDevice, level: int) -> Space[Any]:
        space: Space[Any] = self.template_for(spec, template_target(device)).space(spec, device, level)
        return space

    def build(self, spec: Any, schedule: Hashable, target: str) -> Program:
        program: Program = self.template_for(spec, target).build(spec, schedule)
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
