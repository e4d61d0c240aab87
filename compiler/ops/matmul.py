"""The ``matmul`` operator: spec, reference and counts from ``matmul_spec``; kernels on CUDA cores for
float32 (``matmul_simt``) and on tensor cores for float16 and bfloat16 (``matmul_mma``)."""

from __future__ import annotations

from types import MappingProxyType

from compiler.ops import matmul_mma, matmul_simt
from compiler.ops.matmul_spec import (
    MatmulSpec,
    matmul_flops,
    matmul_inputs,
    matmul_min_bytes,
    matmul_outputs,
    matmul_reference,
)
from compiler.ops.templated import TemplatedOperator, Workload

OPERATOR = TemplatedOperator(
    name="matmul",
    spec_model=MatmulSpec,
    workload=Workload(matmul_inputs, matmul_outputs, matmul_reference, matmul_flops, matmul_min_bytes),
    templates=MappingProxyType({("cuda", "float32"): matmul_simt, ("cuda", "float16"): matmul_mma,
                                ("cuda", "bfloat16"): matmul_mma}),
)
