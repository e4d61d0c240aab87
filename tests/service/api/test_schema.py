"""Schemathesis against the OpenAPI schema, in process: no 5xx, every status and body as documented.

Generated requests (valid and invalid ones) go to every operation of an app on a real SQLite
database with a registered cpu worker and a cached kernel, authenticated with an admin key (and, in
schemathesis's own negative cases, without one). The example count is kept small so the whole run
stays within about a minute of CI time.

``positive_data_acceptance`` is left out on purpose: requests the schema allows can still be refused
by what the schema cannot know (no worker serves ``cuda``, a spec over the byte bound, an unknown id),
and those refusals are documented 4xx answers, which the other checks hold to the schema.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.specs.openapi import checks

CHECKS = [
    schemathesis.checks.not_a_server_error,
    checks.status_code_conformance,
    checks.content_type_conformance,
    checks.response_schema_conformance,
    checks.negative_data_rejection,
]


@pytest.fixture
def app_schema(make_api: Any) -> Iterator[Any]:
    api = make_api()
    api.store(api.matmul)
    api.store({"op": "softmax", "rows": 4096, "cols": 1000})
    app = api.new_app(api_max_trials=50, api_max_wait_s=0.5)
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    yield schema, api, app
    # Schemathesis calls the app without its lifespan, so its engines are closed here.
    app.state.api.engine.dispose()
    app.state.api.reader.dispose()


def _headers_mutated(case: Any) -> bool:
    components = getattr(case.meta, "components", {}) if case.meta is not None else {}
    return any(str(getattr(where, "value", where)) == "header" and info.mode is GenerationMode.NEGATIVE
               for where, info in components.items())


# SQLite only: the schema is the same on both databases, and PostgreSQL is exercised by the other tests.
@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_every_operation_answers_as_documented(app_schema: tuple[Any, Any, Any]) -> None:
    schema, api, app = app_schema
    failures: list[str] = []
    seen: Counter[int] = Counter()
    for result in schema.get_all_operations():
        operation = result.ok()
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

            @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), database=None)
            @given(case=operation.as_strategy(generation_mode=mode))
            def run(case: Any) -> None:
                # A case whose headers were made invalid (Authorization left out, say) is sent as it is.
                headers = None if _headers_mutated(case) else api.headers("admin")
                seen[case.call_and_validate(headers=headers, checks=CHECKS).status_code] += 1

            try:
                run()
            except Unsatisfiable:
                assert mode is GenerationMode.NEGATIVE  # an operation without inputs has no invalid request
            except Exception as exc:  # collect every operation's failure, not only the first
                failures.append(f"{operation.method.upper()} {operation.path} ({mode.value}): {exc}")
    assert not failures, "\n\n".join(failures)
    # Random specs rarely pass every bound and have a template for their dtype on the cpu: one request
    # that does, so that a queued job (202) is always among the answers checked.
    from fastapi.testclient import TestClient

    queued = TestClient(app).post("/v1/tunings", json={"operator": {**api.matmul, "m": 7}}, headers=api.headers())
    seen[queued.status_code] += 1
    # The run reached past validation: hits, jobs, lookups and refusals all answered.
    assert {200, 202, 404, 422} <= set(seen), seen
