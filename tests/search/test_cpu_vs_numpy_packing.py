"""``bench/cpu_vs_numpy.py``'s packing section: every packing of the default's tile is checked against
numpy (batched shapes too) and timed, and the default's own choice is the one marked."""

from __future__ import annotations

import time

import pytest

from compiler.backends import cpu
from compiler.backends.timing import Protocol
from compiler.cpu_device import detect_cpu


def test_the_packings_of_the_default_tile_are_checked_timed_and_the_default_marked(load_bench, monkeypatch,
                                                                                    tmp_path) -> None:
    if (reason := cpu.unavailable_reason()) is not None:
        pytest.skip(reason)
    bench = load_bench("cpu_vs_numpy")
    monkeypatch.setattr(bench, "PACKING_SHAPES", ((1, 64, 48, 40), (3, 20, 16, 24)))
    monkeypatch.setattr(bench, "PAUSE_S", 0.0)
    ctx = bench.Context(detect_cpu(), cpu.CpuConfig(cache_dir=tmp_path), 1, 0,
                        Protocol(warmup_ms=1, min_repetitions=2, target_ms=2), 1.0, 1.0, time.perf_counter_ns)
    rows = bench.section_packing(ctx, [])
    assert [row[0] for row in rows] == ["64x48x40"] * 4 + ["3x20x16x24"] * 4
    single, batched = rows[:4], rows[4:]
    # One small single product: one launch; the batched one keeps A's launch (B inside, one row).
    assert [row[2] for row in single][2] == "A and B inside (default)" and single[2][4] == "1.00x"
    assert [row[2] for row in batched][1] == "B inside (default)" and batched[1][4] == "1.00x"
    assert {row[2] for row in rows} >= {"A, B by launches", "numpy"}
