from __future__ import annotations

import itertools
import multiprocessing
import os
import pickle
import time
from multiprocessing.synchronize import Event
from pathlib import Path

import pytest

from compiler.diskcache import DiskCache, cache_key, default_cache_root


def _payload(seed: int, size: int) -> bytes:
    return bytes((seed * 31 + i * 7) % 251 for i in range(size))


def test_miss_then_hit(tmp_path: Path) -> None:
    cache = DiskCache(tmp_path, max_bytes=1 << 20)
    key = cache_key("source", "sm_80")
    assert cache.get(key) is None
    assert cache.path(key) is None
    data = _payload(1, 1000)
    stored = cache.put(key, data)
    assert stored.read_bytes() == data
    assert cache.get(key) == data
    assert cache.path(key) == stored
    # A second instance on the same root sees the entry: nothing lives only in memory.
    assert DiskCache(tmp_path, max_bytes=1 << 20).get(key) == data


def test_put_overwrites_with_new_payload(tmp_path: Path) -> None:
    cache = DiskCache(tmp_path, max_bytes=1 << 20)
    cache.put("k1", b"first")
    cache.put("k1", b"second")
    assert cache.get("k1") == b"second"
    assert cache.stats().entries == 1


def test_empty_payload_is_a_hit(tmp_path: Path) -> None:
    cache = DiskCache(tmp_path, max_bytes=100)
    cache.put("empty", b"")
    assert cache.get("empty") == b""


def test_lru_eviction_order(tmp_path: Path) -> None:
    cache = DiskCache(tmp_path, max_bytes=300, low_water=1.0)
    for name in ("a", "b", "c"):
        cache.put(name, _payload(ord(name), 100))
    assert cache.stats().total_bytes == 300
    assert cache.get("a") is not None  # use order now: b, c, a
    cache.put("d", _payload(4, 100))  # over the cap: b, the least recently used, goes
    assert cache.path("b") is None
    assert cache.path("c") is not None  # use order now: a, d, c
    cache.put("e", _payload(5, 100))
    assert cache.path("a") is None
    cache.put("f", _payload(6, 150))  # 150 over: d and c go, in that order, and nothing more
    assert [cache.get(k) is not None for k in "cdef"] == [False, False, True, True]
    assert cache.stats().total_bytes == 250


def test_low_water_evicts_below_the_cap(tmp_path: Path) -> None:
    cache = DiskCache(tmp_path, max_bytes=1000, low_water=0.5)
    for i in range(10):
        cache.put(f"k{i}", _payload(i, 100))
    assert cache.stats().total_bytes == 1000
    cache.put("k10", _payload(10, 100))
    stats = cache.stats()
    assert stats.total_bytes <= 500
    assert cache.get("k10") is not None
    assert cache.get("k0") is None


def test_oversized_entry_still_lands(tmp_path: Path) -> None:
    cache = DiskCache(tmp_path, max_bytes=100)
    cache.put("small", b"x" * 50)
    cache.put("huge", b"y" * 500)
    assert cache.get("huge") == b"y" * 500
    assert cache.get("small") is None


def test_stats_and_clear(tmp_path: Path) -> None:
    cache = DiskCache(tmp_path, max_bytes=10_000)
    assert cache.stats().entries == 0
    for i in range(5):
        cache.put(f"key{i}", _payload(i, 10 * (i + 1)))
    stats = cache.stats()
    assert (stats.entries, stats.total_bytes, stats.max_bytes, stats.root) == (5, 150, 10_000, tmp_path)
    assert cache.clear() == 5
    assert cache.stats().entries == 0
    assert cache.get("key0") is None
    cache.put("again", b"data")  # usable after clear
    assert cache.get("again") == b"data"


def test_corrupt_entry_is_a_miss_and_removed(tmp_path: Path) -> None:
    cache = DiskCache(tmp_path, max_bytes=10_000)
    path = cache.put("victim", _payload(9, 200))
    path.write_bytes(_payload(9, 120))  # torn write: a prefix of the payload
    assert cache.get("victim") is None
    assert not path.exists()
    assert cache.path("victim") is None


def test_partial_and_stray_files_are_ignored(tmp_path: Path) -> None:
    cache = DiskCache(tmp_path, max_bytes=10_000)
    cache.put("good", b"payload")
    shard = cache.path("good").parent  # type: ignore[union-attr]
    (shard / ".tmp-999-1-deadbeef").write_bytes(b"half a pay")  # a writer that died
    (shard / "good.nothex").write_bytes(b"junk")
    (shard / "good").write_bytes(b"junk")
    assert cache.get("good") == b"payload"
    assert cache.stats().entries == 1
    assert cache.stats().total_bytes == len(b"payload")


def test_stale_temp_files_are_removed_on_eviction(tmp_path: Path) -> None:
    cache = DiskCache(tmp_path, max_bytes=100, low_water=1.0)
    cache.put("aa1", b"x" * 60)
    shard = tmp_path / "v1" / "aa"
    stale = shard / ".tmp-1-1-00000000"
    fresh = shard / ".tmp-2-2-00000000"
    stale.write_bytes(b"old")
    fresh.write_bytes(b"new")
    old = time.time() - 2 * 3600
    os.utime(stale, (old, old))
    cache.put("aa2", b"y" * 60)  # over the cap: triggers a scan
    assert not stale.exists()
    assert fresh.exists()  # may belong to a live writer


@pytest.mark.parametrize("key", ["", "a/b", "../x", "with space", "dot.ted", "x" * 201])
def test_invalid_keys_are_rejected(tmp_path: Path, key: str) -> None:
    cache = DiskCache(tmp_path, max_bytes=100)
    with pytest.raises(ValueError, match="invalid key"):
        cache.get(key)
    with pytest.raises(ValueError, match="invalid key"):
        cache.put(key, b"x")


def test_bad_configuration(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="max_bytes"):
        DiskCache(tmp_path, max_bytes=0)
    with pytest.raises(ValueError, match="low_water"):
        DiskCache(tmp_path, max_bytes=10, low_water=1.5)


def test_cache_key() -> None:
    assert cache_key("ab", "c") != cache_key("a", "bc")
    assert cache_key("x", 1) != cache_key("x", "1")
    assert cache_key(b"x") != cache_key("x")
    assert cache_key(("a", "b")) != cache_key("a", "b")
    assert cache_key("src", ("-O3",), None) == cache_key("src", ["-O3"], None)
    key = cache_key("anything")
    assert len(key) == 64 and int(key, 16) >= 0
    with pytest.raises(TypeError, match="object"):
        cache_key(object())


def test_default_cache_root() -> None:
    assert default_cache_root({"WARPMAP_CACHE_DIR": "/srv/c", "XDG_CACHE_HOME": "/x"}) == Path("/srv/c")
    assert default_cache_root({"XDG_CACHE_HOME": "/x"}) == Path("/x/warpmap")
    assert default_cache_root({}) == Path.home() / ".cache" / "warpmap"


def test_pickles_for_worker_processes(tmp_path: Path) -> None:
    cache = DiskCache(tmp_path, max_bytes=1234, low_water=0.7, rescan_seconds=5.0)
    cache.put("k", b"v")
    copy = pickle.loads(pickle.dumps(cache))
    assert (copy.root, copy.max_bytes, copy.low_water, copy.rescan_seconds) == (tmp_path, 1234, 0.7, 5.0)
    assert copy.get("k") == b"v"


def test_entry_is_invisible_until_published(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = DiskCache(tmp_path, max_bytes=1 << 20)
    data = _payload(7, 50_000)
    published: list[Path] = []
    real_replace = os.replace

    def checked_replace(source: str | Path, target: str | Path) -> None:
        # The moment before publication: the whole payload is written, and no reader can see it.
        assert Path(source).read_bytes() == data
        assert Path(source).name.startswith(".")
        assert cache.get("fresh") is None and cache.path("fresh") is None
        assert cache.stats().entries == 0
        real_replace(source, target)
        published.append(Path(target))

    monkeypatch.setattr("compiler.diskcache.os.replace", checked_replace)
    path = cache.put("fresh", data)
    assert published == [path]
    assert cache.get("fresh") == data


def test_put_repairs_a_torn_entry(tmp_path: Path) -> None:
    cache = DiskCache(tmp_path, max_bytes=10_000)
    data = _payload(3, 300)
    path = cache.put("torn", data)
    path.write_bytes(data[:100])
    assert cache.put("torn", data) == path
    assert path.read_bytes() == data
    assert cache.get("torn") == data


def test_newer_payload_supersedes_older(tmp_path: Path) -> None:
    cache = DiskCache(tmp_path, max_bytes=10_000)
    old = cache.put("key", b"old payload")
    new = cache.put("key", b"new payload")
    assert not old.exists() and new.exists()
    assert cache.get("key") == b"new payload"


def test_a_lookup_lists_again_for_as_long_as_listed_entries_vanish(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # A reader descheduled between listing and reading, again and again, while writers supersede the key:
    # each listing names only a payload that is gone by the time it is read.
    cache = DiskCache(tmp_path, max_bytes=1 << 20)
    final = cache.put("k", b"payload")
    superseded = final.with_name("k." + "0" * 16)
    listings: list[str] = []
    real = cache._candidates

    def racing(key: str) -> list[Path]:
        listings.append(key)
        return [superseded] if len(listings) <= 10 else real(key)

    monkeypatch.setattr(cache, "_candidates", racing)
    assert cache.get("k") == b"payload" and len(listings) == 11


# -- several processes at once -----------------------------------------------------------------

_KEYS = [f"shared{i}" for i in range(6)]
_WRITERS = 4
_ROUNDS = 3
_BIG = 128 * 1024


def _version(key_index: int, round_: int) -> bytes:
    return _payload(key_index * 10 + round_, _BIG)


def _own(worker: int, round_: int, key_index: int) -> tuple[str, bytes]:
    return f"own{worker}x{round_}x{key_index}", _payload(worker * 100 + round_ * 10 + key_index, 8192)


def _expected() -> dict[str, set[bytes]]:
    """Every key the writers store, with the payloads it may validly hold."""
    valid = {key: {_version(i, r) for r in range(_ROUNDS)} for i, key in enumerate(_KEYS)}
    for w, r, i in itertools.product(range(_WRITERS), range(_ROUNDS), range(len(_KEYS))):
        key, data = _own(w, r, i)
        valid[key] = {data}
    return valid


def _writer(root: str, worker: int) -> None:
    cache = DiskCache(Path(root), max_bytes=1 << 30)
    for r in range(_ROUNDS):
        for i, key in enumerate(_KEYS):
            # Every writer replaces the shared keys round after round, racing the others and the reader.
            cache.put(key, _version(i, (r + worker) % _ROUNDS))
            cache.put(*_own(worker, r, i))


def _reader(root: str, writers_done: Event, queue: multiprocessing.Queue) -> None:
    cache = DiskCache(Path(root), max_bytes=1 << 30)
    valid = _expected()
    seen = bad = lost = 0
    found: set[str] = set()
    last_pass = False
    while not last_pass:
        last_pass = writers_done.is_set()
        for key, versions in valid.items():
            got = cache.get(key)
            if got is None:
                lost += key in found  # once stored, a key stays readable (nothing is evicted here)
                continue
            found.add(key)
            seen += 1
            bad += got not in versions
    queue.put((seen, bad, lost))


def test_concurrent_writers_and_readers(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    writers_done = ctx.Event()
    writers = [ctx.Process(target=_writer, args=(str(tmp_path), w)) for w in range(_WRITERS)]
    reader = ctx.Process(target=_reader, args=(str(tmp_path), writers_done, queue))
    for proc in [reader, *writers]:
        proc.start()
    for proc in writers:
        proc.join(timeout=60)
        assert proc.exitcode == 0
    writers_done.set()
    seen, bad, lost = queue.get(timeout=60)
    reader.join(timeout=60)
    assert reader.exitcode == 0
    assert bad == 0  # never a partial or mixed payload
    assert lost == 0
    assert seen >= len(_expected())  # at least the pass after the writers finished found every key
    cache = DiskCache(tmp_path, max_bytes=1 << 30)
    for key, versions in _expected().items():
        assert cache.get(key) in versions, key  # the reader's checks deleted nothing in flight
    assert not list(tmp_path.rglob(".tmp-*"))
