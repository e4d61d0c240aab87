"""The cpu target: host kernels compiled by g++, cached, run on numpy arrays and timed."""

import importlib.util
import os
import random
from pathlib import Path

import numpy as np
import pytest

from compiler.backends import cpu
from compiler.backends.timing import Protocol
from compiler.codegen.cpp import render_host
from compiler.ir import blockIdx, f32, i32, if_, kernel, logical_and, lower, select, threadIdx
from compiler.ir.evaluate import evaluate_expr
from compiler.mapping import repeat
from compiler.source import KernelSource, Param

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "host_kernels.py"
_spec = importlib.util.spec_from_file_location("host_kernels_example", EXAMPLE)
assert _spec is not None and _spec.loader is not None
host_kernels = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(host_kernels)

_UNAVAILABLE = cpu.unavailable_reason()
pytestmark = pytest.mark.skipif(_UNAVAILABLE is not None, reason=str(_UNAVAILABLE))


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> cpu.CpuConfig:
    return cpu.CpuConfig(cache_dir=tmp_path_factory.mktemp("cpu-cache"), workers=2)


def _load(kernel, config: cpu.CpuConfig) -> cpu.LoadedKernel:
    artifact = cpu.compile(render_host(kernel), config)
    assert isinstance(artifact, cpu.CpuArtifact), artifact
    return cpu.load(artifact, config)


def _poisoned(*shape: int) -> np.ndarray:
    return np.full(shape, np.nan, dtype=np.float32)


@pytest.mark.parametrize(("m", "n"), [(1, 1), (5, 67), (13, 129)])
def test_elementwise_matches_numpy_at_awkward_sizes(config, m, n):
    rng = np.random.default_rng(m * 1000 + n)
    x = rng.standard_normal((m, n), dtype=np.float32)
    y = rng.standard_normal((m, n), dtype=np.float32)
    out = _poisoned(m, n)
    cpu.run(_load(host_kernels.elementwise(m, n), config), [x, y, out, 1.5])
    np.testing.assert_allclose(out, 1.5 * x + np.exp(y), rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize(("m", "n"), [(1, 1), (11, 1), (17, 97)])
def test_row_sum_matches_numpy(config, m, n):
    x = np.random.default_rng(n).standard_normal((m, n), dtype=np.float32)
    out = _poisoned(m)
    cpu.run(_load(host_kernels.row_sum(m, n), config), [x, out])
    np.testing.assert_allclose(out, x.astype(np.float64).sum(axis=1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("m", "n", "k"), [(1, 1, 1), (3, 5, 7), (37, 71, 29)])
def test_register_tiled_matmul_matches_numpy(config, m, n, k):
    rng = np.random.default_rng(m + n + k)
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    c = _poisoned(m, n)
    cpu.run(_load(host_kernels.matmul(m, n, k), config), [a, b, c])
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)


def test_a_second_compile_is_a_cache_hit_without_a_rebuild(tmp_path, monkeypatch):
    config = cpu.CpuConfig(cache_dir=tmp_path, workers=1)
    source = render_host(host_kernels.row_sum(3, 4))
    first = cpu.compile(source, config)
    assert isinstance(first, cpu.CpuArtifact) and not first.from_cache

    def no_rebuild(*args, **kwargs):
        raise AssertionError("the cached binary was rebuilt")

    monkeypatch.setattr(cpu, "_build", no_rebuild)
    second = cpu.compile(source, config)
    assert isinstance(second, cpu.CpuArtifact) and second.from_cache
    assert second.path == first.path and second.key == first.key


def test_a_compiler_error_is_a_value_with_the_log(config):
    broken = KernelSource("broken", 'extern "C" void broken(int workers) { undeclared_name = 1; }\n',
                          (1, 1, 1), (1, 1, 1), ())
    failure = cpu.compile(broken, config)
    assert isinstance(failure, cpu.CompileFailure)
    assert "host compile failed" in failure.message and "undeclared_name" in failure.log
    with pytest.raises(cpu.CpuCompileError, match="undeclared_name"):
        cpu.load(failure, config)


def test_arguments_are_checked_before_the_call(config):
    loaded = _load(host_kernels.elementwise(2, 3), config)
    good = [np.zeros((2, 3), np.float32) for _ in range(3)]
    with pytest.raises(ValueError, match="takes 4 arguments"):
        cpu.run(loaded, good)
    with pytest.raises(ValueError, match="'x' must have dtype float32, got float64"):
        cpu.run(loaded, [np.zeros((2, 3)), *good[1:], 1.0])
    with pytest.raises(ValueError, match="'y' must be C-contiguous"):
        cpu.run(loaded, [good[0], np.zeros((3, 2), np.float32).T, good[2], 1.0])
    with pytest.raises(ValueError, match="'alpha' must be a number"):
        cpu.run(loaded, [*good, "1"])


def test_an_int_scalar_out_of_range_is_refused():
    source = KernelSource("s", "", (1, 1, 1), (1, 1, 1), (Param("n", "int32", pointer=False),))
    with pytest.raises(ValueError, match="does not fit int32"):
        cpu.check_args(source, [2**31])


def test_timing_a_kernel_gives_plausible_samples(config):
    m, n = 64, 256
    x = np.random.default_rng(0).standard_normal((m, n), dtype=np.float32)
    out = _poisoned(m)
    loaded = _load(host_kernels.row_sum(m, n), config)
    protocol = Protocol(warmup_ms=5, min_repetitions=5, target_ms=5, flush_caches=True)
    samples = cpu.time(loaded, [x, out], protocol)
    assert len(samples.samples_ns) >= 5 and all(s > 0 for s in samples.samples_ns)
    assert samples.p20_ns <= samples.median_ns <= samples.p80_ns
    np.testing.assert_allclose(out, x.astype(np.float64).sum(axis=1), rtol=1e-5, atol=1e-5)


def test_the_fingerprint_names_compiler_flags_and_isa():
    print_ = cpu.fingerprint()
    assert print_["compiler"].startswith(("g++", "c++"))
    assert "-fopenmp" in print_["flags"] and "-march=native" in print_["flags"]
    assert print_["isa"]


def test_a_missing_compiler_is_a_reason(tmp_path):
    reason = cpu.unavailable_reason(cpu.CpuConfig(cache_dir=tmp_path, cxx="no-such-compiler-xyz"))
    assert reason is not None and "no-such-compiler-xyz" in reason


def test_a_compiler_without_openmp_is_a_reason(tmp_path, monkeypatch):
    fake = tmp_path / "cxx-without-openmp"
    fake.write_text('#!/bin/sh\n[ "$1" = --version ] && { echo "fake 1.0"; exit 0; }\n'
                    'echo "fatal: -fopenmp unsupported" >&2\nexit 1\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    reason = cpu.unavailable_reason(cpu.CpuConfig(cache_dir=tmp_path, cxx=fake.name))
    assert reason == ("the cpu target needs OpenMP from 'cxx-without-openmp': "
                      "-fopenmp build failed: fatal: -fopenmp unsupported")


def _random_int_expr(rng: random.Random, leaves: list, depth: int):
    if depth == 0 or rng.random() < 0.2:
        return rng.choice([*leaves, rng.randint(-20, 40) + 0 * leaves[0]])
    a = _random_int_expr(rng, leaves, depth - 1)
    kind = rng.choice(["add", "sub", "mul", "div", "mod", "neg", "select"])
    if kind in ("add", "sub"):
        b = _random_int_expr(rng, leaves, depth - 1)
        return a + b if kind == "add" else a - b
    if kind == "mul":
        return a * rng.randint(-3, 5)
    if kind in ("div", "mod"):
        return a // rng.randint(1, 9) if kind == "div" else a % rng.randint(1, 9)
    if kind == "neg":
        return -a
    return select(a < _random_int_expr(rng, leaves, depth - 1), a, _random_int_expr(rng, leaves, depth - 1))


def test_integer_arithmetic_matches_the_interpreter(config):
    # The host shares CUDA's C arithmetic: truncating division, remainder with the dividend's sign.
    rng = random.Random(11)
    threads, count = 48, 60
    with kernel("arith", block=threads, grid=2) as k:
        out = k.tensor("out", i32, (2, count, threads))
        n = k.scalar("n")
        exprs = [_random_int_expr(rng, [threadIdx.x, blockIdx.x, n], depth=4) for _ in range(count)]
        for row, expr in enumerate(exprs):
            out[blockIdx.x, row, threadIdx.x] = expr
    result = np.full((2, count, threads), -999, dtype=np.int32)
    cpu.run(_load(lower(k.kernel), config), [result, -13])
    expected = [[[evaluate_expr(e, {n: -13}, {"threadIdx.x": t, "blockIdx.x": b}) for t in range(threads)]
                 for e in exprs] for b in range(2)]
    assert result.tolist() == expected


def test_a_task_mapping_with_unrolled_repeats_and_guards_runs_on_the_host(config):
    rows, cols = 20, 45
    mapping = repeat(3, 3, attrs="u+ u2").spatial(8, 16)
    with kernel("copy", block=160, grid=1) as k:
        src = k.tensor("src", f32, (rows, cols), const=True)
        dst = k.tensor("dst", f32, (rows, cols))
        for i, j in mapping.on(threadIdx.x):
            with if_(logical_and(i < rows, j < cols)):
                dst[i, j] = src[i, j] * 3.0 - 1.0
    a = np.random.default_rng(5).standard_normal((rows, cols)).astype(np.float32)
    b = np.full_like(a, np.nan)
    cpu.run(_load(lower(k.kernel), config), [a, b])
    np.testing.assert_allclose(b, a.astype(np.float64) * 3 - 1, rtol=1e-6, atol=1e-7)  # a*3-1 may be one fma


BOUND_PROBE = """
import os, sys
from compiler.backends import cpu
from compiler.codegen.cpp import render_host
from compiler.cpu_device import detect_cpu
sys.path.insert(0, sys.argv[1])
import host_kernels
before = len(os.sched_getaffinity(0))
config = cpu.CpuConfig(cache_dir=sys.argv[2])
cpu.load(cpu.compile(render_host(host_kernels.elementwise(4, 64)), config), config)
after = len(os.sched_getaffinity(0))
print(before, after, cpu.CpuConfig(cache_dir=sys.argv[2]).workers, detect_cpu().logical_cores)
"""


def test_openmp_bound_to_places_still_launches_on_every_core(tmp_path):
    """The measuring process binds OpenMP threads (OMP_PROC_BIND, ``search.tune.MEASURING_ENVIRONMENT``),
    which pins the loading thread to one CPU; the cores a launch uses and the host's description are the
    process's, as it started, not that thread's."""
    import os
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", BOUND_PROBE, str(EXAMPLE.parent), str(tmp_path)],
                          env={**os.environ, "OMP_PROC_BIND": "true"}, capture_output=True, text=True, timeout=120,
                          check=True)
    before, after, workers, cores = map(int, done.stdout.split())
    assert after == 1  # the runtime did bind the thread that loaded it, to one place
    assert workers == cores == before
