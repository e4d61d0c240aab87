from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from service.settings import Settings


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("WARPMAP_DATABASE_URL", "WARPMAP_ENVIRONMENT", "XDG_DATA_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


def test_default_database_is_sqlite_in_xdg_data_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    settings = Settings()
    assert settings.database_url == f"sqlite:///{tmp_path / 'xdg' / 'warpmap' / 'warpmap.db'}"
    assert settings.data_dir == tmp_path / "xdg" / "warpmap"


@pytest.mark.parametrize("xdg", [None, "", "relative/path"])
def test_without_a_usable_xdg_data_home_the_default_is_under_home(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, xdg: str | None
) -> None:
    if xdg is not None:
        monkeypatch.setenv("XDG_DATA_HOME", xdg)
    expected = tmp_path / "home" / ".local" / "share" / "warpmap" / "warpmap.db"
    assert Settings().database_url == f"sqlite:///{expected}"


def test_environment_variables_use_the_warpmap_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WARPMAP_DATABASE_URL", "postgresql+psycopg://warpmap@db:5432/warpmap")
    monkeypatch.setenv("WARPMAP_ENVIRONMENT", "production")
    monkeypatch.setenv("WARPMAP_MIGRATE_ON_START", "false")
    settings = Settings()
    assert settings.database_url == "postgresql+psycopg://warpmap@db:5432/warpmap"
    assert (settings.environment, settings.migrate_on_start) == ("production", False)


def test_bad_values_are_rejected_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WARPMAP_DATABASE_URL", "::nonsense::")
    with pytest.raises(ValidationError, match="'::nonsense::' is not a database URL"):
        Settings()
    monkeypatch.delenv("WARPMAP_DATABASE_URL")
    monkeypatch.setenv("WARPMAP_ENVIRONMENT", "staging")
    with pytest.raises(ValidationError, match="environment"):
        Settings()


def test_settings_are_immutable() -> None:
    settings = Settings(database_url="sqlite:///x.db")
    with pytest.raises(ValidationError):
        settings.database_url = "sqlite:///y.db"  # type: ignore[misc]
