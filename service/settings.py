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

    # The HTTP API (service/api).
    #: Serve the read endpoints (tunings, trials, kernels, lookups, devices) without a key. Writes always need one.
    api_open_reads: bool = False
    #: The largest request body accepted; larger ones get 413 before they are read whole.
    api_max_body_bytes: int = Field(default=64 * 1024, ge=1024)
    #: The most bytes an operator's tensors may take together (its ``min_bytes``): bigger specs get 422.
    api_max_spec_bytes: int = Field(default=8 * 1024**3, ge=1)
    #: The largest budget any key may ask for; a key's own limits (``warpmap keys create --max-trials``) can
    #: only lower these. A request without ``seconds`` gets this many.
    api_max_trials: int = Field(default=2000, ge=1)
    api_max_seconds: float = Field(default=24 * 3600.0, gt=0, allow_inf_nan=False)
    #: The longest ``?wait=`` a request may hold its connection.
    api_max_wait_s: float = Field(default=600.0, ge=0, allow_inf_nan=False)
    #: How often a waiting request reads its job again.
    api_wait_poll_s: float = Field(default=0.25, gt=0, allow_inf_nan=False)
    #: How often counted cache hits and key uses are written to the database (one batch each time).
    api_flush_s: float = Field(default=2.0, gt=0, allow_inf_nan=False)
    #: How long an API key lookup is reused: a revoked key stops working within this time.
    api_key_cache_s: float = Field(default=5.0, ge=0, allow_inf_nan=False)
    #: How long the list of registered workers is reused when a request picks a device.
    api_worker_cache_s: float = Field(default=2.0, ge=0, allow_inf_nan=False)
    #: How long a cache hit is answered from this process's memory before the database is asked again: a
    #: faster kernel saved meanwhile is served within this time. 0 reads the database for every lookup.
    api_hit_cache_s: float = Field(default=1.0, ge=0, allow_inf_nan=False)
    #: A worker is alive when its last heartbeat is this recent.
    api_worker_alive_s: float = Field(default=30.0, gt=0, allow_inf_nan=False)
    #: The targets ``/readyz`` requires a live worker for; empty: every target a registered worker serves.
    api_targets: tuple[str, ...] = ()
    #: The measuring time-out each trial of a submitted job gets.
    api_trial_timeout_s: float = Field(default=120.0, gt=0, allow_inf_nan=False)

    # workers

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
