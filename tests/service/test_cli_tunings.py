"""``warpmap tunings``: through ``service.cli.main`` on a temporary SQLite database that holds two
tunings as a worker leaves them (trials recorded, progress stored, one ended, one waiting)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from db.jobs import end_job, record_progress, start_job, submit_job
from db.migrate import upgrade
from db.models import JOB_STATUSES
from db.records import DeviceInfo, ToolchainInfo, TrialResult, WorkloadSpec
from db.repository import record_trial
from db.session import create_engine_for, session_scope
from service.cli import main
from service.cli.args.tunings import STATUSES

CPU = DeviceInfo(name="Test CPU", arch="cpu-f32x8-0000", driver="none")
TOOLCHAIN = ToolchainInfo(warpmap="0.1.0", nvrtc="none", host_compiler="g++ 12.2.0")
MATMUL = WorkloadSpec(op="matmul", spec={"op": "matmul", "m": 512, "n": 512, "k": 512, "dtype": "float32"})
SOFTMAX = WorkloadSpec(op="softmax", spec={"op": "softmax", "rows": 64, "cols": 100})
COMPILE_ERROR = "kernel.cpp:12: error: 'mr' was not declared in this scope\n   12 |   float acc[mr];\n"
LONG = "x" * 200
Capture = pytest.CaptureFixture[str]


@pytest.fixture
def tunings(tmp_path: Path) -> tuple[str, int, int]:
    """(database URL, the ended matmul tuning's id, the waiting softmax tuning's id)."""
    url = f"sqlite:///{tmp_path / 'tunings.db'}"
    upgrade(url)
    engine = create_engine_for(url)
    trials = [
        TrialResult(number=0, params={"mr": 6, "nr": 16}, status="ok", latency_median_us=900.0,
                    latency_p20_us=890.0, latency_p80_us=910.0, samples=30, compile_ms=700.0),
        TrialResult(number=1, params={"mr": 7, "nr": 16}, status="compile_error", message=COMPILE_ERROR,
                    compile_ms=300.0),
        TrialResult(number=2, params={"mr": 8, "nr": 32}, status="ok", latency_median_us=750.5,
                    latency_p20_us=740.0, latency_p80_us=760.0, samples=30, compile_ms=650.0),
        TrialResult(number=3, params={"mr": 4, "nr": 32}, status="wrong_result", message=LONG, compile_ms=640.0),
    ]
    with session_scope(engine) as session:
        matmul, _ = submit_job(session=session, workload=MATMUL, device=CPU, toolchain=TOOLCHAIN,
                               strategy="default", budget={"trials": 40}, options={"level": 2, "seed": 0})
        start_job(session=session, job_id=matmul.id, worker="cli-host-1")
        for trial in trials:
            record_trial(session=session, job_id=matmul.id, trial=trial)
        record_progress(session=session, job_id=matmul.id, progress={
            "trials_done": 4, "trials_budget": 40, "counts": {"ok": 2, "compile_error": 1, "wrong_result": 1},
            "best_ms": 0.7505, "elapsed_s": 3.0, "eta_s": None})
        end_job(session=session, job_id=matmul.id, status="failed", error="stopped by hand")
        softmax, _ = submit_job(session=session, workload=SOFTMAX, device=CPU, toolchain=TOOLCHAIN,
                                strategy="tpe", budget={"trials": 8})
    engine.dispose()
    return url, matmul.id, softmax.id


def run(url: str, *args: str) -> int:
    return main(["tunings", *args, "--database-url", url])


def test_statuses_match_the_database() -> None:
    assert STATUSES == JOB_STATUSES


def test_ls_lists_newest_first_with_progress(tunings: tuple[str, int, int], capsys: Capture) -> None:
    url, matmul, softmax = tunings
    assert run(url, "ls") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["ID", "STATUS", "OP", "TARGET", "TRIALS", "BEST_MS", "WORKER", "CREATED", "SPEC"]
    assert lines[2].split()[:7] == [str(softmax), "queued", "softmax", "cpu", "0/8", "-", "-"]
    assert lines[3].split()[:7] == [str(matmul), "failed", "matmul", "cpu", "4/40", "0.7505", "-"]
    assert lines[3].endswith("m=512 n=512 k=512")
    assert lines[-1] == "2 tuning(s)"


@pytest.mark.parametrize(("args", "ids"), [(("--status", "failed"), [0]), (("--op", "softmax"), [1]),
                                           (("--op", "conv2d"), []), (("--limit", "1"), [1])])
def test_ls_filters(tunings: tuple[str, int, int], capsys: Capture, args: tuple[str, ...], ids: list[int]) -> None:
    url, *known = tunings
    assert run(url, "ls", *args, "--json") == 0
    listed = [json.loads(line)["id"] for line in capsys.readouterr().out.splitlines()]
    assert listed == [known[i] for i in ids]


def test_ls_json_is_one_object_a_line(tunings: tuple[str, int, int], capsys: Capture) -> None:
    url, matmul, _ = tunings
    assert run(url, "ls", "--status", "failed", "--json") == 0
    (document,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert document["id"] == matmul and document["error"] == "stopped by hand"
    assert document["spec"]["m"] == 512 and document["progress"]["best_ms"] == 0.7505
    assert document["options"] == {"level": 2, "seed": 0} and document["finished_at"] is not None


def test_show_prints_the_summary_then_every_trial_in_order(tunings: tuple[str, int, int], capsys: Capture) -> None:
    url, matmul, _ = tunings
    assert run(url, "show", str(matmul)) == 0
    out = capsys.readouterr().out
    summary, table = out.split("\n\n")
    assert summary.splitlines()[0] == f"tuning {matmul}: failed"
    assert "matmul m=512 n=512 k=512 (matmul:" in summary and "strategy  default; budget trials 40" in summary
    assert "trials    4 (2 ok, 1 compile_error, 1 wrong_result); fastest median 750.500 us" in summary
    assert "error     stopped by hand" in summary
    rows = table.splitlines()
    assert rows[0].split() == ["#", "STATUS", "MEDIAN_US", "P20_US", "P80_US", "COMPILE_MS", "mr", "nr", "MESSAGE"]
    assert [row.split()[:2] for row in rows[2:]] == [["0", "ok"], ["1", "compile_error"], ["2", "ok"],
                                                     ["3", "wrong_result"]]
    assert rows[2].split()[2:8] == ["900.000", "890.000", "910.000", "700", "6", "16"]
    # A message's first line only, cut to a table's width; the JSON keeps it whole.
    assert rows[3].endswith("error: 'mr' was not declared in this scope") and "float acc" not in table
    assert rows[5].endswith("x" * 79 + "…")


def test_show_fastest_first_and_a_limit(tunings: tuple[str, int, int], capsys: Capture) -> None:
    url, matmul, _ = tunings
    assert run(url, "show", str(matmul), "--sort", "latency", "--limit", "3") == 0
    table = capsys.readouterr().out.split("\n\n")[1].splitlines()
    assert [row.split()[0] for row in table[2:5]] == ["2", "0", "1"]  # timed by latency, then failures by number
    assert table[-1] == "3 of 4 trials; --limit 0 shows all"


def test_show_json_has_every_trial_whole(tunings: tuple[str, int, int], capsys: Capture) -> None:
    url, matmul, _ = tunings
    assert run(url, "show", str(matmul), "--json") == 0
    document = json.loads(capsys.readouterr().out)
    assert document["tuning"]["id"] == matmul and document["trials_total"] == 4
    assert [t["number"] for t in document["trials"]] == [0, 1, 2, 3]
    assert document["trials"][1]["message"] == COMPILE_ERROR and document["trials"][3]["message"] == LONG
    assert document["trials"][2]["params"] == {"mr": 8, "nr": 32} and document["trials"][2]["samples"] == 30


def test_show_a_tuning_without_trials(tunings: tuple[str, int, int], capsys: Capture) -> None:
    url, _, softmax = tunings
    assert run(url, "show", str(softmax)) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == f"tuning {softmax}: queued" and "trials    0\n" in out and "#" not in out


@pytest.mark.parametrize(("args", "message"), [
    (("show", "999"), "no tuning job with id 999"),
    (("show", "1", "--limit", "-1"), "--limit must be 0 (all) or more"),
    (("show", str(2**63)), "no tuning with id"),
    (("ls", "--limit", "0"), "--limit must be at least 1"),
    (("cancel", "999"), "no tuning job with id 999"),
    (("watch", "999"), "no tuning job with id 999"),
    (("watch", "1", "--interval", "0"), "--interval must be a number of seconds above 0"),
    (("watch", "1", "--interval", "nan"), "--interval must be a number of seconds above 0"),
    (("cancel", "-1"), "no tuning with id -1"),
    (("cancel", "1"), "tuning 1 already ended as failed; nothing to cancel"),
])
def test_bad_input_is_one_line_and_exit_2(tunings: tuple[str, int, int], capsys: Capture, args: tuple[str, ...],
                                          message: str) -> None:
    assert run(tunings[0], *args) == 2
    err = capsys.readouterr().err
    assert err.startswith("warpmap tunings: error: ") and message in err and len(err.splitlines()) == 1


def test_cancel_a_queued_tuning_so_no_worker_starts_it(tunings: tuple[str, int, int], capsys: Capture) -> None:
    url, _, softmax = tunings
    assert run(url, "cancel", str(softmax)) == 0
    assert capsys.readouterr().out == f"tuning {softmax} cancelled: it was queued; no worker will start it\n"
    engine = create_engine_for(url)
    with session_scope(engine) as session:
        assert start_job(session=session, job_id=softmax, worker="w") is None
    engine.dispose()
    assert run(url, "cancel", str(softmax)) == 2
    assert capsys.readouterr().err == (f"warpmap tunings: error: tuning {softmax} already ended as cancelled; "
                                       "nothing to cancel\n")


def test_cancel_a_running_tuning_keeps_its_trials(tunings: tuple[str, int, int], capsys: Capture) -> None:
    url, _, softmax = tunings
    engine = create_engine_for(url)
    with session_scope(engine) as session:
        start_job(session=session, job_id=softmax, worker="gpu-host:7:cuda")
        record_trial(session=session, job_id=softmax, trial=TrialResult(number=0, params={"rows": 4}, status="ok",
                                                                        latency_median_us=12.0))
    assert run(url, "cancel", str(softmax)) == 0
    assert capsys.readouterr().out == (
        f"tuning {softmax} cancelled: it was running on gpu-host:7:cuda and stops after its trial in progress; "
        f"its 1 measured trial(s) stay (warpmap tunings show {softmax})\n")
    with session_scope(engine) as session:
        # What the runner reads back with its next progress write, and so stops.
        current = record_progress(session=session, job_id=softmax, progress={"trials_done": 2})
    engine.dispose()
    assert current.status == "cancelled"
    assert run(url, "show", str(softmax)) == 0
    assert capsys.readouterr().out.splitlines()[0] == f"tuning {softmax}: cancelled"


def test_watch_follows_a_tuning_another_process_runs_to_its_end(tunings: tuple[str, int, int],
                                                                 capsys: Capture) -> None:
    url, _, softmax = tunings
    engine = create_engine_for(url)

    def worker() -> None:  # what a worker writes, a little at a time
        time.sleep(0.3)
        with session_scope(engine) as session:
            start_job(session=session, job_id=softmax, worker="w")
        for done in (1, 2, 8):
            time.sleep(0.2)
            with session_scope(engine) as session:
                record_trial(session=session, job_id=softmax, trial=TrialResult(
                    number=done - 1, params={"rows": done}, status="ok", latency_median_us=100.0 / done))
                record_progress(session=session, job_id=softmax, progress={
                    "trials_done": done, "trials_budget": 8, "counts": {"ok": done}, "best_ms": 0.1 / done,
                    "elapsed_s": 2.0 * done, "eta_s": None})
        with session_scope(engine) as session:
            end_job(session=session, job_id=softmax, status="succeeded")

    running = threading.Thread(target=worker)
    running.start()
    try:
        assert run(url, "watch", str(softmax), "--interval", "0.05") == 0
    finally:
        running.join()
        engine.dispose()
    captured = capsys.readouterr()
    err = captured.err.splitlines()
    assert err[0] == f"tuning {softmax}: queued, waiting for a worker"
    written = ["trial 1/8: best 0.1 ms; 1 ok (2 s, ETA 14 s)", "trial 2/8: best 0.05 ms; 2 ok (4 s, ETA 12 s)",
               "trial 8/8: best 0.0125 ms; 8 ok (16 s, ETA 0 s)"]
    # Each progress write once, in order; a loaded machine may read past one between two polls, never the last.
    assert err[-1] == written[-1] and err[1:] == [line for line in written if line in err[1:]]
    out = captured.out.splitlines()
    assert out[0] == f"tuning {softmax}: succeeded"
    assert "trials    3 (3 ok); fastest median 12.500 us" in out


def test_watch_of_a_tuning_that_ended_without_a_kernel_exits_1(tunings: tuple[str, int, int],
                                                               capsys: Capture) -> None:
    url, matmul, _ = tunings
    assert run(url, "watch", str(matmul)) == 1
    captured = capsys.readouterr()
    assert captured.err == "trial 4/40: best 0.7505 ms; 1 compile_error, 2 ok, 1 wrong_result (3 s, ETA 27 s)\n"
    assert captured.out.splitlines()[0] == f"tuning {matmul}: failed" and "error     stopped by hand" in captured.out
