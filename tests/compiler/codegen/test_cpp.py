"""The host dialect: what it renders, and the CUDA constructs it refuses rather than emulates."""

import pytest

from compiler.codegen import CodegenError, render_cuda
from compiler.codegen.cpp import render_host
from compiler.ir import (
    atomic_add,
    blockIdx,
    f16,
    f32,
    if_,
    kernel,
    let,
    lower,
    make_vector,
    max_,
    min_,
    range_,
    shared,
    shfl_xor_sync,
    sync_threads,
    threadIdx,
    var,
)
from compiler.ir.types import i32
from compiler.mapping import spatial


def _scale_kernel():
    with kernel("scale", block=32, grid=(5, 3)) as k:
        x = k.tensor("x", f32, (15, 100))
        n = k.scalar("n")
        for (i,) in spatial(32).on(threadIdx.x):
            col = let("col", blockIdx.x * 32 + i)
            with if_(col < n):
                x[blockIdx.y, col] = max_(x[blockIdx.y, col] * 2.0, 0.5)
    return lower(k.kernel)


def test_blocks_are_an_openmp_loop_and_threads_a_serial_loop():
    source = render_host(_scale_kernel())
    text = source.source
    assert 'extern "C" void scale(float* __restrict__ x, int n, int workers) {' in text
    assert "#pragma omp parallel for schedule(static) num_threads(workers)" in text
    assert "wm_block < 15LL" in text
    assert "for (int wm_tid_x = 0; wm_tid_x < 32; ++wm_tid_x) {" in text
    assert "fmaxf(" in text
    assert [(p.name, p.dtype, p.pointer) for p in source.params] == [("x", "float32", True), ("n", "int32", False)]
    assert source.grid == (5, 3, 1) and source.block == (32, 1, 1)


def test_the_same_kernel_still_renders_as_cuda():
    assert "__global__" in render_cuda(_scale_kernel()).source


def test_rendering_is_a_pure_function_of_the_kernel():
    kernel = _scale_kernel()
    assert render_host(kernel) == render_host(kernel)


def test_int_min_and_unroll_pragmas_are_host_spellings():
    with kernel("k", block=1) as k:
        out = k.tensor("out", i32, (4,))
        acc = var("acc", i32, 0)
        for j in range_(4, name="j", unroll=True):
            out[j] = min_(acc, j)
    text = render_host(lower(k.kernel)).source
    assert "std::min(acc, j)" in text
    assert "#pragma GCC unroll 32" in text


def _refusal(build) -> str:
    with kernel("bad", block=32) as k:
        build(k)
    with pytest.raises(CodegenError) as info:
        render_host(lower(k.kernel))
    return str(info.value)


def test_barriers_are_refused():
    def build(k):
        x = k.tensor("x", f32, (32,))
        x[threadIdx.x] = 1.0
        sync_threads()
    message = _refusal(build)
    assert "kernel bad" in message and "block barrier" in message and "refused by the host dialect" in message


def test_shuffles_are_refused():
    def build(k):
        x = k.tensor("x", f32, (32,))
        x[threadIdx.x] = shfl_xor_sync(x[threadIdx.x], 1)
    assert "warp shuffle 'shfl_xor'" in _refusal(build)


def test_shared_memory_atomics_vectors_and_half_floats_are_refused():
    def with_shared(k):
        x = k.tensor("x", f32, (32,))
        s = shared("s", f32, (32,))
        s[threadIdx.x] = x[threadIdx.x]

    def with_atomic(k):
        x = k.tensor("x", f32, (1,))
        atomic_add(x.address(0), 1.0)

    def with_vector(k):
        x = k.tensor("x", f32, (32,))
        v = let("v", make_vector(x[0], x[1]))
        del v

    def with_half(k):
        k.tensor("h", f16, (32,))

    assert "shared buffer 's'" in _refusal(with_shared)
    assert "atomic 'atomic_add'" in _refusal(with_atomic)
    assert "vector" in _refusal(with_vector)
    assert "float16" in _refusal(with_half) or "f16" in _refusal(with_half)


def test_a_local_named_like_the_frame_is_refused():
    def build(k):
        x = k.tensor("x", f32, (1,))
        x[0] = let("wm_block", 1.0)
    assert "taken by the host frame" in _refusal(build)


def test_a_long_signature_wraps():
    with kernel("wide", block=1) as k:
        for name in ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot"):
            k.tensor(name, f32, (4,), const=True)
    head = render_host(lower(k.kernel)).source.split('extern "C"')[1].splitlines()
    assert head[0] == " void wide(" and head[-1].strip() != ""


def test_a_loop_marked_simd_is_an_omp_simd_loop_on_the_host_only():
    with kernel("k", block=1) as k:
        out = k.tensor("out", f32, (8,))
        for j in range_(8, name="j", unroll=2, simd=True):
            out[j] = out[j] * 2.0
        for j in range_(8, name="j"):
            out[j] = out[j] + 1.0
    lowered = lower(k.kernel)
    host = render_host(lowered).source
    assert host.count("#pragma omp simd") == 1
    assert "    #pragma omp simd\n    for (int j = 0;" in host and "unroll" not in host  # GCC takes one pragma
    assert "#pragma unroll 2\n" in render_cuda(lowered).source
    assert "simd" not in render_cuda(lowered).source


def _slots_kernel(max_workers, schedule="static"):
    from compiler.ir import worker_slot

    with kernel("slots", block=1, grid=16, host_schedule=schedule, host_max_workers=max_workers) as k:
        out = k.tensor("out", i32, (16,))
        out[blockIdx.x] = worker_slot()
    return lower(k.kernel)


@pytest.mark.parametrize("schedule", ["static", "dynamic"])
def test_a_worker_slot_is_the_openmp_thread_and_bounds_the_launch(schedule):
    source = render_host(_slots_kernel(3, schedule)).source
    assert "#include <omp.h>" in source and "omp_get_thread_num()" in source
    assert "const int wm_threads = std::min(workers, 3);" in source
    assert "num_threads(wm_threads)" in source and "num_threads(workers)" not in source
    if schedule == "dynamic":
        assert "(8LL * wm_threads)" in source
    # Without a bound the launch runs on every thread it is given, and nothing includes omp.h.
    assert "num_threads(workers)" in render_host(_scale_kernel()).source
    assert "omp.h" not in render_host(_scale_kernel()).source


def test_a_worker_slot_has_no_cuda_spelling():
    with pytest.raises(CodegenError, match="worker_slot"):
        render_cuda(_slots_kernel(2))


def test_host_max_workers_must_be_positive():
    with pytest.raises(ValueError, match="host_max_workers must be positive"):
        _slots_kernel(0)


@pytest.mark.parametrize(("max_workers", "workers"), [(3, 8), (8, 2)])
def test_slots_run_below_the_bound_and_below_the_launch_threads(tmp_path, max_workers, workers):
    import numpy as np

    from compiler.backends import cpu

    reason = cpu.unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    config = cpu.CpuConfig(cache_dir=tmp_path, workers=workers)
    out = np.full(16, -7, dtype=np.int32)
    cpu.run(cpu.load(cpu.compile(render_host(_slots_kernel(max_workers)), config), config), [out])
    # schedule(static) gives thread t the t-th run of blocks: the slots rise along the grid, and every
    # thread of the bounded launch, and no other, has one.
    assert out.tolist() == sorted(out.tolist())
    assert set(out.tolist()) == set(range(min(max_workers, workers)))
