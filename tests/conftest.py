"""Session-wide isolation: tests write caches and databases only under their own temporary folders.

The caches (``$WARPMAP_CACHE_DIR``, ``$XDG_CACHE_HOME``) and the default database folder
(``$XDG_DATA_HOME``) point into the session's temporary folder, and a user's
``$WARPMAP_DATABASE_URL`` is hidden, so a test run never touches the user's compiled kernels or
tuning database. Everything that reads them does so when called, not at import, so setting them
here is early enough. Under pytest-xdist each worker process runs this fixture with its own folder.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

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
