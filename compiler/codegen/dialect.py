"""What differs between code generation targets, as data: one renderer, many dialects.

A C++/OpenMP target adds a ``Dialect`` (its qualifiers, barrier, built-in names, includes), not a second
renderer. ``CUDA`` spells exactly the CUDA C++ subset that the emulator also runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType


def _frozen(**items: str) -> Mapping[str, str]:
    return MappingProxyType(dict(items))


@dataclass(frozen=True)
class Dialect:
    """The spelling of one target. Format strings take the fields named in their comments."""

    name: str
    #: Before the return type of the entry point.
    entry_qualifiers: str
    #: ``{threads}`` and ``{min_blocks}``; used when min_blocks is None / given.
    launch_bounds: str
    launch_bounds_min_blocks: str
    restrict: str
    #: Declares a static shared array: ``{type} {name}{dims};``.
    shared_array: str
    #: Declares the dynamic shared byte array ``{name}``.
    dynamic_shared_array: str
    dynamic_shared_name: str
    block_barrier: str
    #: ``{mask}``; ``warp_barrier_full`` when the mask is all lanes.
    warp_barrier: str
    warp_barrier_full: str
    unroll_pragma: str
    #: ``{factor}``.
    unroll_factor_pragma: str
    #: Scalar type names by warpmap name (``f32`` -> ``float``), vector names by ``f32x4``.
    type_names: Mapping[str, str]
    #: Built-in index names (``threadIdx.x``) as expressions of type int.
    index_names: Mapping[str, str]
    #: Abstract function names of ``compiler.ir.intrinsics`` to target functions.
    functions: Mapping[str, str]
    #: Conversions that are function calls, keyed ``"from->to"``; others are C casts.
    conversions: Mapping[str, str]
    #: Header needed by a scalar type, by warpmap name.
    type_headers: Mapping[str, str]
    #: Header names written with quotes (project headers) rather than angle brackets.
    local_headers: frozenset[str]
    #: A positive float infinity (softmax needs -inf).
    float_infinity: str
    #: Put before a loop marked ``simd`` (independent iterations); empty where the target has no use.
    simd_pragma: str = ""
    #: Header a mapped function needs (``functions``' target name is declared there), by abstract name.
    function_headers: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))


CUDA = Dialect(
    name="cuda",
    entry_qualifiers='extern "C" __global__',
    launch_bounds="__launch_bounds__({threads})",
    launch_bounds_min_blocks="__launch_bounds__({threads}, {min_blocks})",
    restrict="__restrict__",
    shared_array="__shared__ __align__(16) {type} {name}{dims};",
    dynamic_shared_array="extern __shared__ __align__(16) unsigned char {name}[];",
    dynamic_shared_name="dynamic_smem",
    block_barrier="__syncthreads();",
    warp_barrier="__syncwarp({mask});",
    warp_barrier_full="__syncwarp();",
    unroll_pragma="#pragma unroll",
    unroll_factor_pragma="#pragma unroll {factor}",
    type_names=_frozen(
        f32="float", f16="__half", bf16="__nv_bfloat16", i32="int", i64="long long", u32="unsigned int",
        bool="bool",
        f32x2="float2", f32x4="float4", i32x2="int2", i32x4="int4", u32x2="uint2", u32x4="uint4",
        f16x2="__half2", bf16x2="__nv_bfloat162",
    ),
    index_names=_frozen(**{
        f"{base}.{axis}": f"(int){base}.{axis}"
        for base in ("threadIdx", "blockIdx", "blockDim", "gridDim") for axis in "xyz"
    }),
    functions=_frozen(
        min="min", max="max", fmin="fminf", fmax="fmaxf", abs="fabsf", exp="expf", exp2="exp2f",
        fast_exp="__expf", log="logf", sqrt="sqrtf", rsqrt="rsqrtf", fast_div="__fdividef", fma="fmaf",
        shfl="__shfl_sync", shfl_xor="__shfl_xor_sync", shfl_down="__shfl_down_sync",
        shfl_up="__shfl_up_sync", atomic_add="atomicAdd", atomic_max="atomicMax",
        floats_to_half2="__floats2half2_rn", floats_to_bfloat162="__floats2bfloat162_rn",
        half2_to_floats="__half22float2",
        bitcast_f32_i32="__float_as_int", bitcast_f32_u32="__float_as_uint",
        bitcast_i32_f32="__int_as_float", bitcast_u32_f32="__uint_as_float",
    ),
    conversions=_frozen(**{
        "f32->f16": "__float2half_rn", "f16->f32": "__half2float",
        "f32->bf16": "__float2bfloat16_rn", "bf16->f32": "__bfloat162float",
    }),
    type_headers=_frozen(f16="cuda_fp16.h", bf16="cuda_bf16.h"),
    local_headers=frozenset({"warpmap/prims.cuh"}),
    float_infinity="(1.0f / 0.0f)",
)
