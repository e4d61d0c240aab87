"""``warpmap tune`` on the cpu: a result table or JSON, the best kernel stored, a repeat answered from the
cache unless ``--force``, bad input in one line with exit status 2."""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path

import pytest

from compiler.backends import get_target
from service.cli import main
from service.cli.tune import _print

SPEC = '{"op": "matmul", "m": 19, "n": 23, "k": 31, "batch": 2}'


@pytest.fixture
def database(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    monkeypatch.setenv("WARPMAP_CACHE_DIR", str(tmp_path / "cache"))
    reason = get_target("cpu").unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    return f"sqlite:///{tmp_path / 'warpmap.db'}"


def _tune(capsys: pytest.CaptureFixture[str], database: str, *extra: str) -> dict[str, object]:
    assert main(["tune", "--spec", SPEC, "--target", "cpu", "--trials", "3", "--json", "--database-url", database,
                 *extra]) == 0
    return json.loads(capsys.readouterr().out)


def test_tune_stores_the_best_and_a_repeat_is_a_cache_hit(capsys: pytest.CaptureFixture[str], database: str) -> None:
    first = _tune(capsys, database)
    assert first["cache"] == "miss" and first["target"] == "cpu" and first["trials"] == 3
    assert first["latency_ms"] > 0 and first["gflops"] > 0 and "extern \"C\"" in first["kernel"]["source"]
    assert first["retimed"] in (2, 3)  # the fastest three distinct binaries of three trials, re-timed
    second = _tune(capsys, database)
    assert second["cache"] == "hit" and second["schedule"] == first["schedule"]
    assert second["latency_ms"] == pytest.approx(first["latency_ms"])
    assert datetime.fromisoformat(second["tuned_at"]).tzinfo is not None and second["hits"] >= 1
    # The cache keeps the measurement's spread and bandwidth, not the median alone.
    assert first["latency_p20_ms"] <= first["latency_ms"] <= first["latency_p80_ms"]
    for field in ("latency_p20_ms", "latency_p80_ms", "gbs", "peak_gflops", "bandwidth_gbs", "roofline_fraction",
                  "min_bytes"):
        assert second[field] == pytest.approx(first[field]), field
    assert second["bound"] == first["bound"]
    # A tuning says where the kernel stands against the roofline measured on the cores that timed it.
    assert first["bandwidth_measured"] and first["bandwidth_gbs"] > 0 and first["bound"] in ("compute", "memory")
    assert first["roofline_fraction"] > 0 and first["min_bytes"] == 4 * 2 * (19 * 31 + 31 * 23 + 19 * 23)
    assert main(["tune", "--spec", SPEC, "--target", "cpu", "--database-url", database]) == 0
    shown = capsys.readouterr().out
    assert re.search(r"^tuned +\d{4}-\d\d-\d\d \d\d:\d\d UTC, served \d+ time\(s\) from the cache", shown, re.M)
    forced = _tune(capsys, database, "--force")
    assert forced["cache"] == "miss" and forced["trials"] == 3
    assert main(["cache", "ls", "--database-url", database]) == 0
    listing = capsys.readouterr().out
    assert "matmul:" in listing and "1 kernel(s)" in listing


def test_tune_prints_a_table_and_progress(capsys: pytest.CaptureFixture[str], database: str) -> None:
    assert main(["tune", "--spec", SPEC, "--target", "cpu", "--trials", "2", "--database-url", database]) == 0
    captured = capsys.readouterr()
    assert "GFLOP/s" in captured.out and "schedule" in captured.out and "cpu: miss" in captured.out
    assert "of roofline" in captured.out and "-bound, " in captured.out
    # Not on a terminal, the table is plain text that never folds: one line a field, under a rule of dashes.
    lines = captured.out.splitlines()
    assert lines[:2] == ["cpu: miss", "field        value"] and set(lines[2]) == {"-", " "}
    latency = next(line for line in lines if line.startswith("latency "))
    assert latency.endswith("; the fastest of 2 re-timed side by side")
    assert "trial 2/2" in captured.err
    assert "1 (its trials: warpmap tunings show 1)" in captured.out
    # One plain line per trial in a log: what is done of how many, the best, the counts, the time and ETA.
    first, second = (line for line in captured.err.splitlines() if line.startswith("trial "))
    assert first.startswith("trial 1/2: best ") and " 1 ok (" in first and ", ETA " in first
    assert second.endswith(", ETA 0 s)")


@pytest.mark.parametrize(("argv", "message"), [
    (["--spec", '{"op": "matmul", "m": 0, "n": 1, "k": 1}'], "invalid spec: m:"),
    (["--spec", SPEC, "--trials", "0"], "--trials must be at least 1"),
    (["--spec", SPEC, "--seconds", "-1"], "--seconds must be a number above 0"),
    (["--spec", '{"op": "matmul", "m": 4, "n": 4, "k": 4, "dtype": "float16"}', "--target", "cpu"],
     "no matmul template for dtype 'float16' on target 'cpu'"),
])
def test_bad_input_is_one_line_and_exit_2(argv: list[str], message: str, capsys: pytest.CaptureFixture[str],
                                          database: str) -> None:
    assert main(["tune", *argv, "--database-url", database]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) <= 2 and message in err[-1], err


def test_a_spec_too_big_for_this_machines_memory_is_refused_before_any_job(
        capsys: pytest.CaptureFixture[str], database: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from service.cli import specs, tune

    monkeypatch.setattr(tune, "available_memory_bytes", lambda: 1 << 30)
    spec = '{"op": "matmul", "m": 16384, "n": 16384, "k": 16384}'  # three 1 GiB tensors
    assert main(["tune", "--spec", spec, "--target", "cpu", "--database-url", database]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    needed = specs.host_bytes_needed(3 << 30, 3 << 28)
    assert err == [f"warpmap tune: error: this spec needs about {needed / 2**30:.1f} GiB of host memory for its "
                   "inputs, outputs and float64 reference; 1.0 GiB is available"]
    # Refused before the database was opened: no job, no file.
    assert not Path(database.removeprefix("sqlite:///")).exists()


def test_a_tuning_is_a_job_with_every_trial_recorded(capsys: pytest.CaptureFixture[str], database: str) -> None:
    from db import create_engine_for, list_jobs, list_trials, session_scope

    first = _tune(capsys, database)
    engine = create_engine_for(database)
    try:
        with session_scope(engine) as session:
            (job,) = list_jobs(session=session)
            trials = list_trials(session=session, job_id=job.id)
    finally:
        engine.dispose()
    assert (job.status, job.target, job.worker, job.error) == ("succeeded", "cpu", None, None)
    assert job.queue.startswith("cpu:") and job.options == {"level": 2, "seed": 0, "timeout_s": 120.0,
                                                                 "warm_start": True}
    assert job.progress["trials_done"] == 3 and job.progress["trials_budget"] == 3
    assert [t.result.number for t in trials] == [0, 1, 2] == list(range(first["trials"]))
    assert first["tuning"] == job.id  # what `warpmap tunings show` takes
    assert all(t.result.status == "ok" and t.result.latency_median_us > 0 for t in trials)


def test_the_workloads_best_on_another_device_is_measured_right_after_the_default(
        capsys: pytest.CaptureFixture[str], database: str) -> None:
    from dataclasses import replace

    from compiler.ops import get_operator, parse_spec
    from db import create_engine_for, list_jobs, list_kernels, list_trials, save_kernel, session_scope
    from db.cache import KernelFilter

    _tune(capsys, database)  # SPEC's best, on this machine
    space = get_operator("matmul").space(parse_spec(json.loads(SPEC)), get_target("cpu").device(), 2)
    default = space.default_values()
    chosen = next(v for v in reversed(space.valid_values()) if v != default)
    engine = create_engine_for(database)
    try:
        with session_scope(engine) as session:
            (kernel,) = list_kernels(session=session)
            save_kernel(session=session, workload=kernel.workload, device=replace(kernel.device, name="another cpu"),
                        toolchain=kernel.toolchain, result=replace(kernel.result, schedule=chosen))
        with session_scope(engine) as session:
            mine = dict(list_kernels(session=session, where=KernelFilter(device=kernel.device.key))[0].result.schedule)
        # A forced tuning starts from this key's own best too, first; the other device's next.
        starts = [v for v in (mine, chosen) if v != default]
        for extra, warmed in (((), True), (("--cold",), False)):
            assert main(["tune", "--spec", SPEC, "--target", "cpu", "--trials", "3", "--json", "--force",
                         "--database-url", database, *extra]) == 0
            out, err = capsys.readouterr()
            said = "warm start: 2 schedules (this workload's best here and on 1 other device) from the cache"
            assert (said in err) == warmed, err
            assert json.loads(out)["warm_start"] == 2 * int(warmed)
            with session_scope(engine) as session:
                job = list_jobs(session=session)[0]
                trials = list_trials(session=session, job_id=job.id)
            assert job.options["warm_start"] == warmed
            assert trials[0].result.params == default
            assert ([t.result.params for t in trials[1:1 + len(starts)]] == starts) == warmed
    finally:
        engine.dispose()


def test_a_workload_tuned_elsewhere_now_is_refused_and_a_dead_tune_s_job_taken_over(
        capsys: pytest.CaptureFixture[str], database: str) -> None:
    import socket

    from db import WorkloadSpec, create_engine_for, get_job, session_scope, start_job, submit_job
    from db.migrate import upgrade
    from search.records import cache_identity
    from service.jobs.devices import queue_name
    from service.tuning import warpmap_version

    upgrade(database)
    from compiler.ops import parse_spec

    spec = json.loads(SPEC)
    workload = WorkloadSpec(op="matmul", spec=parse_spec(spec).model_dump(mode="json"))
    device, toolchain = cache_identity(get_target("cpu").fingerprint(), warpmap_version())
    engine = create_engine_for(database)
    try:
        with session_scope(engine) as session:
            job, _ = submit_job(session=session, workload=workload, device=device, toolchain=toolchain,
                                strategy="default", budget={"trials": 3}, target="cpu", queue=queue_name("cpu", device))
            start_job(session=session, job_id=job.id, worker="some-host:1:cpu")
        assert main(["tune", "--spec", SPEC, "--target", "cpu", "--trials", "3", "--database-url", database]) == 2
        err = capsys.readouterr().err
        assert f"being tuned on this device now (job {job.id}, running on some-host:1:cpu)" in err
        assert (f"follow it with `warpmap tunings show {job.id}`, or stop it with "
                f"`warpmap tunings cancel {job.id}`") in err
        with session_scope(engine) as session:  # a `warpmap tune` of this host that died: pid 2**22 + 1 never runs
            start_job(session=session, job_id=job.id, worker=f"{socket.gethostname()}:{2**22 + 1}:tune:cpu")
        assert _tune(capsys, database)["cache"] == "miss"
        with session_scope(engine) as session:
            assert get_job(session=session, job_id=job.id).status == "succeeded"
    finally:
        engine.dispose()


def test_the_strategy_choices_are_the_search_strategies():
    # The CLI keeps its own list so that parsing arguments does not import Optuna.
    from search.strategies import STRATEGIES
    from service.cli.args.tune import STRATEGY_NAMES

    assert set(STRATEGY_NAMES) == {"default", *STRATEGIES}


def test_a_log_reader_that_goes_away_costs_the_progress_lines_not_the_tuning(database: str, tmp_path: Path) -> None:
    """``warpmap tune ... 2>&1 | head -1``: the tuning goes on and stores its kernel."""
    import subprocess
    import sys

    from db import create_engine_for, list_jobs, list_kernels, session_scope

    command = [sys.executable, "-m", "service.cli", "tune", "--spec", SPEC, "--target", "cpu", "--trials", "3",
               "--database-url", database]
    shell = " ".join(f"'{part}'" for part in command) + " 2>&1 | head -1"
    first = subprocess.run(["bash", "-o", "pipefail", "-c", shell], capture_output=True, text=True, timeout=300,
                           cwd=Path(__file__).resolve().parents[2])
    assert first.stdout.startswith("tuning matmul"), first
    engine = create_engine_for(database)
    try:
        with session_scope(engine) as session:
            (job,) = list_jobs(session=session)
            kernels = list_kernels(session=session)
    finally:
        engine.dispose()
    assert (job.status, job.error, len(kernels)) == ("succeeded", None, 1)
    assert first.returncode == 141 and first.stderr == ""  # the table met the closed pipe: exit 141, quietly


def test_ctrl_c_ends_a_tuning_in_one_line_and_fails_its_job(database: str) -> None:
    """SIGINT to the terminal's process group (what Ctrl-C does): the build pool and the measuring
    process leave it to the tuning, which says "interrupted" and exits 130, with no child's traceback."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from db import create_engine_for, list_jobs, session_scope

    tuning = subprocess.Popen(
        [sys.executable, "-m", "service.cli", "tune", "--spec", '{"op": "matmul", "m": 96, "n": 96, "k": 96}',
         "--target", "cpu", "--trials", "200", "--database-url", database],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True,
        cwd=Path(__file__).resolve().parents[2])
    assert tuning.stderr is not None
    lines = [tuning.stderr.readline(), tuning.stderr.readline()]  # its heading, then the first trial
    assert lines[1].startswith("trial 1/200"), lines
    time.sleep(0.5)
    os.killpg(tuning.pid, signal.SIGINT)
    rest = tuning.stderr.read()
    assert tuning.wait(timeout=60) == 130
    assert rest.strip().splitlines()[-1] == "interrupted" and "Traceback" not in rest, rest
    engine = create_engine_for(database)
    try:
        with session_scope(engine) as session:
            (job,) = list_jobs(session=session)
    finally:
        engine.dispose()
    assert (job.status, job.error) == ("failed", "interrupted")


def test_the_warm_start_line_says_where_its_schedules_come_from() -> None:
    from dataclasses import replace

    from db.warm import WarmStart
    from search.records import cache_identity
    from service.cli.tune import _warm_text
    from service.tuning import warpmap_version

    device, toolchain = cache_identity(get_target("cpu").fingerprint(), warpmap_version())
    here = WarmStart({"mr": 8}, device.key, "older-toolchain")
    elsewhere = [WarmStart({"mr": 4}, replace(device, name=f"cpu {i}").key, toolchain.key) for i in range(2)]
    own = WarmStart({"mr": 12}, device.key, toolchain.key)
    assert _warm_text([here], device, toolchain) == "1 schedule (this workload's best under 1 other toolchain here)"
    assert _warm_text([*elsewhere, here], device, toolchain) == (
        "3 schedules (this workload's best on 2 other devices and under 1 other toolchain here)")
    assert _warm_text([own, elsewhere[0]], device, toolchain) == (
        "2 schedules (this workload's best here and on 1 other device)")


def test_a_tuning_that_finds_nothing_points_at_its_trials(capsys: pytest.CaptureFixture[str], database: str) -> None:
    # Builds cannot finish in 10 ms: every candidate times out, and the tuning ends without a kernel.
    assert main(["tune", "--spec", SPEC, "--target", "cpu", "--trials", "2", "--timeout", "0.01",
                 "--database-url", database]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[-2].startswith("warpmap tune: no correct candidate was found (2 timeout)")
    assert err[-1] == "warpmap tune: every trial and why it failed: warpmap tunings show 1"
    assert main(["tunings", "show", "1", "--json", "--database-url", database]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["tuning"]["status"] == "failed" and shown["tuning"]["error"] == "no correct candidate was found"
    assert [t["status"] for t in shown["trials"]] == ["timeout", "timeout"]


def test_a_tuning_cancelled_from_another_shell_stops_after_its_trial_and_files_no_kernel(database: str) -> None:
    """`warpmap tunings cancel ID` while `warpmap tune` runs: the tune reads the status back with its next
    progress write, ends with exit status 1 and a line naming its kept trials, and stores no kernel."""
    import subprocess
    import sys

    from db import count_trials, create_engine_for, list_jobs, list_kernels, session_scope

    tuning = subprocess.Popen(
        [sys.executable, "-m", "service.cli", "tune", "--spec", '{"op": "matmul", "m": 96, "n": 96, "k": 96}',
         "--target", "cpu", "--trials", "200", "--database-url", database],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[2])
    assert tuning.stderr is not None
    try:
        lines = [tuning.stderr.readline(), tuning.stderr.readline()]  # its heading, then the first trial
        assert lines[1].startswith("trial 1/200"), lines
        engine = create_engine_for(database)
        with session_scope(engine) as session:
            (job,) = list_jobs(session=session)
        assert main(["tunings", "cancel", str(job.id), "--database-url", database]) == 0
        rest = tuning.stderr.read()
        assert tuning.wait(timeout=120) == 1, rest
    finally:
        tuning.kill()
    with session_scope(engine) as session:
        (ended,) = list_jobs(session=session)
        trials = count_trials(session=session, job_id=job.id)
        kernels = list_kernels(session=session)
    engine.dispose()
    assert ended.status == "cancelled" and kernels == []
    assert 1 <= trials < 200
    last = rest.strip().splitlines()[-1]
    assert last == (f"warpmap tune: tuning {job.id} was cancelled; no kernel was filed, its {trials} measured "
                    f"trial(s) stay: warpmap tunings show {job.id}"), rest
    assert "Traceback" not in rest


def test_the_result_table_prints_bracketed_values_as_they_are(capsys: pytest.CaptureFixture[str]) -> None:
    report = {"target": "cpu", "cache": "miss", "schedule": {"warps": "[2, 4]", "layout": "[bold]row"},
              "latency_ms": 0.5, "trials": 3}
    _print(report, as_json=False)
    out = capsys.readouterr().out
    assert "warps=[2, 4], layout=[bold]row" in out and "0.5 ms" in out
