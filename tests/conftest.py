"""Session-wide isolation: tests write caches and databases only under their own temporary folders.

The caches (``$WARPMAP_CACHE_DIR``, ``$XDG_CACHE_HOME``) and the default database folder
(``$XDG_DATA_HOME``) point into the session's temporary folder, and a user's
``$WARPMAP_DATABASE_URL`` is hidden, so a test run never touches the user's compiled kernels or
tuning database. Everything that reads them does so when called, not at import, so setting them
here is early enough. Under pytest-xdist each worker process runs this fixture with its own folder.

Every storage test can run on SQLite and on a real PostgreSQL server: the server is started by the test
session itself (initdb into a temporary folder, a free loopback port) the first time a test asks for it,
and stopped at the end, also when tests fail. Under pytest-xdist each worker process starts its own
server on its own port. Each test gets a fresh database copied from a migrated template, so tests never
see each other's rows.
"""

from __future__ import annotations

import contextlib
import glob
import importlib.util
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import Engine

from db.migrate import upgrade
from db.session import create_engine_for

#: Variables pointed into the session's folder, each at its own subfolder.
ISOLATED = {"WARPMAP_CACHE_DIR": "cache", "XDG_CACHE_HOME": "xdg-cache", "XDG_DATA_HOME": "xdg-data"}
#: Variables removed for the session.
HIDDEN = ("WARPMAP_DATABASE_URL",)


@pytest.fixture(scope="session", autouse=True)
def _isolated_folders(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    root = tmp_path_factory.mktemp("warpmap-home")
    saved = {name: os.environ.get(name) for name in (*ISOLATED, *HIDDEN)}
    os.environ.update({name: str(root / sub) for name, sub in ISOLATED.items()})
    for name in HIDDEN:
        os.environ.pop(name, None)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


#: Stops the server when the test process dies without cleaning up (killed by a CI time limit, say):
#: waits on the process's pidfd, then runs the stop command it was given and removes the folder.
WATCHDOG = """
import os, select, shutil, subprocess, sys
select.select([os.pidfd_open(int(sys.argv[1]))], [], [])
subprocess.run(sys.argv[3:], capture_output=True, timeout=120, check=False)
shutil.rmtree(sys.argv[2], ignore_errors=True)
"""

SERVER_OPTIONS = "-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=60"


def find_bin_dir() -> Path | None:
    """The folder holding ``initdb`` and ``pg_ctl``: on PATH, or a Debian-style versioned folder."""
    on_path = shutil.which("initdb")
    if on_path and shutil.which("pg_ctl"):
        return Path(on_path).parent
    for folder in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if (Path(folder) / "initdb").exists() and (Path(folder) / "pg_ctl").exists():
            return Path(folder)
    return None


def free_port() -> int:
    """A loopback port free at the moment of asking."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def stop_process(process: subprocess.Popen[bytes], timeout_s: float = 30.0) -> None:
    """SIGTERM (a server's graceful stop), then SIGKILL past ``timeout_s``; waits for the exit."""
    with contextlib.suppress(ProcessLookupError):
        process.terminate()
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@dataclass
class PostgresServer:
    bin_dir: Path
    root: Path
    port: int = 0
    watchdog: subprocess.Popen[bytes] | None = None

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def log_file(self) -> Path:
        return self.root / "server.log"

    def _as_owner(self, *args: str) -> list[str]:
        # PostgreSQL refuses to run as root: hand the work to the postgres account.
        if os.geteuid() == 0:
            return ["runuser", "-u", "postgres", "--", *args]
        return list(args)

    def _run(self, *args: str) -> None:
        done = subprocess.run(self._as_owner(*args), capture_output=True, text=True, timeout=120, check=False)
        if done.returncode != 0:
            log = self.log_file.read_text() if self.log_file.exists() else ""
            raise RuntimeError(f"{' '.join(args)} failed ({done.returncode}): {done.stderr or done.stdout}\n{log}")

    def start(self) -> None:
        self._run(
            str(self.bin_dir / "initdb"), "-D", str(self.data_dir), "-U", "postgres", "--auth=trust",
            "--no-sync", "-E", "UTF8", "--no-locale",
        )  # fmt: skip
        last_error: Exception | None = None
        for _ in range(5):  # another process may take the port between probe and bind
            self.port = free_port()
            options = f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.root} {SERVER_OPTIONS}"
            try:
                self._run(
                    str(self.bin_dir / "pg_ctl"), "-D", str(self.data_dir), "-l", str(self.log_file),
                    "-o", options, "-w", "-t", "60", "start",
                )  # fmt: skip
                return
            except RuntimeError as exc:
                last_error = exc
        raise RuntimeError(f"PostgreSQL did not start: {last_error}")

    def _stop_command(self) -> list[str]:
        return self._as_owner(str(self.bin_dir / "pg_ctl"), "-D", str(self.data_dir), "-m", "immediate", "-w", "stop")

    def watch(self) -> None:
        """Leave a watchdog that stops the server if this process dies before :meth:`stop`."""
        self.watchdog = subprocess.Popen(
            [sys.executable, "-c", WATCHDOG, str(os.getpid()), str(self.root), *self._stop_command()],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip

    def stop(self) -> None:
        if self.watchdog is not None:
            self.watchdog.kill()
            self.watchdog.wait()
        if (self.data_dir / "postmaster.pid").exists():
            done = subprocess.run(self._stop_command(), capture_output=True, text=True, timeout=120, check=False)
            if done.returncode != 0:
                raise RuntimeError(f"pg_ctl stop failed ({done.returncode}): {done.stderr or done.stdout}")

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self, *, template: str | None = None) -> str:
        """A new database (a copy of ``template`` if given); returns its name."""
        name = f"wm_{uuid.uuid4().hex[:12]}"
        clause = f" TEMPLATE {template}" if template else ""
        engine = create_engine(self.url("postgres"), isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as connection:
                connection.execute(text(f"CREATE DATABASE {name}{clause}"))
        finally:
            engine.dispose()
        return name


def start_server(bin_dir: Path) -> PostgresServer:
    """Start a server in a new folder under the system temp dir, owned by the account that runs it.

    Not under pytest's ``tmp_path``: that tree is private to root, and the postgres account must be
    able to reach its data folder and socket.
    """
    root = Path(tempfile.mkdtemp(prefix="warpmap-pg-"))
    if os.geteuid() == 0:
        try:
            account = pwd.getpwnam("postgres")
        except KeyError:
            shutil.rmtree(root, ignore_errors=True)
            raise RuntimeError("PostgreSQL refuses to run as root, and there is no 'postgres' account") from None
        os.chown(root, account.pw_uid, account.pw_gid)
    server = PostgresServer(bin_dir=bin_dir, root=root)
    try:
        server.start()
        server.watch()
    except BaseException:
        with contextlib.suppress(Exception):  # keep the original error
            server.stop()
        shutil.rmtree(root, ignore_errors=True)
        raise
    return server


BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgresql", id="postgresql", marks=pytest.mark.postgres),
]


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    bin_dir = find_bin_dir()
    if bin_dir is None:
        pytest.skip("no PostgreSQL binaries (initdb, pg_ctl) on PATH or in /usr/lib/postgresql/*/bin")
    if importlib.util.find_spec("psycopg") is None:
        pytest.skip("the psycopg driver is not installed (pip install -e '.[dev]' brings it)")
    server = start_server(bin_dir)
    try:
        yield server
    finally:
        try:
            server.stop()
        finally:
            shutil.rmtree(server.root, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_template(postgres_server: PostgresServer) -> str:
    """A database migrated to head once per session; tests get copies of it."""
    name = postgres_server.create_database()
    upgrade(postgres_server.url(name))
    return name


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sqlite-template") / "template.db"
    upgrade(f"sqlite:///{path}")
    return path


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def empty_url(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh database with no tables."""
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'empty.db'}"
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return server.url(server.create_database())


@pytest.fixture
def new_database(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], str]:
    """Makes fresh databases migrated to head, each a copy of the session's template."""

    def make() -> str:
        if backend == "sqlite":
            path = tmp_path / f"warpmap-{uuid.uuid4().hex[:8]}.db"
            shutil.copyfile(request.getfixturevalue("sqlite_template"), path)
            return f"sqlite:///{path}"
        server: PostgresServer = request.getfixturevalue("postgres_server")
        return server.url(server.create_database(template=request.getfixturevalue("postgres_template")))

    return make


@pytest.fixture
def url(new_database: Callable[[], str]) -> str:
    """A fresh database migrated to head."""
    return new_database()


@pytest.fixture
def engine(url: str) -> Iterator[Engine]:
    engine = create_engine_for(url)
    try:
        yield engine
    finally:
        engine.dispose()
