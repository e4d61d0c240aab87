"""The one typed settings object, read from ``WARPMAP_*`` environment variables.

>>> Settings(database_url="sqlite:////tmp/x.db").database_url
'sqlite:////tmp/x.db'

With nothing set, the database is a SQLite file in the per-user data folder:
``$XDG_DATA_HOME/warpmap/warpmap.db``, or ``~/.local/share/warpmap/warpmap.db``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

Environment = Literal["development", "test", "production"]


class Settings(BaseSettings):
    """Service configuration; every field ``foo`` comes from ``WARPMAP_FOO`` unless given directly."""

    model_config = SettingsConfigDict(env_prefix="WARPMAP_", extra="ignore", frozen=True)

    environment: Environment = "development"
    #: SQLAlchemy URL: ``sqlite:///path`` or ``postgresql+psycopg://user@host:port/db``.
    database_url: str = ""
    database_echo: bool = False
    #: How long to wait for a PostgreSQL server to accept a connection (libpq rounds up, minimum 2 s).
    database_connect_timeout_s: float = Field(default=10.0, gt=0, allow_inf_nan=False)
    #: The longest one PostgreSQL statement may run; 0 for no limit.
    database_statement_timeout_s: float = Field(default=300.0, ge=0, allow_inf_nan=False)
    #: How long a SQLite writer waits for the file lock before giving up.
    sqlite_busy_timeout_s: float = Field(default=30.0, gt=0)
    #: Run ``warpmap db upgrade`` automatically when the service starts.
    migrate_on_start: bool = True
    #: The freedesktop data folder; not prefixed, it is the user's own setting.
    xdg_data_home: Path | None = Field(default=None, validation_alias="XDG_DATA_HOME")

    @field_validator("database_url")
    @classmethod
    def _valid_url(cls, value: str) -> str:
        if value:
            try:
                make_url(value)
            except ArgumentError as exc:
                raise ValueError(f"WARPMAP_DATABASE_URL {value!r} is not a database URL: {exc}") from exc
        return value

    @field_validator("xdg_data_home", mode="before")
    @classmethod
    def _absolute_or_none(cls, value: object) -> object:
        # The XDG spec says an empty or relative value is to be ignored.
        if value in (None, "") or not Path(str(value)).is_absolute():
            return None
        return value

    @model_validator(mode="before")
    @classmethod
    def _default_database(cls, data: Any) -> Any:
        if isinstance(data, dict) and not data.get("database_url"):
            xdg = data.get("XDG_DATA_HOME") or data.get("xdg_data_home")
            data = {**data, "database_url": f"sqlite:///{data_dir(xdg) / 'warpmap.db'}"}
        return data

    @property
    def data_dir(self) -> Path:
        """Per-user folder for warpmap's files."""
        return data_dir(self.xdg_data_home)

    # workers
    #: Seconds between a worker's heartbeats (``wm_workers`` and procrastinate's own).
    worker_heartbeat_s: float = Field(default=5.0, gt=0, allow_inf_nan=False)
    #: A cluster worker silent this long is taken for dead: its job is retried on another worker.
    worker_stalled_after_s: float = Field(default=30.0, gt=0, allow_inf_nan=False)
    #: How often each cluster worker looks for the jobs of dead workers.
    worker_stalled_check_s: float = Field(default=10.0, gt=0, allow_inf_nan=False)
    #: The longest a cluster worker waits between polls when no notification came.
    worker_poll_s: float = Field(default=5.0, gt=0, allow_inf_nan=False)
    #: How many workers of one device kind tune one job at once, sharing its study (PostgreSQL only).
    worker_study_parts: int = Field(default=1, ge=1, le=64)


def data_dir(xdg_data_home: str | Path | None) -> Path:
    """``$XDG_DATA_HOME/warpmap`` when that is an absolute path, else ``~/.local/share/warpmap``."""
    if xdg_data_home and Path(xdg_data_home).is_absolute():
        return Path(xdg_data_home) / "warpmap"
    return Path.home() / ".local" / "share" / "warpmap"
