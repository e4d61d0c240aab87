"""The ``conv2d`` operator: an implicit GEMM on CUDA cores (float32) or tensor cores (float16, bfloat16).

Spec, reference and counts live in :mod:`compiler.ops.conv2d_spec`, the im2col view in
:mod:`compiler.ops.conv2d_gemm`, the kernels in one template module per dtype: ``conv2d_simt``
(float32) and ``conv2d_mma`` (float16, bfloat16).
"""

from __future__ import annotations

from types import MappingProxyType

from compiler.ops import conv2d_mma, conv2d_simt
from compiler.ops.conv2d_spec import (
    Conv2dSpec,
    conv2d_flops,
    conv2d_inputs,
    conv2d_min_bytes,
    conv2d_outputs,
    conv2d_reference,
)
from compiler.ops.templated import TemplatedOperator, Workload

OPERATOR = TemplatedOperator(
    name="conv2d",
    spec_model=Conv2dSpec,
    workload=Workload(conv2d_inputs, conv2d_outputs, conv2d_reference, conv2d_flops, conv2d_min_bytes),
    templates=MappingProxyType({("cuda", "float32"): conv2d_simt, ("cuda", "float16"): conv2d_mma,
                                ("cuda", "bfloat16"): conv2d_mma}),
)
