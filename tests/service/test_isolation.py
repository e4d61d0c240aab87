"""The test session writes caches and databases only under its own temporary folder (tests/conftest.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from compiler.backends.emu.build import EmuConfig
from compiler.diskcache import default_cache_root
from service.settings import Settings


def test_caches_and_the_default_database_are_in_the_session_folder(tmp_path_factory: pytest.TempPathFactory) -> None:
    base = tmp_path_factory.getbasetemp().resolve()
    for name in ("WARPMAP_CACHE_DIR", "XDG_CACHE_HOME", "XDG_DATA_HOME"):
        assert Path(os.environ[name]).resolve().is_relative_to(base), name
    assert default_cache_root().resolve().is_relative_to(base)
    assert EmuConfig.default().cache_dir.resolve().is_relative_to(base)
    assert "WARPMAP_DATABASE_URL" not in os.environ
    assert Settings().data_dir.resolve().is_relative_to(base)
