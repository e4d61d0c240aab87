"""``warpmap db``: through ``service.cli.main`` with a temporary SQLite database."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from db.migrate import head_revision, revisions
from service.cli import main


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'nested' / 'folder' / 'warpmap.db'}"


def test_upgrade_current_downgrade(db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["db", "current", "--database-url", db_url]) == 0
    assert "empty" in capsys.readouterr().out
    assert main(["db", "upgrade", "--database-url", db_url]) == 0
    assert f"{head_revision()} (head)" in capsys.readouterr().out
    assert main(["db", "downgrade", "-1", "--yes", "--database-url", db_url]) == 0
    assert f"{revisions()[-2]} (behind head" in capsys.readouterr().out
    assert main(["db", "current", "--database-url", db_url]) == 0
    assert "run `warpmap db upgrade`" in capsys.readouterr().out
    assert main(["db", "downgrade", "base", "--yes", "--database-url", db_url]) == 0
    assert "empty" in capsys.readouterr().out
    assert main(["db", "upgrade", "0001", "--database-url", db_url]) == 0
    assert "0001 (behind head" in capsys.readouterr().out


def test_url_from_environment(
    db_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("WARPMAP_DATABASE_URL", db_url)
    assert main(["db", "upgrade"]) == 0
    assert db_url in capsys.readouterr().out


def test_default_url_is_in_the_user_data_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("WARPMAP_DATABASE_URL", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert main(["db", "upgrade"]) == 0
    assert (tmp_path / "data" / "warpmap" / "warpmap.db").is_file()
    assert str(tmp_path / "data" / "warpmap" / "warpmap.db") in capsys.readouterr().out


def test_unknown_revision_is_exit_2(db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["db", "upgrade", "nosuch", "--database-url", db_url]) == 2
    err = capsys.readouterr().err
    assert "'nosuch'" in err and "Traceback" not in err


def test_bad_url_is_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["db", "current", "--database-url", "::not a url::"]) == 2
    assert "is not a database URL" in capsys.readouterr().err


def test_unreachable_server_is_exit_2_without_the_password(capsys: pytest.CaptureFixture[str]) -> None:
    url = "postgresql+psycopg://warpmap:hunter2@127.0.0.1:1/warpmap?connect_timeout=2"
    assert main(["db", "upgrade", "--database-url", url]) == 2
    err = capsys.readouterr().err
    assert "unavailable" in err and "hunter2" not in err and "Traceback" not in err


def test_downgrade_needs_a_revision(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["db", "downgrade"])
    assert exited.value.code == 2
    assert "revision" in capsys.readouterr().err


def test_downgrade_without_a_terminal_needs_yes(db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["db", "upgrade", "--database-url", db_url]) == 0
    capsys.readouterr()
    assert main(["db", "downgrade", "base", "--database-url", db_url]) == 2  # pytest's stdin is no tty
    err = capsys.readouterr().err
    assert "drops tables and the data in them; pass --yes" in err and "Traceback" not in err
    assert main(["db", "current", "--database-url", db_url]) == 0
    assert f"{head_revision()} (head)" in capsys.readouterr().out


def test_downgrade_asks_on_a_terminal(db_url: str, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["db", "upgrade", "--database-url", db_url]) == 0
    monkeypatch.setattr("sys.stdin.isatty", lambda: True)
    monkeypatch.setattr("builtins.input", lambda _prompt: "no")
    assert main(["db", "downgrade", "base", "--database-url", db_url]) == 2
    assert "cancelled" in capsys.readouterr().err
    monkeypatch.setattr("builtins.input", lambda _prompt: "yes")
    assert main(["db", "downgrade", "base", "--database-url", db_url]) == 0
    assert "empty" in capsys.readouterr().out


def test_migrations_leave_no_lock_file_behind(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'warpmap.db'}"
    assert main(["db", "upgrade", "--database-url", url]) == 0
    assert main(["db", "downgrade", "-1", "--yes", "--database-url", url]) == 0
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("warpmap.db")) == []


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A loopback port that accepts connections and never says a word: a hung database server."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    stop.set()
    thread.join()
    for connection in accepted:
        connection.close()
    listener.close()


@pytest.mark.parametrize("argv", [["db", "current"], ["cache", "ls"]])
def test_a_server_that_never_answers_fails_within_the_connect_timeout(
    silent_server: int, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    monkeypatch.setenv("WARPMAP_DATABASE_CONNECT_TIMEOUT_S", "2")
    url = f"postgresql+psycopg://warpmap:hunter2@127.0.0.1:{silent_server}/warpmap"
    start = time.monotonic()
    assert main([*argv, "--database-url", url]) == 2
    assert time.monotonic() - start < 15
    err = capsys.readouterr().err
    assert f"127.0.0.1:{silent_server}/warpmap" in err and "unavailable" in err
    assert "hunter2" not in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
