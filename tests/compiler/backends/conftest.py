"""A small operator with a template on each template target, to test the seam before the real cpu templates.

``rowsum``: ``out[r] = sum(x[r, :])`` for a rows x cols float32 matrix. Its cpu template is two launches:
a partial pass where each of ``parts`` column slices of a row is summed into a workspace, then a final
pass that adds a row's partials, so workspaces (aligned, poisoned) are exercised. Its cuda template is
one launch, one thread per row. The spec's ``bug`` plants a mistake in every schedule: ``wrong`` drops the
last column, ``stale`` makes the final pass read a partial no launch wrote, ``render`` puts a barrier in
the cpu kernel (which the host dialect refuses: a template bug, a compile error), ``hang`` loops for
about a second before writing anything.

The ``rowsum`` fixture registers it as an operator for the test (``warpmap check`` finds it by name).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

import numpy as np
import pytest

from compiler.ir import assign, blockIdx, f32, if_, kernel, let, lower, range_, sync_threads, threadIdx, var
from compiler.ops import operators
from compiler.ops.base import TensorSpec
from compiler.ops.spec import OpSpec
from compiler.ops.templated import Template, TemplatedOperator, Workload
from compiler.program import Launch, Program, Workspace
from compiler.space import Param, Space


class RowSumSpec(OpSpec):
    op: Literal["rowsum"] = "rowsum"
    rows: int
    cols: int
    dtype: Literal["float32", "float16"] = "float32"
    bug: Literal["none", "wrong", "stale", "render", "hang"] = "none"


@dataclass(frozen=True)
class CpuRowSum:
    rows_per_block: int
    parts: int


@dataclass(frozen=True)
class CudaRowSum:
    threads: int


def _blocks(extent: int, per_block: int) -> int:
    return -(-extent // per_block)


def cpu_space(spec: RowSumSpec, device: object, level: int) -> Space[CpuRowSum]:
    return Space("rowsum_cpu", (Param("rows_per_block", (1, 4)), Param("parts", (1, 3))),
                 lambda p: CpuRowSum(**p))


def cpu_build(spec: RowSumSpec, schedule: CpuRowSum) -> Program:
    rows, cols, parts, per = spec.rows, spec.cols, schedule.parts, schedule.rows_per_block
    width = _blocks(cols, parts)
    with kernel("rowsum_partial", block=per, grid=(_blocks(rows, per), parts)) as k:
        x = k.tensor("x", f32, (rows, cols), const=True)
        partial = k.tensor("partial", f32, (rows, parts + 1))
        row = let("row", blockIdx.x * per + threadIdx.x)
        if spec.bug == "render":
            sync_threads()
        with if_(row < rows):
            total = var("total", f32, 0.0)
            if spec.bug == "hang":  # about 3e8 dependent adds before anything is written
                for _ in range_(300_000_000, name="spin"):
                    assign(total, total * 0.5 + 1.0)
                assign(total, total * 0.0)
            for c in range_(width, name="c"):
                col = let("col", blockIdx.y * width + c)
                last = cols - 1 if spec.bug == "wrong" else cols
                with if_(col < last):
                    assign(total, total + x[row, col])
            partial[row, blockIdx.y] = total
    first = lower(k.kernel)
    with kernel("rowsum_final", block=per, grid=_blocks(rows, per)) as k:
        partial = k.tensor("partial", f32, (rows, parts + 1), const=True)
        out = k.tensor("out", f32, (rows,))
        row = let("row", blockIdx.x * per + threadIdx.x)
        with if_(row < rows):
            total = var("total", f32, 0.0)
            for p in range_(parts + 1 if spec.bug == "stale" else parts, name="p"):
                assign(total, total + partial[row, p])
            out[row] = total
    final = lower(k.kernel)
    # One column more than the parts: the stale read stays inside the workspace, and reads poison.
    return Program("rowsum", ("x", "out"), (Launch.by_name(first), Launch.by_name(final)),
                   (Workspace("partial", (rows, parts + 1), "float32"),))


def cuda_space(spec: RowSumSpec, device: object, level: int) -> Space[CudaRowSum]:
    return Space("rowsum_cuda", (Param("threads", (32, 64)),), lambda p: CudaRowSum(**p))


def cuda_build(spec: RowSumSpec, schedule: CudaRowSum) -> Program:
    rows, cols, threads = spec.rows, spec.cols, schedule.threads
    with kernel("rowsum_cuda", block=threads, grid=_blocks(rows, threads)) as k:
        x = k.tensor("x", f32, (rows, cols), const=True)
        out = k.tensor("out", f32, (rows,))
        row = let("row", blockIdx.x * threads + threadIdx.x)
        with if_(row < rows):
            total = var("total", f32, 0.0)
            for c in range_(cols - 1 if spec.bug == "wrong" else cols, name="c"):
                assign(total, total + x[row, c])
            out[row] = total
    return Program.single(lower(k.kernel))


def _inputs(spec: RowSumSpec, rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {"x": rng.standard_normal((spec.rows, spec.cols)).astype(np.float32)}


def _reference(spec: RowSumSpec, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {"out": inputs["x"].astype(np.float64).sum(axis=1)}


ROWSUM = TemplatedOperator(
    name="rowsum",
    spec_model=RowSumSpec,
    workload=Workload(
        inputs=_inputs,
        outputs=lambda spec: (TensorSpec("out", (spec.rows,), "float32", reduction=spec.cols),),
        reference=_reference,
        flops=lambda spec: spec.rows * spec.cols,
        min_bytes=lambda spec: 4 * spec.rows * (spec.cols + 1),
    ),
    templates=MappingProxyType({("cpu", "float32"): Template(cpu_space, cpu_build),
                                ("cuda", "float32"): Template(cuda_space, cuda_build)}),
)


@pytest.fixture
def rowsum(monkeypatch: pytest.MonkeyPatch) -> TemplatedOperator:
    monkeypatch.setitem(operators(), "rowsum", ROWSUM)
    return ROWSUM
