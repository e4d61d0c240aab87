"""Running candidates where they cannot take the caller down: one long-lived child process per device.

A kernel under measurement may fault (a segfault on the cpu, an illegal address that poisons a CUDA
context), hang, or call ``exit``. :class:`IsolatedProcess` runs each call in a child process that
outlives calls (so a GPU context, a loaded library or a warm cache is set up once), and turns every
way a call can end into a value:

- :class:`Returned` — the function's result;
- :class:`Raised` — it raised; the child goes on;
- :class:`Crashed` — the child died (a signal or an exit status); it is replaced before the next call;
- :class:`TimedOut` — no answer within ``timeout_s``; the child is killed and replaced.

Children are started with ``spawn``: the caller may hold threads (a compile pool, OpenMP workers) that
``fork`` would copy in an unknown state. Functions and arguments travel by pickle, so a function is
named by its module (a top-level function of an importable module).

>>> import math, operator
>>> with IsolatedProcess() as child:
...     child.call(math.factorial, 5, timeout_s=60)
...     child.call(operator.truediv, 1, 0, timeout_s=60).type_name
Returned(value=120)
'ZeroDivisionError'
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from types import TracebackType
from typing import Any, Generic, TypeVar

T = TypeVar("T")

#: Seconds a child gets to leave on its own at ``close`` before it is killed.
_CLOSE_GRACE_S = 5.0


@dataclass(frozen=True)
class Returned(Generic[T]):
    value: T


@dataclass(frozen=True)
class Raised:
    """The function raised in the child; ``traceback`` is the child's formatted traceback."""

    type_name: str
    message: str
    traceback: str


@dataclass(frozen=True)
class Crashed:
    """The child died during the call: killed by a signal (``signal_name``) or exited (``exitcode``)."""

    exitcode: int | None
    message: str

    @property
    def signal_name(self) -> str | None:
        if self.exitcode is None or self.exitcode >= 0:
            return None
        try:
            return signal.Signals(-self.exitcode).name
        except ValueError:
            return f"signal {-self.exitcode}"


@dataclass(frozen=True)
class TimedOut:
    seconds: float
    message: str


Outcome = Returned[Any] | Raised | Crashed | TimedOut


def _serve(conn: Connection, environment: dict[str, str]) -> None:
    """The child's loop: run each (function, arguments) it receives and send back how it ended.

    ``environment`` is set before anything else is imported here (the first request's unpickling loads
    the modules it needs), so libraries that read their settings at load time see it.
    """
    os.environ.update(environment)
    # Ctrl-C reaches the whole process group: the parent decides, and closes this child (or kills it
    # after a grace); a child of its own mind would die mid-reply printing a traceback.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while True:
        try:
            request = conn.recv()
        except EOFError:  # the parent closed its end: leave quietly
            return
        if request is None:
            return
        function, args = request
        try:
            reply: tuple[str, Any] = ("returned", function(*args))
        except BaseException as exc:  # every exception is the caller's result, even SystemExit
            reply = ("raised", (type(exc).__name__, str(exc), "".join(traceback.format_exception(exc))))
        try:
            conn.send(reply)
        except Exception as exc:  # an unpicklable result is reported, not fatal
            conn.send(("raised", (type(exc).__name__, f"cannot send the result back: {exc}", "")))


class IsolatedProcess:
    """A replaceable child process that runs one call at a time (see the module docstring).

    ``environment`` is added to the child's environment before it imports anything.

    Not thread-safe: one caller drives one child, as one device is measured by one process.
    ``restarts`` counts the children replaced after a crash or a time-out.
    """

    def __init__(self, *, name: str = "warpmap-measure", environment: Mapping[str, str] | None = None) -> None:
        self._context = multiprocessing.get_context("spawn")
        self._name = name
        self._environment = dict(environment or {})
        self._process: BaseProcess | None = None
        self._conn: Connection | None = None
        self.restarts = 0

    def __enter__(self) -> IsolatedProcess:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    @property
    def pid(self) -> int | None:
        """The current child's process id (None before the first call and after a crash)."""
        return self._process.pid if self._process is not None else None

    def call(self, function: Callable[..., T], /, *args: Any, timeout_s: float) -> Outcome:
        """Run ``function(*args)`` in the child and say how it ended; never raises for what the call did.

        Raises ``ValueError`` for a non-positive ``timeout_s`` and the pickling error when ``function``
        or ``args`` cannot be sent (a caller's bug, not a candidate's).
        """
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        conn = self._ensure_started()
        conn.send((function, args))
        if not conn.poll(timeout_s):
            self._replace()
            return TimedOut(timeout_s, f"no result within {timeout_s:g} s; the measuring process was killed")
        try:
            kind, payload = conn.recv()
        except (EOFError, ConnectionError):
            return self._crashed()
        if kind == "returned":
            return Returned(payload)
        return Raised(*payload)

    def close(self) -> None:
        """Ask the child to leave and wait for it (killing it after a short grace)."""
        process, conn = self._process, self._conn
        self._process = self._conn = None
        if conn is not None:
            with contextlib.suppress(OSError, ValueError):  # the child may already be gone
                conn.send(None)
            conn.close()
        if process is not None:
            process.join(_CLOSE_GRACE_S)
            if process.is_alive():
                process.kill()
                process.join()

    def _ensure_started(self) -> Connection:
        if self._process is None or self._conn is None or not self._process.is_alive():
            self._discard()
            parent, child = self._context.Pipe(duplex=True)
            process = self._context.Process(target=_serve, args=(child, self._environment), name=self._name,
                                            daemon=True)
            process.start()
            child.close()
            self._process, self._conn = process, parent
        return self._conn

    def _crashed(self) -> Crashed:
        process = self._process
        assert process is not None
        process.join(_CLOSE_GRACE_S)
        exitcode = process.exitcode
        self._discard()
        self.restarts += 1
        crash = Crashed(exitcode, "")
        how = (f"killed by {crash.signal_name}" if crash.signal_name
               else f"exited with status {exitcode}" if exitcode is not None else "stopped answering")
        return Crashed(exitcode, f"the measuring process {how}")

    def _replace(self) -> None:
        if self._process is not None and self._process.is_alive():
            self._process.kill()
        self._discard()
        self.restarts += 1

    def _discard(self) -> None:
        if self._conn is not None:
            self._conn.close()
        if self._process is not None:
            self._process.join(_CLOSE_GRACE_S)
        self._process = self._conn = None
