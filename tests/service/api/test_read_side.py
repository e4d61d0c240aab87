"""The read-side storage functions the API uses: batched hit counts, batched key uses, counted filters."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from db.api_keys import authenticate_api_key, create_api_key, find_api_key, list_api_keys, touch_api_keys
from db.cache import KernelFilter, count_kernels, evict, list_kernels
from db.repository import add_kernel_hits, get_kernel


def test_hit_batches_add_up_and_skip_evicted_kernels(api: Any) -> None:
    first = api.store(api.matmul)
    second = api.store({**api.matmul, "m": 2})
    at = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    api.db(add_kernel_hits, hits={first: 3, second: 1}, at=at)
    api.db(add_kernel_hits, hits={first: 4})
    assert api.db(get_kernel, kernel_id=first).hits == 7
    assert api.db(get_kernel, kernel_id=second).last_hit_at == at
    api.db(evict, max_bytes=0)
    api.db(add_kernel_hits, hits={first: 1, second: 1})  # both gone: nothing to count, no error
    assert api.db(list_kernels) == []


def test_key_uses_are_read_free_and_batched_and_never_go_back(api: Any) -> None:
    token, key = api.db(create_api_key, name="k", scopes=["read"])
    assert api.db(find_api_key, token=token).id == key.id
    assert api.db(find_api_key, token=token + "x") is None
    assert {k.id: k.last_used_at for k in api.db(list_api_keys)}[key.id] is None  # finding wrote nothing
    late = datetime(2026, 12, 2, 1, 0, tzinfo=UTC)
    api.db(touch_api_keys, used={key.id: late})
    api.db(touch_api_keys, used={key.id: late - timedelta(hours=1), 999: late})
    assert {k.id: k.last_used_at for k in api.db(list_api_keys)}[key.id] == late
    assert api.db(authenticate_api_key, token=token) is not None  # the old, writing path still works


def test_counted_filters_match_the_listing(api: Any) -> None:
    for m in (1, 2, 3):
        api.store({**api.matmul, "m": m})
    api.store({**api.matmul, "m": 2, "dtype": "bfloat16"})
    for where in (KernelFilter(), KernelFilter(dims=(("m", 2),)), KernelFilter(dtype="bfloat16"),
                  KernelFilter(op="softmax"), KernelFilter(dims=(("m", 2), ("n", 129)), dtype="float32")):
        assert api.db(count_kernels, where=where) == len(api.db(list_kernels, where=where))
    assert api.db(count_kernels, where=KernelFilter(dims=(("m", 2),))) == 2
    assert len(api.db(list_kernels, limit=2, offset=3)) == 1
