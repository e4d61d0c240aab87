"""``warpmap cache``: through ``service.cli.main`` with temporary SQLite databases."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from db.cache import cache_stats
from db.migrate import upgrade
from db.records import DeviceInfo, KernelResult, ToolchainInfo, WorkloadSpec
from db.repository import save_kernel
from db.session import create_engine_for, session_scope
from service.cli import main

H100 = DeviceInfo(name="NVIDIA H100", arch="sm_90", driver="580.1", compute_units=132)
A100 = DeviceInfo(name="NVIDIA A100", arch="sm_80", driver="550.1", compute_units=108)
TOOLCHAIN = ToolchainInfo(warpmap="0.1.0", nvrtc="13.5", host_compiler="g++ 12.2.0")
MATMUL = WorkloadSpec(op="matmul", spec={"m": 128, "n": 128, "k": 64, "dtype": "float16"})
SOFTMAX = WorkloadSpec(op="softmax", spec={"rows": 1024, "cols": 256})
LONG_AGO = datetime(2026, 1, 1, tzinfo=UTC)
Capture = pytest.CaptureFixture[str]



def _result(latency: float, entry: str) -> KernelResult:
    return KernelResult(
        schedule={"tile": [64, 64]},
        source=f'extern "C" __global__ void {entry}() {{}}',
        entry=entry,
        grid=(4, 4, 1),
        block=(256, 1, 1),
        shared_bytes=0,
        params=({"name": "x", "dtype": "float16", "pointer": True},),
        latency_us=latency,
        trials_used=12,
        binary=bytes([0, 255, 10, 13]) * 8,
    )


def _new_db(tmp_path: Path, name: str) -> str:
    url = f"sqlite:///{tmp_path / name}"
    upgrade(url)
    return url


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    url = _new_db(tmp_path, "cache.db")
    engine = create_engine_for(url)
    with session_scope(engine) as session:
        save_kernel(session=session, workload=MATMUL, device=H100, toolchain=TOOLCHAIN, result=_result(5.0, "mm"))
        save_kernel(
            session=session, workload=MATMUL, device=A100, toolchain=TOOLCHAIN, result=_result(9.0, "mm_old"),
            now=LONG_AGO,
        )  # fmt: skip
        # 60 GB/s of a 75 GB/s roof (and 5 of 400 GFLOP/s): 80% of the roofline, memory-bound.
        softmax = replace(_result(2.0, "sm"), gflops=5.0, gbs=60.0, peak_gflops=400.0, bandwidth_gbs=75.0)
        save_kernel(session=session, workload=SOFTMAX, device=H100, toolchain=TOOLCHAIN, result=softmax)
    engine.dispose()
    return url


def _rows(url: str) -> int:
    engine = create_engine_for(url)
    try:
        with session_scope(engine) as session:
            return cache_stats(session=session).rows
    finally:
        engine.dispose()


def cache(url: str, *args: str) -> int:
    return main(["cache", *args, "--database-url", url])


def test_ls_lists_and_filters(db_url: str, capsys: Capture) -> None:
    assert cache(db_url, "ls") == 0
    out = capsys.readouterr().out
    assert "3 kernel(s)" in out and MATMUL.key in out and H100.key in out and A100.key in out
    header, rule, *rows, count = out.splitlines()
    assert header.split() == ["ID", "WORKLOAD", "DEVICE", "LATENCY_US", "ROOFLINE", "HITS", "SIZE", "UPDATED",
                              "SPEC"]
    # The spec's fields that differ from the operator's defaults: float16 does, softmax's dtype does not.
    assert sorted(row.split("  ")[-1].strip() for row in rows) == [
        "m=128 n=128 k=64 dtype=float16", "m=128 n=128 k=64 dtype=float16", "rows=1024 cols=256"]
    assert set(rule) == {"-", " "} and len(rows) == 3 and count == "3 kernel(s)"
    assert "\x1b" not in out and all(line == line.rstrip() for line in out.splitlines())  # plain in a log
    assert sorted(float(row.split()[3]) for row in rows) == [2.0, 5.0, 9.0]  # the latencies stored above
    assert sorted(row.split()[4] for row in rows) == ["-", "-", "80%"]  # kernels stored without roofs: "-"
    assert cache(db_url, "ls", "--op", "softmax") == 0
    assert " 80% memory " in capsys.readouterr().out
    assert cache(db_url, "ls", "--op", "softmax", "--json") == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["bound"] == "memory" and shown["roofline_fraction"] == pytest.approx(0.8)
    assert shown["spec"] == SOFTMAX.spec
    assert cache(db_url, "ls", "--device", "a100", "--json") == 0
    (line,) = capsys.readouterr().out.splitlines()
    assert json.loads(line)["device"] == A100.key
    assert cache(db_url, "ls", "--older-than", "30d", "--json") == 0
    assert [json.loads(x)["latency_us"] for x in capsys.readouterr().out.splitlines()] == [9.0]


def test_show_prints_one_kernel(db_url: str, capsys: Capture) -> None:
    assert cache(db_url, "ls", "--op", "softmax", "--json") == 0
    kernel_id = json.loads(capsys.readouterr().out)["id"]
    assert cache(db_url, "show", str(kernel_id), "--json") == 0
    shown = json.loads(capsys.readouterr().out)
    assert (shown["id"], shown["workload_key"], shown["kernel"]["latency_us"]) == (
        kernel_id,
        SOFTMAX.key,
        2.0,
    )
    assert shown["kernel"]["binary_b64"] == "<32 bytes>" and "--source" in shown["kernel"]["source"]
    assert cache(db_url, "show", str(kernel_id), "--source", "--json") == 0
    assert "void sm()" in json.loads(capsys.readouterr().out)["kernel"]["source"]


def test_show_summarises_a_kernel_and_prints_its_source_when_asked(db_url: str, capsys: Capture) -> None:
    assert cache(db_url, "ls", "--op", "softmax", "--json") == 0
    kernel_id = json.loads(capsys.readouterr().out)["id"]
    assert cache(db_url, "show", str(kernel_id)) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"kernel {kernel_id}: softmax rows=1024 cols=256 ({SOFTMAX.key})"
    assert lines[1] == f"device    {H100.key}" and lines[3] == "schedule  tile=[64, 64]"
    assert lines[4] == "latency   2.000 us; 5.0 GFLOP/s, 60.0 GB/s"
    assert lines[5] == "roofline  80% memory-bound, of the tuning's roofs (400 GFLOP/s peak, 75 GB/s)"
    assert " in 12 trials; updated " in lines[6] and lines[6].endswith("; served 0 time(s)")
    assert lines[7] == "launches  sm grid 4x4x1 block 256x1x1" and "void sm()" not in "\n".join(lines)
    assert cache(db_url, "show", str(kernel_id), "--source") == 0
    out = capsys.readouterr().out
    assert out.endswith("--- source of sm ---\nextern \"C\" __global__ void sm() {}\n")


def test_show_by_workload_key_lists_every_device(db_url: str, capsys: Capture) -> None:
    assert cache(db_url, "show", MATMUL.key, "--json") == 0
    shown = json.loads(capsys.readouterr().out)
    assert sorted(k["device_key"] for k in shown) == sorted([H100.key, A100.key])
    assert cache(db_url, "show", MATMUL.key) == 0
    blocks = capsys.readouterr().out.split("\n\n")
    assert sorted(block.splitlines()[1].split()[1] for block in blocks) == sorted([H100.key, A100.key])
    assert cache(db_url, "ls", "--workload", SOFTMAX.key, "--json") == 0
    assert json.loads(capsys.readouterr().out)["workload"] == SOFTMAX.key


@pytest.mark.parametrize(
    ("given", "message"),
    [("999", "no cached kernel with id 999"), ("matmul:0000000000000000", "'matmul:0000000000000000'")],
)
def test_show_unknown_kernel_is_exit_2(db_url: str, capsys: Capture, given: str, message: str) -> None:
    assert cache(db_url, "show", given) == 2
    assert message in capsys.readouterr().err


def test_stats(db_url: str, capsys: Capture) -> None:
    assert cache(db_url, "stats") == 0
    out = capsys.readouterr().out
    assert "kernels: 3" in out and "matmul" in out and "softmax" in out
    lines = out.splitlines()
    start = lines.index(next(line for line in lines if line.split()[:1] == ["operator"]))
    assert lines[start].split() == ["operator", "kernels", "size"] and set(lines[start + 1]) == {"-", " "}
    assert {line.split()[0]: int(line.split()[1]) for line in lines[start + 2:]} == {"matmul": 2, "softmax": 1}
    assert cache(db_url, "stats", "--json") == 0
    stats = json.loads(capsys.readouterr().out)
    sizes = [_result(5.0, "mm").size_bytes, _result(9.0, "mm_old").size_bytes, _result(2.0, "sm").size_bytes]
    assert stats == {"rows": 3, "bytes": sum(sizes)}


def test_evict_dry_run_then_by_age_then_by_size(db_url: str, capsys: Capture) -> None:
    assert cache(db_url, "evict", "--max-size", "0", "--dry-run") == 0
    assert "would remove 3" in capsys.readouterr().out and _rows(db_url) == 3
    assert cache(db_url, "evict", "--older-than", "30d") == 0
    assert "removed 1 kernel(s)" in capsys.readouterr().out and _rows(db_url) == 2
    one = _result(5.0, "mm").size_bytes
    assert cache(db_url, "evict", "--max-size", str(one)) == 0
    assert "removed 1 kernel(s)" in capsys.readouterr().out and _rows(db_url) == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "--older-than DURATION and/or --max-size SIZE"),
        (("--older-than", "3x"), "'3x' is not a duration"),
        (("--max-size", "lots"), "'lots' is not a size"),
    ],
)
def test_evict_bad_input_is_exit_2(db_url: str, capsys: Capture, args: tuple[str, ...], message: str) -> None:
    assert cache(db_url, "evict", *args) == 2
    assert message in capsys.readouterr().err
    assert _rows(db_url) == 3


def test_export_import_between_databases(db_url: str, tmp_path: Path, capsys: Capture) -> None:
    exported = tmp_path / "cache.jsonl"
    assert cache(db_url, "export", str(exported)) == 0
    assert "exported 3 kernel(s)" in capsys.readouterr().err
    assert len(exported.read_text().splitlines()) == 3
    other = _new_db(tmp_path, "other.db")
    assert cache(other, "import", str(exported)) == 0
    assert "read 3 kernel(s): 3 stored, 0 kept" in capsys.readouterr().out
    assert cache(other, "import", str(exported)) == 0
    assert "0 stored, 3 kept" in capsys.readouterr().out
    assert _rows(other) == 3


def test_export_to_stdout_with_a_filter(db_url: str, capsys: Capture) -> None:
    assert cache(db_url, "export", "--arch", "sm_90") == 0
    lines = capsys.readouterr().out.splitlines()
    assert sorted(json.loads(line)["kernel"]["entry"] for line in lines) == ["mm", "sm"]


def test_malformed_import_is_exit_2_and_imports_nothing(db_url: str, tmp_path: Path, capsys: Capture) -> None:
    exported = tmp_path / "cache.jsonl"
    assert cache(db_url, "export", str(exported)) == 0
    good = exported.read_text().splitlines()
    broken = tmp_path / "broken.jsonl"
    broken.write_text("\n".join([good[0], good[1], good[2][: len(good[2]) // 2]]) + "\n")
    other = _new_db(tmp_path, "other.db")
    capsys.readouterr()
    assert cache(other, "import", str(broken)) == 2
    err = capsys.readouterr().err
    assert "line 3: not JSON" in err and "nothing was imported" in err and "Traceback" not in err
    assert _rows(other) == 0


def test_import_missing_or_binary_file_is_exit_2(db_url: str, tmp_path: Path, capsys: Capture) -> None:
    assert cache(db_url, "import", str(tmp_path / "absent.jsonl")) == 2
    assert "cannot open" in capsys.readouterr().err
    garbage = tmp_path / "garbage.bin"
    garbage.write_bytes(bytes([0xFF, 0xFE, 0x00, 0x80]) * 10)
    assert cache(db_url, "import", str(garbage)) == 2
    assert "not UTF-8" in capsys.readouterr().err
    assert _rows(db_url) == 3


def test_unmigrated_database_is_exit_2(tmp_path: Path, capsys: Capture) -> None:
    assert cache(f"sqlite:///{tmp_path / 'fresh.db'}", "stats") == 2
    assert "run `warpmap db upgrade`" in capsys.readouterr().err


@pytest.mark.parametrize("given", ["99999999999999999999999", str(2**63)])
def test_show_an_id_past_64_bits_is_exit_2(db_url: str, capsys: Capture, given: str) -> None:
    assert cache(db_url, "show", given) == 2
    err = capsys.readouterr().err
    assert f"no cached kernel with id {given}" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"op": "bogus"}, "unknown operator 'bogus'"),
        ({"spec": {"m": -1, "n": 128, "k": 64}}, "m: Input should be greater than or equal to 1"),
        ({"spec": {"m": 128, "n": 128}}, "k: Field required"),
    ],
)
def test_import_validates_every_spec_and_stores_nothing_on_error(
    db_url: str, tmp_path: Path, capsys: Capture, change: dict[str, object], named: str
) -> None:
    exported = tmp_path / "cache.jsonl"
    assert cache(db_url, "export", str(exported)) == 0
    records = [json.loads(line) for line in exported.read_text().splitlines()]
    bad = next(i for i, r in enumerate(records) if r["workload"]["op"] == "matmul")
    records[bad]["workload"].update(change)
    records.append(records.pop(bad))  # last, so the good records before it are rolled back
    edited = tmp_path / "edited.jsonl"
    edited.write_text("".join(json.dumps(r) + "\n" for r in records))
    other = _new_db(tmp_path, "other.db")
    capsys.readouterr()
    assert cache(other, "import", str(edited)) == 2
    err = capsys.readouterr().err
    assert f"line {len(records)} (" in err and named in err and "nothing was imported" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert _rows(other) == 0


def test_spec_summary_names_what_differs_from_the_defaults() -> None:
    from compiler.ops import parse_spec
    from service.cli.cache import spec_summary

    conv = parse_spec({"op": "conv2d", "n": 2, "c": 3, "h": 17, "w": 19, "k": 5, "r": 3, "s": 3, "stride": [2, 2]})
    assert spec_summary("conv2d", conv.model_dump(mode="json")) == "n=2 c=3 h=17 w=19 k=5 r=3 s=3 stride=2x2"
    reduce = parse_spec({"op": "reduce", "shape": [13, 67], "axis": 1, "kind": "max"})
    assert spec_summary("reduce", reduce.model_dump(mode="json")) == "shape=13x67 axis=1 kind=max"
    assert spec_summary("future_op", {"op": "future_op", "x": 3, "tiles": [1, 2]}) == "x=3 tiles=1x2"
