from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from compiler.backends.nvrtc import (
    DEFAULT_ARCHS,
    compile_source,
    include_dirs,
    nvrtc_version,
    supported_archs,
    validate_arch,
)
from compiler.diskcache import DiskCache
from compiler.source import KernelSource, Param

ADD = """extern "C" __global__ void add(float* __restrict__ out, const float* __restrict__ b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] += b[i];
}
"""

HALF_ADD = """#include <cuda_fp16.h>

extern "C" __global__ void half_add(__half* out, const __half* b, int n) {
  __shared__ __half tile[128];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  tile[threadIdx.x] = i < n ? b[i] : __float2half(0.0f);
  __syncthreads();
  if (i < n) out[i] = __hadd(out[i], tile[127 - threadIdx.x]);
}
"""

# A dynamically indexed local array cannot live in registers: it goes to the stack frame.
STACK = """extern "C" __global__ void stack(const float* a, float* out, int n) {
  float scratch[256];
#pragma unroll 1
  for (int j = 0; j < 256; ++j) scratch[j] = a[j * n + threadIdx.x];
  out[threadIdx.x] = scratch[n & 255];
}
"""

# 1024 threads at 2 blocks per SM leave 32 registers per thread, too few for 48 live values.
SPILL = """extern "C" __global__ void __launch_bounds__(1024, 2) spill(float* a) {
  float v[48];
#pragma unroll
  for (int j = 0; j < 48; ++j) v[j] = a[threadIdx.x * 48 + j];
  float s = 0.0f;
#pragma unroll
  for (int j = 0; j < 48; ++j)
#pragma unroll
    for (int k = 0; k < 8; ++k) s += v[j] * v[(j * 7 + k) % 48];
  a[threadIdx.x] = s;
}
"""

BROKEN = """extern "C" __global__ void broken(float* a) {
  int i = threadIdx.x;
  a[i] = 2.0f * ;
}
"""


def kernel(entry: str, text: str, block: int = 128) -> KernelSource:
    return KernelSource(entry, text, (1, 1, 1), (block, 1, 1), (Param("a", "float32"),))


def test_versions_and_archs() -> None:
    major, minor = nvrtc_version()
    assert major >= 12 and minor >= 0
    archs = supported_archs()
    assert set(DEFAULT_ARCHS) <= set(archs)
    assert all(a.startswith("sm_") for a in archs)
    assert include_dirs()[0].joinpath("cuda_fp16.h").is_file()


@pytest.mark.parametrize("arch", ["sm_80", "sm_90", "sm_90a"])
def test_header_free_kernel_to_cubin(arch: str) -> None:
    result = compile_source(kernel("add", ADD), arch)
    assert result.ok, result.log
    assert (result.arch, result.output, result.cached, result.error) == (arch, "cubin", False, None)
    assert result.binary is not None and result.binary[:4] == b"\x7fELF"
    assert result.usage is not None
    assert result.usage.registers > 0
    assert (result.usage.spill_stores, result.usage.spill_loads, result.usage.stack_frame) == (0, 0, 0)
    assert result.usage.barriers == 0
    assert result.compile_ms > 0


@pytest.mark.parametrize("arch", ["sm_80", "sm_90", "sm_90a"])
def test_fp16_kernel_with_cuda_headers(arch: str) -> None:
    result = compile_source(kernel("half_add", HALF_ADD), arch)
    assert result.ok, result.log
    assert result.usage is not None
    assert result.usage.shared_bytes == 128 * 2
    assert result.usage.barriers == 1
    assert f"'half_add' for '{arch}'" in result.log


def test_big_local_array_shows_stack_frame() -> None:
    usage = compile_source(kernel("stack", STACK, block=32)).usage
    assert usage is not None
    assert usage.stack_frame >= 256 * 4
    assert not usage.spills


def test_register_pressure_shows_spills() -> None:
    usage = compile_source(kernel("spill", SPILL, block=1024)).usage
    assert usage is not None
    assert usage.registers <= 32
    assert usage.spill_stores > 0 and usage.spill_loads > 0 and usage.spills
    assert usage.stack_frame > 0


def test_syntax_error_is_a_value_with_the_line() -> None:
    result = compile_source(kernel("broken", BROKEN))
    assert not result.ok
    assert result.binary is None and result.usage is None
    error = result.error
    assert error is not None
    assert (error.line, error.source_line, error.file) == (3, "  a[i] = 2.0f * ;", "broken.cu")
    assert error.message.startswith("line 3: ")
    assert "expected an expression" in error.message
    assert "broken.cu(3)" in error.log and error.log == result.log


def test_error_inside_a_header_names_the_header(tmp_path: Path) -> None:
    (tmp_path / "bad.cuh").write_text("// a header\n__device__ int oops() { return missing_name; }\n")
    text = '#include "bad.cuh"\nextern "C" __global__ void user(float* a) { a[0] = oops(); }\n'
    result = compile_source(kernel("user", text), options=[f"-I{tmp_path}"])
    assert not result.ok and result.error is not None
    assert result.error.file is not None and result.error.file.endswith("bad.cuh")
    assert result.error.line == 2
    assert result.error.source_line is None
    assert "missing_name" in result.error.message


def test_bad_option_is_a_value() -> None:
    result = compile_source(kernel("add", ADD), options=["--no-such-option"])
    assert not result.ok and result.error is not None
    assert "--no-such-option" in result.error.message
    assert result.error.line is None


def test_user_options_reach_nvrtc() -> None:
    text = 'extern "C" __global__ void scaled(float* a) { a[threadIdx.x] *= SCALE; }\n'
    assert not compile_source(kernel("scaled", text)).ok
    assert compile_source(kernel("scaled", text), options=["-DSCALE=3.0f"]).ok


@pytest.mark.parametrize("arch", ["sm_70", "sm_80a", "compute_80", "80", "sm80", "sm_999"])
def test_unknown_arch_raises(arch: str) -> None:
    with pytest.raises(ValueError, match=re.escape(repr(arch))):
        compile_source(kernel("add", ADD), arch)
    with pytest.raises(ValueError, match="unsupported arch"):
        validate_arch(arch)


@pytest.mark.parametrize("option", ["-arch=sm_75", "--gpu-architecture=sm_75", "-arch"])
def test_target_options_are_refused(option: str) -> None:
    with pytest.raises(ValueError, match="pass arch="):
        compile_source(kernel("add", ADD), options=[option])


def test_options_must_be_a_sequence_of_strings() -> None:
    with pytest.raises(TypeError, match="sequence of strings"):
        compile_source(kernel("add", ADD), options="-lineinfo")  # type: ignore[arg-type]


def test_unknown_output_raises() -> None:
    with pytest.raises(ValueError, match="'sass'"):
        compile_source(kernel("add", ADD), output="sass")  # type: ignore[arg-type]


def test_ptx_output() -> None:
    result = compile_source(kernel("add", ADD), "sm_90", output="ptx")
    assert result.ok and result.output == "ptx" and result.binary is not None
    text = result.binary.decode()
    assert ".target sm_90" in text
    assert ".visible .entry add(" in text
    assert result.usage is None  # no ptxas ran
    assert not text.endswith("\0")


def test_cache_hit_returns_identical_binary(tmp_path: Path) -> None:
    cache = DiskCache(tmp_path, max_bytes=1 << 24)
    first = compile_source(kernel("half_add", HALF_ADD), "sm_90", cache=cache)
    second = compile_source(kernel("half_add", HALF_ADD), "sm_90", cache=cache)
    assert (first.cached, second.cached) == (False, True)
    assert second.binary == first.binary and second.log == first.log
    assert second.usage == first.usage and second.usage is not None
    assert dataclasses.replace(second, compile_ms=0, cached=False) == dataclasses.replace(first, compile_ms=0)
    assert cache.stats().entries == 1


def test_cache_key_separates_arch_output_and_options(tmp_path: Path) -> None:
    cache = DiskCache(tmp_path, max_bytes=1 << 24)
    source = kernel("add", ADD)
    variants = [
        {"arch": "sm_80"},
        {"arch": "sm_90"},
        {"arch": "sm_90", "output": "ptx"},
        {"arch": "sm_90", "options": ["-lineinfo"]},
    ]
    results = [compile_source(source, cache=cache, **v) for v in variants]  # type: ignore[arg-type]
    assert not any(r.cached for r in results)
    assert cache.stats().entries == len(variants)
    again = [compile_source(source, cache=cache, **v) for v in variants]  # type: ignore[arg-type]
    assert all(r.cached for r in again)
    assert [r.binary for r in again] == [r.binary for r in results]
    other_source = dataclasses.replace(source, source=ADD.replace("+=", "-="))
    assert not compile_source(other_source, "sm_80", cache=cache).cached


def test_failures_are_not_cached(tmp_path: Path) -> None:
    cache = DiskCache(tmp_path, max_bytes=1 << 24)
    for _ in range(2):
        result = compile_source(kernel("broken", BROKEN), cache=cache)
        assert not result.ok and not result.cached
    assert cache.stats().entries == 0


def test_unreadable_cache_entry_is_rebuilt(tmp_path: Path) -> None:
    cache = DiskCache(tmp_path, max_bytes=1 << 24)
    first = compile_source(kernel("add", ADD), cache=cache)
    (entry,) = [p for p in tmp_path.rglob("*") if p.is_file()]
    key = entry.name.rsplit(".", 1)[0]
    cache.put(key, b"not a build entry")
    rebuilt = compile_source(kernel("add", ADD), cache=cache)
    assert rebuilt.ok and not rebuilt.cached and rebuilt.binary == first.binary
    assert compile_source(kernel("add", ADD), cache=cache).cached


def test_builds_leave_python_constants_intact() -> None:
    """NVRTC fills caller buffers; a one-byte log once overwrote CPython's shared ``b" "`` object."""
    for output in ("cubin", "ptx"):
        assert compile_source(kernel("add", ADD), "sm_80", output=output).ok
    assert b" ".join([b"a", b"b"]) == bytes([97, 32, 98])
