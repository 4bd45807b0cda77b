"""Schemathesis against `/openapi.json`: generated requests to every operation, with an
admin token, find no 5xx and no response outside the documented schema."""

from __future__ import annotations

from typing import Any

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error, response_schema_conformance

from tests.conftest import bearer, register_node, submit

# This test looks for 5xx answers and answers outside the schema, not for slow ones
# (timing never decides a test). Schemathesis's default 10 s read timeout failed one
# CI run on a 404 heartbeat that took longer once and answered at once on its replay
# (cause not found); a request that hangs for good still fails, after this long.
HUNG_S = 60


@pytest.fixture
def api_schema(client: TestClient) -> Any:
    # something to find: a node, a job placed on it, and one waiting
    register_node(client, "n1", [("Tesla T4", 15360)])
    submit(client, memory_mib=1000)
    loaded = schemathesis.openapi.from_asgi("/openapi.json", client.app)
    # valid requests, and requests that break the schema on purpose; the same ones each
    # run, so CI is repeatable (a random run found the NUL-character 500 fixed since)
    loaded.config.generation.update(
        modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE],
        database="none",
        deterministic=True,
    )
    return loaded


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_server_errors_and_no_schema_violations(case: Any, admin_token: str) -> None:
    case.call_and_validate(
        headers=bearer(admin_token),
        checks=[not_a_server_error, response_schema_conformance],
        timeout=HUNG_S,
    )
