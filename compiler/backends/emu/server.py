"""The launch server: the emulator runtime as a small process that forks one child per launch.

This process never forks. A ``fork`` in a multithreaded interpreter runs every library's fork handlers
in the middle of other threads' work (OpenBLAS's stops its worker threads: another thread's matrix
product comes out wrong, or the interpreter deadlocks) and copies the interpreter's page tables. The
server (``runtime/wm_server.c``) is single-threaded and small, so its forks are safe and cheap, and
launches may come from any number of threads at once.

One server runs per process and runtime build, started on first use and replaced if it dies. A
launch sends the server its shared memory file, the kernel library and a reply socket; the reply
brings the child's pidfd (to kill it at the time limit) and, once the server has reaped it, its wait
status. When this process goes away the server sees the end of its socket, kills its children and
exits; a child dies with its server.
"""

from __future__ import annotations

import atexit
import contextlib
import math
import os
import select
import signal
import socket
import struct
import subprocess
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from . import errors
from .build import EmuConfig, build_runtime, runtime_key

_POLL_MAX_MS = 2**31 - 1  # poll's limit: about 24 days


@dataclass
class Launch:
    """One launch in flight: the reply socket and the child's pidfd."""

    reply: socket.socket
    pidfd: int

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):  # already gone
            signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)

    def wait(self, timeout_s: float) -> int | None:
        """The child's wait status, or None if it ran past ``timeout_s`` (it is then killed and reaped)."""
        # poll, not select: select refuses descriptors from 1024 on, which a long-lived process that
        # holds many files (a service, a test run) hands out to its sockets.
        poller = select.poll()
        poller.register(self.reply, select.POLLIN)
        try:
            ready = poller.poll(min(max(0, math.ceil(timeout_s * 1000)), _POLL_MAX_MS))
            if not ready:
                self.kill()
            message = self.reply.recv(4)  # sent once the server has reaped the child
        except BaseException:  # an interrupt must not leave the child running
            self.kill()
            raise
        if len(message) != 4:
            raise errors.EmulationCrashError("", "the launch server went away during the launch")
        return struct.unpack("<i", message)[0] if ready else None

    def close(self) -> None:
        self.reply.close()
        os.close(self.pidfd)


class LaunchServer:
    """A running launch server: the request socket and the process behind it."""

    def __init__(self, executable: str) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.process = subprocess.Popen(
                [executable, str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                start_new_session=True,  # a Ctrl-C at the terminal is for this process, not the server
            )
        except OSError as exc:
            ours.close()
            raise errors.EmulationLoadError(
                "", f"cannot start the emulator's launch server {executable}: {exc} (a cache folder on a "
                "noexec mount? point WARPMAP_CACHE_DIR elsewhere)") from exc
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self.socket = ours

    def alive(self) -> bool:
        return self.process.poll() is None

    def start(self, request: bytes, fds: Sequence[int]) -> Launch:
        """Send one launch (``request`` is a packed ``wm_request``; ``fds`` the shared file and the kernel
        library). Raises OSError if the request could not be sent (the server is gone: nothing ran)."""
        reply, remote = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            with remote:
                socket.send_fds(self.socket, [request], [*fds, remote.fileno()])
            try:
                message, pidfds, _, _ = socket.recv_fds(reply, 4, 1)
            except OSError:
                message, pidfds = b"", []
            if len(message) != 4:
                # Not an OSError, so not retried: the request was delivered, and a child may have started
                # and written into the shared file.
                raise errors.EmulationCrashError("", "the launch server went away while starting a launch")
            (code,) = struct.unpack("<i", message)
            if code < 0 or not pidfds:
                reason = os.strerror(-code) if code < 0 else "no process descriptor came back"
                raise errors.EmulationCrashError("", f"the launch server could not start a launch: {reason}")
        except BaseException:
            reply.close()
            raise
        return Launch(reply, pidfds[0])

    def close(self) -> None:
        self.socket.close()  # end of file: the server kills its children and exits
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class LaunchServers:
    """This process's launch servers, one per runtime build, started on first use.

    A forked copy of this process starts with none: it must not talk to its parent's servers.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: dict[str, LaunchServer] = {}
        atexit.register(self.close)
        os.register_at_fork(after_in_child=self._forget_all)

    def get(self, config: EmuConfig) -> LaunchServer:
        key = runtime_key(config)
        with self._lock:
            server = self._running.get(key)
            if server is None or not server.alive():
                if server is not None:
                    server.close()
                server = LaunchServer(str(build_runtime(config)))
                self._running[key] = server
            return server

    def start(self, config: EmuConfig, request: bytes, fds: Sequence[int]) -> Launch:
        """Hand one launch to the server for ``config``; one that stopped answering is replaced once."""
        for attempt in range(2):
            server = self.get(config)
            try:
                return server.start(request, fds)
            except OSError:
                self.forget(server)
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def forget(self, server: LaunchServer) -> None:
        """Drop ``server`` so that the next launch starts a new one."""
        with self._lock:
            for key, running in list(self._running.items()):
                if running is server:
                    del self._running[key]
        server.close()

    def close(self) -> None:
        with self._lock:
            running = list(self._running.values())
            self._running.clear()
        for server in running:
            server.close()

    def _forget_all(self) -> None:
        # In a forked child: the parent's servers (and possibly a held lock) belong to the parent.
        self._lock = threading.Lock()
        self._running = {}


SERVERS = LaunchServers()
