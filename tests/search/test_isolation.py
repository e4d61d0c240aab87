"""A candidate that crashes, hangs or exits fails as a value; the child is replaced and the next call works.

The functions called are the standard library's (a function travels to a spawned child by its module
name, and these are importable there): ``ctypes.string_at(0)`` reads address 0 (SIGSEGV),
``os.abort`` raises SIGABRT, ``os._exit`` leaves with a status, ``time.sleep`` outlasts the time-out.
"""

from __future__ import annotations

import ctypes
import math
import operator
import os
import time
from collections.abc import Iterator

import pytest

from search.isolation import Crashed, IsolatedProcess, Raised, Returned, TimedOut


@pytest.fixture(scope="module")
def child() -> Iterator[IsolatedProcess]:
    with IsolatedProcess() as process:
        yield process


def test_results_come_back_and_the_child_is_reused(child: IsolatedProcess) -> None:
    assert child.call(math.factorial, 10, timeout_s=60) == Returned(3628800)
    first = child.pid
    assert child.call(os.getpid, timeout_s=60) == Returned(first)
    assert first != os.getpid()


def test_an_exception_is_a_value_and_the_child_survives(child: IsolatedProcess) -> None:
    pid = child.call(os.getpid, timeout_s=60)
    outcome = child.call(operator.truediv, 1, 0, timeout_s=60)
    assert isinstance(outcome, Raised) and outcome.type_name == "ZeroDivisionError"
    assert "truediv" in outcome.traceback or "ZeroDivisionError" in outcome.traceback
    assert child.call(os.getpid, timeout_s=60) == pid


@pytest.mark.parametrize(("function", "args", "signal_name", "exitcode"), [
    (ctypes.string_at, (0,), "SIGSEGV", None),
    (os.abort, (), "SIGABRT", None),
    (os._exit, (3,), None, 3),
])
def test_a_crash_is_a_value_and_the_next_call_gets_a_new_child(
        child: IsolatedProcess, function: object, args: tuple[object, ...], signal_name: str | None,
        exitcode: int | None) -> None:
    before = child.call(os.getpid, timeout_s=60)
    restarts = child.restarts
    outcome = child.call(function, *args, timeout_s=60)  # type: ignore[arg-type]
    assert isinstance(outcome, Crashed), outcome
    assert outcome.signal_name == signal_name
    if exitcode is not None:
        assert outcome.exitcode == exitcode and f"status {exitcode}" in outcome.message
    else:
        assert signal_name in outcome.message
    assert child.restarts == restarts + 1
    after = child.call(os.getpid, timeout_s=60)
    assert isinstance(after, Returned) and after != before
    assert child.call(math.factorial, 5, timeout_s=60) == Returned(120)


def test_a_hang_is_killed_at_the_time_out(child: IsolatedProcess) -> None:
    child.call(os.getpid, timeout_s=60)  # started, so the time-out measures the call, not the spawn
    start = time.monotonic()
    outcome = child.call(time.sleep, 60, timeout_s=1.0)
    assert isinstance(outcome, TimedOut) and outcome.seconds == 1.0
    assert time.monotonic() - start < 10
    assert child.call(math.factorial, 4, timeout_s=60) == Returned(24)


def test_a_bad_time_out_is_refused() -> None:
    with IsolatedProcess() as process, pytest.raises(ValueError, match="timeout_s"):
        process.call(os.getpid, timeout_s=0)


def test_close_leaves_no_child_behind() -> None:
    process = IsolatedProcess()
    pid = process.call(os.getpid, timeout_s=60)
    assert isinstance(pid, Returned)
    process.close()
    assert process.pid is None
    with pytest.raises(ProcessLookupError):
        os.kill(pid.value, 0)


def test_the_child_leaves_ctrl_c_to_its_parent(child: IsolatedProcess) -> None:
    """A terminal's SIGINT reaches the whole process group: the parent decides and closes the child."""
    import signal

    assert child.call(signal.getsignal, signal.SIGINT, timeout_s=60) == Returned(signal.SIG_IGN)
