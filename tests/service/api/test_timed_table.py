"""The API's short-lived tables: one load for many concurrent askers, stale values while one reloads."""

from __future__ import annotations

import asyncio

import pytest

from service.api.state import TimedTable


def test_concurrent_askers_share_one_load_and_an_expired_value_is_served_while_one_reloads() -> None:
    loads: list[int] = []
    release = asyncio.Event()

    async def load() -> int:
        loads.append(len(loads))
        await release.wait()
        return len(loads) * 10

    async def scenario() -> None:
        table = TimedTable(ttl_s=60.0)
        first = [asyncio.ensure_future(table.fetch("k", load)) for _ in range(20)]
        await asyncio.sleep(0)
        release.set()
        assert await asyncio.gather(*first) == [10] * 20 and len(loads) == 1
        assert await table.fetch("k", load) == 10 and len(loads) == 1  # remembered
        table.entries["k"] = (0.0, 10)  # expired
        release.clear()
        stale = await asyncio.gather(*(table.fetch("k", load) for _ in range(20)))
        assert stale == [10] * 20 and len(loads) == 2  # every asker answered at once, one reload started
        release.set()
        await asyncio.sleep(0.01)
        assert await table.fetch("k", load) == 20 and len(loads) == 2

    asyncio.run(scenario())


def test_values_not_kept_drop_the_entry_failures_reach_the_askers_and_no_ttl_always_loads() -> None:
    async def scenario() -> None:
        table = TimedTable(ttl_s=60.0)
        assert await table.fetch("k", _value(None), keep=lambda v: v is not None) is None
        assert "k" not in table.entries
        table.put("k", 5)
        table.entries["k"] = (0.0, 5)
        assert await table.fetch("k", _value(None), keep=lambda v: v is not None) == 5  # stale while reloading
        await asyncio.sleep(0.01)
        assert "k" not in table.entries  # the reload found nothing: the old entry is gone
        with pytest.raises(RuntimeError, match="database away"):
            await table.fetch("other", _failing())
        assert not table.loading
        counted: list[int] = []

        async def count() -> int:
            counted.append(1)
            return 1

        none = TimedTable(ttl_s=0.0)
        await asyncio.gather(*(none.fetch("k", count) for _ in range(5)))
        assert len(counted) == 5

    asyncio.run(scenario())


def _value(value: object):
    async def load() -> object:
        return value

    return load


def _failing():
    async def load() -> object:
        raise RuntimeError("database away")

    return load
