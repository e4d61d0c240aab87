"""The matmul workload: ``C[b] = A[b] @ B[b]`` with A and B row- or column-major, C row-major."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

import numpy as np
from pydantic import ConfigDict, Field, model_validator

from compiler.numeric import from_storage, to_storage
from compiler.ops.base import TensorSpec
from compiler.ops.spec import DTYPE_BYTES, DType, OpSpec, check_tensor_bytes

Layout = Literal["row", "col"]

#: Largest extent of one matmul dimension; grids address blocks with 31-bit indices.
MAX_DIM = 1 << 24
#: Batches map to ``blockIdx.z``, whose extent the hardware caps at 65535.
MAX_BATCH = 65535


class MatmulSpec(OpSpec):
    """A (batched) matmul. A is ``m x k``, B is ``k x n``; ``col`` stores a matrix transposed.

    Inputs are ``dtype``; C is float32 for float32 inputs and ``dtype`` otherwise; products are
    accumulated in float32.

    >>> MatmulSpec(op="matmul", m=64, n=32, k=16).canonical_json()
    '{"batch":1,"dtype":"float32","k":16,"layout_a":"row","layout_b":"row","m":64,"n":32,"op":"matmul"}'
    """

    #: Workloads worth showing a user (``warpmap ops``, the API's schema): square, BERT-base, batched.
    model_config = ConfigDict(json_schema_extra={"examples": [
        {"op": "matmul", "m": 1024, "n": 1024, "k": 1024},
        {"op": "matmul", "m": 128, "n": 3072, "k": 768, "dtype": "float16"},
        {"op": "matmul", "m": 128, "n": 128, "k": 64, "batch": 12, "layout_b": "col", "dtype": "bfloat16"},
    ]})

    op: Literal["matmul"] = "matmul"
    m: int = Field(ge=1, le=MAX_DIM)
    n: int = Field(ge=1, le=MAX_DIM)
    k: int = Field(ge=1, le=MAX_DIM)
    batch: int = Field(default=1, ge=1, le=MAX_BATCH)
    dtype: DType = "float32"
    layout_a: Layout = "row"
    layout_b: Layout = "row"

    @model_validator(mode="after")
    def _bounded(self) -> MatmulSpec:
        check_tensor_bytes("A", self.batch * self.m * self.k, self.dtype)
        check_tensor_bytes("B", self.batch * self.k * self.n, self.dtype)
        check_tensor_bytes("C", self.batch * self.m * self.n, self.dtype)
        return self

    @property
    def a_shape(self) -> tuple[int, int, int]:
        """A's shape as stored: ``[batch, m, k]`` row-major or ``[batch, k, m]`` column-major."""
        return (self.batch, self.m, self.k) if self.layout_a == "row" else (self.batch, self.k, self.m)

    @property
    def b_shape(self) -> tuple[int, int, int]:
        return (self.batch, self.k, self.n) if self.layout_b == "row" else (self.batch, self.n, self.k)

    @property
    def c_shape(self) -> tuple[int, int, int]:
        return (self.batch, self.m, self.n)


def matmul_inputs(spec: MatmulSpec, rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {
        "a": to_storage(rng.uniform(-1.0, 1.0, spec.a_shape), spec.dtype),
        "b": to_storage(rng.uniform(-1.0, 1.0, spec.b_shape), spec.dtype),
    }


def matmul_outputs(spec: MatmulSpec) -> tuple[TensorSpec, ...]:
    return (TensorSpec("c", spec.c_shape, spec.dtype, reduction=spec.k),)


def matmul_reference(spec: MatmulSpec, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """float64 product of the (already rounded) inputs."""
    a = from_storage(inputs["a"], spec.dtype).reshape(spec.a_shape)
    b = from_storage(inputs["b"], spec.dtype).reshape(spec.b_shape)
    if spec.layout_a == "col":
        a = a.transpose(0, 2, 1)
    if spec.layout_b == "col":
        b = b.transpose(0, 2, 1)
    return {"c": np.matmul(a, b)}


def matmul_flops(spec: MatmulSpec) -> int:
    return 2 * spec.batch * spec.m * spec.n * spec.k


def matmul_min_bytes(spec: MatmulSpec) -> int:
    """Bytes moved if A and B are read once and C written once: the memory roofline's floor."""
    elements = spec.batch * (spec.m * spec.k + spec.k * spec.n + spec.m * spec.n)
    return elements * DTYPE_BYTES[spec.dtype]
