"""The IR's vectorised exp: its error in ulp against float64 over its whole domain, and its vector code."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

from compiler.backends import cpu
from compiler.codegen.cpp import render_host
from compiler.cpu_device import detect_cpu
from compiler.ir import blockIdx, f32, kernel, lower, range_
from compiler.ops.cpu.vmath import EXP_MAX_ULP, HIGHEST, LOWEST, exp_f32

CHUNK = 4096


def _exp_kernel(n: int, nonpositive: bool):
    assert n % CHUNK == 0
    with kernel("vexp", block=1, grid=n // CHUNK) as k:
        x = k.tensor("x", f32, (n,), const=True)
        y = k.tensor("y", f32, (n,))
        for i in range_(CHUNK, name="i", simd=True):
            y[blockIdx.x * CHUNK + i] = exp_f32(x[blockIdx.x * CHUNK + i], nonpositive=nonpositive)
    return lower(k.kernel)


def _run(x: np.ndarray, nonpositive: bool, cpu_config: cpu.CpuConfig) -> tuple[np.ndarray, cpu.CpuArtifact]:
    n = -(-x.size // CHUNK) * CHUNK
    padded = np.zeros(n, dtype=np.float32)
    padded[: x.size] = x
    y = np.full(n, np.nan, dtype=np.float32)
    artifact = cpu.compile(render_host(_exp_kernel(n, nonpositive)), cpu_config)
    assert not isinstance(artifact, cpu.CompileFailure), artifact.log
    cpu.run(cpu.load(artifact, cpu_config), [padded, y])
    return y[: x.size], artifact


def ulp_error(got: np.ndarray, x: np.ndarray) -> np.ndarray:
    """|got - exp(x)| in units of the float32 ulp at the float64 reference."""
    ref = np.exp(x.astype(np.float64))
    ulp = np.exp2(np.floor(np.log2(ref)) - 23)
    return np.abs(got.astype(np.float64) - ref) / ulp


def _domain(low: float, high: float) -> np.ndarray:
    """A dense grid over [low, high] plus random floats of every magnitude inside it."""
    rng = np.random.default_rng(11)
    grid = np.linspace(low, high, 1 << 21, dtype=np.float64)
    tiny = np.concatenate([s * np.logspace(-30, 0, 1 << 16) for s in (-1.0, 1.0)])
    values = np.concatenate([grid, rng.uniform(low, high, 1 << 20), tiny]).astype(np.float32)
    return values[(values >= low) & (values <= high)]


# The smallest normal float is exp(-87.3365...); below it results are subnormal (absolute accuracy).
NORMAL_LOW = float(np.log(np.float64(np.finfo(np.float32).tiny))) + 1e-4


@pytest.mark.parametrize("nonpositive", [False, True])
def test_exp_is_within_the_stated_ulp_bound_where_results_are_normal(nonpositive: bool, cpu_config) -> None:
    x = _domain(NORMAL_LOW, 0.0 if nonpositive else HIGHEST)
    got, _ = _run(x, nonpositive, cpu_config)
    error = ulp_error(got, x)
    worst = int(np.argmax(error))
    assert error[worst] <= EXP_MAX_ULP, f"exp({x[worst]!r}) = {got[worst]!r}: {error[worst]:.3f} ulp"
    assert error.max() > 0.4  # the measurement sees rounding: it is not comparing a value with itself


def test_exp_edges_zero_underflow_overflow_and_nan(cpu_config) -> None:
    tiny = float(np.finfo(np.float32).tiny)
    x = np.array([0.0, -0.0, -87.0, -87.5, -95.0, -103.0, -104.5, -200.0, -3e38, HIGHEST,
                  np.nextafter(np.float32(HIGHEST), np.float32(np.inf)), 1000.0, np.inf, -np.inf, np.nan],
                 dtype=np.float32)
    got, _ = _run(x, False, cpu_config)
    with np.errstate(over="ignore"):
        ref = np.exp(x.astype(np.float64))
    assert got[0] == 1.0 and got[1] == 1.0
    subnormal = slice(3, 6)  # right to a few subnormal ulps (2**-149 each)
    assert np.all(np.abs(got[subnormal] - ref[subnormal]) <= 4 * 2.0**-149)
    assert np.all(got[6:9] == 0.0)
    assert np.isfinite(got[9]) and got[9] > 3.4e38
    assert np.all(np.isposinf(got[10:13])) and got[13] == 0.0 and np.isnan(got[14])
    nonpositive, _ = _run(x[:9], True, cpu_config)
    assert nonpositive[0] == 1.0 and nonpositive[1] == 1.0
    assert np.all(np.abs(nonpositive[:9].astype(np.float64) - ref[:9]) <= np.maximum(tiny, 2e-7 * ref[:9]))
    assert np.all(nonpositive[4:9] == 0.0)
    assert LOWEST < -103.0


@pytest.mark.skipif(shutil.which("objdump") is None, reason="objdump is not installed")
@pytest.mark.parametrize("nonpositive", [False, True])
def test_the_exp_loop_is_vector_code_of_the_machines_width(nonpositive: bool, cpu_config) -> None:
    lanes = detect_cpu().f32_lanes
    register = {16: "%zmm", 8: "%ymm", 4: "%xmm"}.get(lanes)
    if register is None:
        pytest.skip(f"no x86 vector register name for {lanes} f32 lanes")
    _, artifact = _run(np.zeros(CHUNK, dtype=np.float32), nonpositive, cpu_config)
    text = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(artifact.path)], capture_output=True,
                          text=True, check=True).stdout
    fmas = [line for line in text.splitlines() if "vfmadd" in line and "ps" in line]
    assert fmas, "no packed fma in the exp kernel"
    # Six polynomial fmas and three for the reduction per vector: the loop is vector code of that width.
    assert sum(register in line for line in fmas) >= 9, "\n".join(fmas[:20])
