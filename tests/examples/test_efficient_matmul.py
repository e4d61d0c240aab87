"""The example matmul: readable source, NVRTC builds without spills, numpy's results on the CPU emulator."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from compiler.backends import emu
from compiler.backends.nvrtc import compile_source

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "efficient_matmul.py"
_spec = importlib.util.spec_from_file_location("efficient_matmul_example", EXAMPLE)
assert _spec is not None and _spec.loader is not None
example = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(example)

def test_the_kernel_reads_like_the_mapping_it_came_from():
    source = example.efficient_matmul_source(1024, 1024, 1024)
    text = source.source
    assert source.grid == (16, 4, 1) and source.block == (256, 1, 1) and source.shared_bytes == 0
    assert "__shared__ __align__(16) float smem_a[2][64][8];" in text
    assert "__shared__ __align__(16) float smem_b[2][8][256];" in text
    assert "float regs_c[8][8];" in text
    assert text.count("__syncthreads();") == 2  # once after the prologue, once per k step
    assert "if (k_tile + 1 < 128) {" in text
    assert " ? " not in text  # 1024 is a multiple of every tile: all edge predicates fold away
    assert "    const int smem_a_row_1 = tid / 64 * 16 + tid % 32 / 16 * 4;" in text
    assert "smem_a[k_tile % 2][smem_a_row_1 + ii_4][kk] * smem_b[k_tile % 2][kk][smem_b_col + jj_4]" in text


def test_edges_are_predicated_when_sizes_are_not_multiples_of_the_tile():
    text = example.efficient_matmul_source(100, 300, 20).source
    assert " ? a[" in text and " ? b[" in text and " : 0.0f;" in text
    assert "    const int c_row = bid_x * 64 + tid / 64 * 16 + tid % 32 / 16 * 4;" in text
    assert "if (c_row + ii_8 < 100 && c_col + jj_8 < 300) {" in text


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_nvrtc_builds_without_spills(arch):
    result = compile_source(example.efficient_matmul_source(1024, 1024, 1024), arch)
    assert result.ok, result.log
    assert result.usage is not None
    assert result.usage.spill_stores == 0 and result.usage.spill_loads == 0
    assert result.usage.stack_frame == 0  # accumulators and prefetch registers stay in registers
    assert result.usage.shared_bytes == (2 * 64 * 8 + 2 * 8 * 256) * 4
    assert 0 < result.usage.registers <= 255


@pytest.mark.parametrize(("m", "n", "k"), [(64, 256, 16), (100, 300, 20), (3, 5, 1), (130, 520, 33)])
def test_matches_numpy_on_the_emulator(m, n, k):
    source = example.efficient_matmul_source(m, n, k)
    rng = np.random.default_rng(m * 7 + n * 3 + k)
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    c = np.full((m, n), np.nan, dtype=np.float32)
    emu.run(source, [a, b, c])
    reference = a.astype(np.float64) @ b.astype(np.float64)
    assert not np.isnan(c).any()
    assert np.linalg.norm(c - reference) / np.linalg.norm(reference) < 1e-5


def test_bad_sizes_are_rejected():
    with pytest.raises(ValueError, match="size n must be a positive int, got 0"):
        example.efficient_matmul(4, 0, 4)


def test_main_leads_with_the_schedule_and_ends_with_the_verdict(capsys):
    assert example.main(["--size", "70", "260", "9"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith("efficient matmul, float32 C[70, 260]")
    assert lines[1].startswith("schedule: 64 x 256 tile")
    assert "sm_80  ok" in out and "sm_90  ok" in out and "compile ms" in out
    assert "__global__" not in out  # the source only on request
    assert lines[-1] == "verdict: pass"


def test_main_prints_the_source_on_request(capsys):
    assert example.main(["--size", "8", "8", "8", "--source"]) == 0
    out = capsys.readouterr().out
    assert "__global__" in out and out.splitlines()[-1] == "verdict: pass"


def test_main_exits_1_when_the_result_is_wrong(capsys, monkeypatch):
    monkeypatch.setattr(example, "TOLERANCE", {"float32": -1.0})  # no result can be this close
    assert example.main(["--size", "8", "8", "8"]) == 1
    assert capsys.readouterr().out.splitlines()[-1] == "verdict: FAIL (result differs from numpy)"
