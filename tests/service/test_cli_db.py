"""``warpmap db``: through ``service.cli.main`` with a temporary SQLite database."""

from __future__ import annotations

from pathlib import Path

import pytest

from db.migrate import head_revision
from service.cli import main


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'nested' / 'folder' / 'warpmap.db'}"


def test_upgrade_current_downgrade(db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["db", "current", "--database-url", db_url]) == 0
    assert "empty" in capsys.readouterr().out
    assert main(["db", "upgrade", "--database-url", db_url]) == 0
    assert f"{head_revision()} (head)" in capsys.readouterr().out
    assert main(["db", "downgrade", "-1", "--database-url", db_url]) == 0
    assert "0001 (behind head" in capsys.readouterr().out
    assert main(["db", "current", "--database-url", db_url]) == 0
    assert "run `warpmap db upgrade`" in capsys.readouterr().out
    assert main(["db", "downgrade", "base", "--database-url", db_url]) == 0
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
