"""A content-addressed on-disk cache for build products, shared safely by concurrent processes.

Layout: ``<root>/v1/<key[:2]>/<key>.<digest>``, where ``digest`` is the first 16 hex digits of the
payload's sha256. The file holds the payload and nothing else, so a cached shared object can be
loaded in place (:meth:`DiskCache.path`). The digest in the name makes every read self-checking: a
file whose bytes no longer match its name (a torn write after a power loss, a stray edit) is deleted
and reported as a miss.

Writers never expose a partial entry: they write a hidden temporary file in the same directory and
``os.replace`` it onto the final name, which is atomic on POSIX. Readers ignore hidden files.

Eviction is least-recently-used by modification time: a hit touches the entry. A full directory scan
costs tens of milliseconds at tens of thousands of entries, so a cache keeps an estimate of the total
size (rescanned at least every ``rescan_seconds``, since other processes write too) and scans only when
the estimate passes ``max_bytes``; it then evicts down to ``low_water * max_bytes`` so that a full cache
does not rescan on every write.

Example::

    >>> import tempfile
    >>> cache = DiskCache(Path(tempfile.mkdtemp()), max_bytes=1 << 20)
    >>> key = cache_key("kernel source", "sm_80")
    >>> cache.put(key, b"\\x7fELF...").relative_to(cache.root)       # the digest names the payload
    PosixPath('v1/5e/5ef9...53ee3f.e7ebbbb47f821413')
    >>> cache.get(key), cache.get(cache_key("other source", "sm_80"))
    (b'\\x7fELF...', None)
    >>> shutil.rmtree(cache.root)
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

_LAYOUT = "v1"
_DIGEST_CHARS = 16
_KEY_RE = re.compile(r"[A-Za-z0-9_-]{1,200}")
_DIGEST_RE = re.compile(f"[0-9a-f]{{{_DIGEST_CHARS}}}")
_TEMP_PREFIX = ".tmp-"
#: Listings a lookup makes while the entries it lists are superseded under it (see ``_lookup``).
_LOOKUP_ATTEMPTS = 100
#: A temporary file older than this belongs to a writer that died; eviction removes it.
_STALE_TEMP_SECONDS = 3600.0


def default_cache_root(environ: Mapping[str, str] | None = None) -> Path:
    """Where warpmap caches build products: ``$WARPMAP_CACHE_DIR``, else ``$XDG_CACHE_HOME/warpmap``,
    else ``~/.cache/warpmap``. ``environ`` defaults to the process environment."""
    env = os.environ if environ is None else environ
    if env.get("WARPMAP_CACHE_DIR"):
        return Path(env["WARPMAP_CACHE_DIR"]).expanduser()
    if env.get("XDG_CACHE_HOME"):
        return Path(env["XDG_CACHE_HOME"]).expanduser() / "warpmap"
    return Path.home() / ".cache" / "warpmap"


def cache_key(*parts: object) -> str:
    """The sha256 hex digest of ``parts``, each encoded with its type and length so that different
    splits never collide: ``cache_key("ab", "c") != cache_key("a", "bc")``.

    Parts may be ``str``, ``bytes``, ``int``, ``float``, ``bool``, ``None`` or (nested) tuples/lists.
    """
    digest = hashlib.sha256()
    for chunk in _encode(parts):
        digest.update(chunk)
    return digest.hexdigest()


def _encode(part: object) -> Iterator[bytes]:
    if isinstance(part, tuple | list):
        yield b"T%d:" % len(part)
        for item in part:
            yield from _encode(item)
        return
    if isinstance(part, bytes):
        tag, body = b"b", part
    elif isinstance(part, str):
        tag, body = b"s", part.encode()
    elif part is None or isinstance(part, bool | int | float):
        tag, body = b"r", repr(part).encode()
    else:
        raise TypeError(f"cache_key: cannot hash a part of type {type(part).__name__}: {part!r}")
    yield tag + b"%d:" % len(body) + body


@dataclass(frozen=True)
class CacheStats:
    root: Path
    entries: int
    total_bytes: int
    max_bytes: int


@dataclass(frozen=True)
class _Entry:
    path: Path
    size: int
    mtime_ns: int


class DiskCache:
    """Byte payloads on disk by key, capped at ``max_bytes`` with least-recently-used eviction.

    Keys are 1–200 characters of ``[A-Za-z0-9_-]`` (a :func:`cache_key` digest fits). The entry just
    written is never evicted by its own ``put``, so one payload larger than the cap still lands.
    """

    def __init__(self, root: Path, max_bytes: int, *, low_water: float = 0.9, rescan_seconds: float = 30.0) -> None:
        if max_bytes <= 0:
            raise ValueError(f"DiskCache: max_bytes must be positive, got {max_bytes}")
        if not 0.0 < low_water <= 1.0:
            raise ValueError(f"DiskCache: low_water must be in (0, 1], got {low_water}")
        self.root = Path(root)
        self.max_bytes = max_bytes
        self.low_water = low_water
        self.rescan_seconds = rescan_seconds
        self._lock = threading.Lock()
        self._estimate: int | None = None
        self._scanned_at = 0.0

    def __reduce__(self) -> tuple[type[DiskCache], tuple[Path, int], dict[str, float]]:
        # Sent to worker processes by value; the size estimate is per process and starts afresh.
        return (
            DiskCache,
            (self.root, self.max_bytes),
            {"low_water": self.low_water, "rescan_seconds": self.rescan_seconds},
        )

    def __setstate__(self, state: dict[str, float]) -> None:
        self.low_water = state["low_water"]
        self.rescan_seconds = state["rescan_seconds"]

    def __repr__(self) -> str:
        return f"DiskCache({str(self.root)!r}, max_bytes={self.max_bytes})"

    # -- lookups --------------------------------------------------------------------------------

    def get(self, key: str) -> bytes | None:
        """The payload stored under ``key``, or None. A hit counts as a use for eviction."""
        found = self._lookup(key)
        return None if found is None else found[1]

    def path(self, key: str) -> Path | None:
        """The file holding ``key``'s payload (verified, touched), or None. The file may be evicted
        later by another writer; load it promptly."""
        found = self._lookup(key)
        return None if found is None else found[0]

    def _lookup(self, key: str) -> tuple[Path, bytes] | None:
        # A writer may supersede the listed payload between listing and reading; the newer one was
        # published before the older one was removed, so listing again finds it. A reader descheduled
        # between listing and reading can lose that race several times in a row while writers keep
        # replacing the key (three attempts lost it on a loaded 2-core machine with four writers), so
        # it lists again for as long as entries vanish, up to a bound that only endless rewriting of one
        # key could reach; a miss then costs a rebuild, never a wrong payload.
        for _ in range(_LOOKUP_ATTEMPTS):
            vanished = False
            for candidate in sorted(self._candidates(key), key=_mtime_ns, reverse=True):
                try:
                    data = candidate.read_bytes()
                except FileNotFoundError:
                    vanished = True
                    continue
                if _digest(data) != candidate.name.rsplit(".", 1)[1]:
                    _unlink(candidate)
                    continue
                _touch(candidate)
                return candidate, data
            if not vanished:
                break
        return None

    def _candidates(self, key: str) -> list[Path]:
        shard = self._shard(key)
        prefix = key + "."
        try:
            with os.scandir(shard) as listing:
                return [Path(e.path) for e in listing if e.name.startswith(prefix) and _is_entry_name(e.name)]
        except FileNotFoundError:
            return []

    # -- writes ---------------------------------------------------------------------------------

    def put(self, key: str, data: bytes) -> Path:
        """Store ``data`` under ``key`` (atomically) and return the entry's path."""
        shard = self._shard(key)
        final = shard / f"{key}.{_digest(data)}"
        if _size(final) == len(data) and final.exists():
            # Same key and digest already stored (a concurrent or repeated build): keep it. A torn
            # file of another size falls through and is replaced.
            _touch(final)
            return final
        temp = shard / f"{_TEMP_PREFIX}{os.getpid()}-{threading.get_ident()}-{os.urandom(4).hex()}"
        for attempt in range(2):
            # A concurrent clear() may remove the shard directory between mkdir and open: retry once.
            shard.mkdir(parents=True, exist_ok=True)
            try:
                with open(temp, "wb") as handle:
                    handle.write(data)
                # Stamp before publishing, so the entry never appears with a coarse timestamp that
                # could make a concurrent writer of the same key take it for an older payload.
                _touch(temp)
                os.replace(temp, final)
                break
            except FileNotFoundError:
                _unlink(temp)
                if attempt:
                    raise
            except BaseException:
                _unlink(temp)
                raise
        # Older payloads of the same key are superseded. Only strictly older ones: two writers of
        # different payloads racing on one key must not delete each other's entry.
        written = _mtime_ns(final)
        replaced = 0
        for stale in self._candidates(key):
            if stale != final and _mtime_ns(stale) < written:
                replaced += _size(stale)
                _unlink(stale)
        self._account(len(data) - replaced, keep=final)
        return final

    def clear(self) -> int:
        """Remove every entry and temporary file; return how many entries were removed."""
        with self._lock:
            removed = sum(1 for _ in self._scan())
            shutil.rmtree(self.root / _LAYOUT, ignore_errors=True)
            self._estimate, self._scanned_at = 0, time.monotonic()
        return removed

    def stats(self) -> CacheStats:
        entries = list(self._scan())
        return CacheStats(self.root, len(entries), sum(e.size for e in entries), self.max_bytes)

    # -- eviction -------------------------------------------------------------------------------

    def _account(self, added: int, *, keep: Path) -> None:
        with self._lock:
            stale = time.monotonic() - self._scanned_at > self.rescan_seconds
            if self._estimate is None or stale:
                self._estimate = sum(e.size for e in self._scan())
                self._scanned_at = time.monotonic()
            else:
                self._estimate += added
            if self._estimate > self.max_bytes:
                self._estimate = self._evict(keep)
                self._scanned_at = time.monotonic()

    def _evict(self, keep: Path) -> int:
        """Delete least-recently-used entries until the total is at most the low-water mark."""
        entries = sorted(self._scan(remove_stale_temps=True), key=lambda e: e.mtime_ns)
        total = sum(e.size for e in entries)
        target = int(self.max_bytes * self.low_water)
        for entry in entries:
            if total <= target:
                break
            if entry.path != keep and _unlink(entry.path):
                total -= entry.size
        return total

    def _scan(self, *, remove_stale_temps: bool = False) -> Iterator[_Entry]:
        base = self.root / _LAYOUT
        try:
            shards = [Path(e.path) for e in os.scandir(base) if e.is_dir(follow_symlinks=False)]
        except FileNotFoundError:
            return
        now = time.time()
        for shard in shards:
            try:
                listing = list(os.scandir(shard))
            except FileNotFoundError:
                continue
            for item in listing:
                try:
                    info = item.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if _is_entry_name(item.name):
                    yield _Entry(Path(item.path), info.st_size, info.st_mtime_ns)
                elif (
                    remove_stale_temps
                    and item.name.startswith(_TEMP_PREFIX)
                    and now - info.st_mtime > _STALE_TEMP_SECONDS
                ):
                    _unlink(Path(item.path))

    def _shard(self, key: str) -> Path:
        if not isinstance(key, str) or not _KEY_RE.fullmatch(key):
            raise ValueError(f"DiskCache: invalid key {key!r} (want 1-200 characters of [A-Za-z0-9_-])")
        return self.root / _LAYOUT / key[:2]


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:_DIGEST_CHARS]


def _is_entry_name(name: str) -> bool:
    key, dot, digest = name.rpartition(".")
    return bool(dot) and _DIGEST_RE.fullmatch(digest) is not None and _KEY_RE.fullmatch(key) is not None


def _touch(path: Path) -> None:
    # Explicit nanosecond times: the kernel's own file timestamps are coarse (a few ms), which would
    # make entries written in quick succession tie in the eviction order.
    now = time.time_ns()
    with contextlib.suppress(FileNotFoundError):
        os.utime(path, ns=(now, now))


def _mtime_ns(path: Path) -> int:
    try:
        return path.stat().st_mtime_ns
    except FileNotFoundError:
        return -1


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _unlink(path: Path) -> bool:
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True
