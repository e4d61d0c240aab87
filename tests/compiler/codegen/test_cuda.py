"""CUDA rendering: the key lines of small kernels, the CUDA subset, and errors for unlowered IR."""

import pytest

from compiler.backends.nvrtc import compile_source
from compiler.codegen import CUDA, CodegenError, render_cuda, render_kernel
from compiler.ir import lower
from compiler.ir.expr import Const, Var
from compiler.ir.intrinsics import (
    cast,
    exp,
    extern_call,
    fma,
    lane,
    make_vector,
    max_,
    rsqrt,
    select,
    shfl_down_sync,
    shfl_xor_sync,
)
from compiler.ir.kernel import Kernel
from compiler.ir.lang import (
    atomic_add,
    atomic_max,
    blockIdx,
    call,
    if_,
    kernel,
    let,
    range_,
    registers,
    shared,
    sync_threads,
    sync_warp,
    threadIdx,
    var,
)
from compiler.ir.stmt import For, Store, Unroll
from compiler.ir.types import bf16, f16, f32, i32, u32
from compiler.mapping import repeat, spatial


def source_of(builder) -> str:
    return render_cuda(lower(builder.kernel)).source


def test_entry_signature_launch_bounds_and_params():
    with kernel("scale", block=128, grid=(8, 2), min_blocks=4) as k:
        x = k.tensor("x", f32, (1024,), const=True)
        y = k.tensor("y", f32, (1024,))
        n = k.scalar("n")
        alpha = k.scalar("alpha", f32)
        index = let("index", blockIdx.x * 128 + threadIdx.x)
        with if_(index < n):
            y[index] = x[index] * alpha
    ks = render_cuda(lower(k.kernel))
    assert ks.entry == "scale" and ks.grid == (8, 2, 1) and ks.block == (128, 1, 1)
    assert [(p.name, p.dtype, p.pointer) for p in ks.params] == [
        ("x", "float32", True), ("y", "float32", True), ("n", "int32", False), ("alpha", "float32", False)]
    lines = ks.source.splitlines()
    assert lines[:5] == [
        'extern "C" __global__ void __launch_bounds__(128, 4) scale(',
        "        const float* __restrict__ x,",
        "        float* __restrict__ y,",
        "        int n,",
        "        float alpha) {",
    ]
    assert "    const int index = (int)blockIdx.x * 128 + (int)threadIdx.x;" in lines
    assert "    if (index < n) {" in lines and "        y[index] = x[index] * alpha;" in lines
    assert "#include" not in ks.source


def test_mapping_loops_render_with_folded_indices_and_pragmas():
    with kernel("tile", block=64) as k:
        out = k.tensor("out", f32, (16, 32))
        for i, j in repeat(2, 4, attrs="u4 u").spatial(8, 8).on(threadIdx.x):
            out[i, j] = 1.0
    src = source_of(k)
    assert "    #pragma unroll 4\n    for (int i = 0; i < 2; ++i) {" in src
    assert "        #pragma unroll\n        for (int j = 0; j < 4; ++j) {" in src
    assert "out[out_row * 32 + i * 256 + out_col + j * 8] = 1.0f;" in src
    assert "if (" not in src  # 64 threads, 64 workers: no bound check


def test_bound_check_appears_in_source_when_threads_exceed_workers():
    with kernel("k", block=128) as k:
        out = k.tensor("out", i32, (96,))
        for (i,) in spatial(96).on(threadIdx.x):
            out[i] = i
    src = source_of(k)
    assert "    if (tid < 96) {\n        out[tid] = tid;" in src


def test_shared_registers_barriers_and_compound_assignment():
    with kernel("k", block=32) as k:
        out = k.tensor("out", f32, (32,))
        tile = shared("tile", f32, (2, 32))
        acc = registers("acc", f32, (4,))
        tile[0, threadIdx.x] = out[threadIdx.x]
        sync_threads()
        for s in range_(4, name="s", unroll=True):
            acc[s] = 0.0
            acc[s] += tile[0, (threadIdx.x + s) % 32]
        sync_warp()
        sync_warp(0xFFFF)
        out[threadIdx.x] = acc[0] - (acc[1] - acc[2])
    src = source_of(k)
    assert "    __shared__ __align__(16) float tile[2][32];" in src
    assert "    float acc[4];" in src and "    __syncthreads();" in src
    assert "        acc[s] += tile[0][(tid + s) % 32];" in src
    assert "    __syncwarp();\n    __syncwarp(0xffffu);" in src
    assert "out[tid] = acc[0] - (acc[1] - acc[2]);" in src


def half_kernel():
    with kernel("halves", block=32) as k:
        h = k.tensor("h", f16, (32,))
        b = k.tensor("b", bf16, (32,))
        i = k.tensor("i", i32, (32,))
        h[threadIdx.x] = cast(cast(h[threadIdx.x], f32) * 2.0, f16)
        b[threadIdx.x] = cast(i[threadIdx.x], bf16)
        i[threadIdx.x] = cast(h[threadIdx.x], i32)
    return k


def test_half_types_bring_their_headers_and_conversions():
    k = half_kernel()
    src = source_of(k)
    assert src.startswith("#include <cuda_bf16.h>\n#include <cuda_fp16.h>\n\n")
    assert "h[tid] = __float2half_rn(__half2float(h[tid]) * 2.0f);" in src
    assert "b[tid] = __float2bfloat16_rn((float)i[tid]);" in src
    assert "i[tid] = (int)__half2float(h[tid]);" in src


def intrinsics_kernel():
    with kernel("intrinsics", block=64) as k:
        x = k.tensor("x", f32, (64, 4))
        counts = k.tensor("counts", u32, (4,))
        total = k.tensor("total", f32, (1,))
        v = var("v", f32, x[threadIdx.x, 0])
        v_sum = let("v_sum", v + shfl_xor_sync(v, 16))
        shifted = let("shifted", shfl_down_sync(v_sum, 1, width=16))
        atomic_add(total.address(0), rsqrt(fma(shifted, shifted, 1.0)))
        atomic_max(counts.address(threadIdx.x % 4), cast(threadIdx.x, u32))
        quad = let("quad", x.load_vector(threadIdx.x, 0))
        x.store_vector((threadIdx.x, 0), make_vector(lane(quad, 3), lane(quad, 2), exp(lane(quad, 1)), 0.0))
        x[threadIdx.x, 1] = select(v < 0.0, -v, max_(v, 1.0))
    return k


def test_math_shuffles_atomics_select_and_vectors():
    k = intrinsics_kernel()
    src = source_of(k)
    for line in [
        "    float v = x[tid * 4];",
        "    const float v_sum = v + __shfl_xor_sync(4294967295u, v, 16);",
        "    const float shifted = __shfl_down_sync(4294967295u, v_sum, 1, 16);",
        "    atomicAdd(total, rsqrtf(fmaf(shifted, shifted, 1.0f)));",
        "    atomicMax(counts + counts_offset, (unsigned int)tid);",
        "    const float4 quad = reinterpret_cast<const float4*>(x + tid * 4)[0];",
        "    *reinterpret_cast<float4*>(x + tid * 4) = "
        "make_float4(quad.w, quad.z, expf(quad.y), 0.0f);",
        "    x[tid * 4 + 1] = v < 0.0f ? -v : fmaxf(v, 1.0f);",
    ]:
        assert line in src.splitlines(), line


def async_copy_kernel():
    with kernel("async_copy", block=32) as k:
        g = k.tensor("g", f32, (32, 4), const=True)
        stage = k.dynamic_shared("stage", f32, (32, 4), byte_offset=512)
        call(extern_call("wm_cp_async_16", stage.address(threadIdx.x, 0), g.address(threadIdx.x, 0), 16))
        call(extern_call("wm_cp_async_commit"))
        call(extern_call("wm_cp_async_wait", template_args=(0,)))
        sync_threads()
    return k


def test_extern_calls_include_the_prims_header_and_dynamic_shared_views():
    k = async_copy_kernel()
    ks = render_cuda(lower(k.kernel))
    assert ks.shared_bytes == 512 + 32 * 4 * 4
    src = ks.source
    assert src.startswith('#include "warpmap/prims.cuh"\n')
    assert "    extern __shared__ __align__(16) unsigned char dynamic_smem[];" in src
    assert ("    wm_cp_async_16(reinterpret_cast<float*>(dynamic_smem + 512) + tid * 4, "
            "g + tid * 4, 16);") in src
    assert "    wm_cp_async_commit();\n    wm_cp_async_wait<0>();" in src


def test_unlowered_constructs_are_rejected():
    with kernel("k", block=32) as k:
        out = k.tensor("out", i32, (32,))
        for (i,) in spatial(32).on(threadIdx.x):
            out[i] = i
    with pytest.raises(CodegenError, match=r"unlowered task loop: spatial\(32\)\.on\(threadIdx.x\).*lower"):
        render_cuda(k.kernel)
    index = Var("i", i32)
    explicit = For(index, Const(4, i32), (Store(out, (index,), index),), Unroll(explicit=True))
    with pytest.raises(CodegenError, match="explicit unrolling"):
        render_cuda(Kernel("k", k.kernel.params, (explicit,), (32, 1, 1), (1, 1, 1)))


def test_undeclared_variables_are_reported():
    stray = Var("stray", i32)
    with kernel("k", block=32) as k:
        out = k.tensor("out", i32, (32,))
        out[threadIdx.x] = stray
    with pytest.raises(CodegenError, match="'stray' is used but never declared"):
        render_cuda(lower(k.kernel))


def test_rendering_is_a_pure_function_of_kernel_and_dialect():
    with kernel("k", block=32) as k:
        out = k.tensor("out", i32, (32,))
        out[threadIdx.x] = threadIdx.x
    lowered = lower(k.kernel)
    assert render_kernel(lowered, CUDA) == render_kernel(lowered, CUDA) == render_cuda(lowered).source


@pytest.mark.parametrize("factory", [half_kernel, intrinsics_kernel, async_copy_kernel],
                         ids=lambda f: f.__name__)
def test_generated_constructs_compile_with_nvrtc(factory):
    result = compile_source(render_cuda(lower(factory().kernel)), "sm_80")
    assert result.ok, result.log
