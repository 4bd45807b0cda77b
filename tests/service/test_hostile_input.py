"""Hostile and malformed input: clear 4xx answers, never a 5xx, and state untouched."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from agent.protocol import EARLIEST, LATEST, AttemptReport
from tests.conftest import register_node, submit
from tests.service.test_lifecycle import GPU0, beat, cycle, exited, job_of, running

LIMIT = 64 * 1024


def error_code(response: Any) -> str:
    code: str = response.json()["error"]["code"]
    return code


def test_bodies_over_the_limit_are_refused(make_client: Any) -> None:
    client = make_client(max_body_bytes=LIMIT)
    huge = {"name": "x", "command": ["a" * 4000] * 20}  # 80 KB
    response = client.post("/v1/jobs", json=huge)
    assert response.status_code == 413 and error_code(response) == "http_413"

    def chunks() -> Iterator[bytes]:  # no Content-Length: the body is counted as it comes
        yield b'{"name": "x", "command": ['
        for _ in range(40):
            yield b'"' + b"a" * 4000 + b'",'
        yield b'"end"]}'

    response = client.post(
        "/v1/jobs", content=chunks(), headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 413 and error_code(response) == "http_413"
    bad_length = client.post(
        "/v1/jobs",
        content=b"{}",
        headers={"Content-Length": "-1", "Content-Type": "application/json"},
    )
    assert bad_length.status_code in (400, 413)
    assert client.get("/v1/jobs").json()["total"] == 0
    assert client.post("/v1/jobs", json={"name": "ok", "command": ["true"]}).status_code == 201


def test_malformed_bodies_are_client_errors(client: TestClient) -> None:
    json_type = {"Content-Type": "application/json"}
    for content in (
        b"{not json",
        b"\xff\xfe\x00",
        b"[" * 100_000 + b"]" * 100_000,  # deeper than any parser should follow
        b'{"name": "x", "command": ["a"], "unknown_field": 1}',
        b'{"name": "../../etc", "command": ["a"]}',
        b'{"name": "x", "command": []}',
        b'{"name": "x", "command": ["a"], "gpus": 100000}',
        b'{"name": "x", "command": ["a"], "env": {"BAD NAME": "1"}}',
        b'{"name": "x", "command": ["a"], "memory_mib": -5}',
        b'{"name": "x", "command": ["a"], "training": {"model": {"catalog": 7}}}',
        b"null",
    ):
        response = client.post("/v1/jobs", content=content, headers=json_type)
        assert 400 <= response.status_code < 500, (content[:60], response.status_code)
        assert "error" in response.json()
    form = client.post("/v1/jobs", data={"name": "x"})  # not JSON at all
    assert 400 <= form.status_code < 500
    long_key = client.post(
        "/v1/jobs", json={"name": "x", "command": ["a"]}, headers={"Idempotency-Key": "k" * 500}
    )
    assert long_key.status_code == 422
    assert client.get("/v1/jobs").json()["total"] == 0
    # a NUL character: PostgreSQL's text columns hold none, so agents' strings lose theirs
    # (on both databases alike); JSON (where a job's command lives) holds it on both
    gpu = {"uuid": "GPU-\x00", "index": 0, "model": "Tesla T4", "memory_total_mib": 15360}
    node = {"name": "n9", "agent_version": "t\x00", "gpus": [gpu]}
    assert client.post("/v1/nodes/register", json=node).status_code == 200
    uuids = [g["uuid"] for n in client.get("/v1/admin/cluster").json()["nodes"] for g in n["gpus"]]
    assert uuids == ["GPU-"]
    assert client.post("/v1/jobs", json={"name": "x", "command": ["a\x00"]}).status_code == 201


def test_malformed_heartbeats_do_not_touch_gpu_state(client: TestClient) -> None:
    node = register_node(client, "n1", [("Tesla T4", 15360)])
    beat(client, node, used=1000)
    before = client.get("/v1/admin/cluster").json()
    bad_bodies: list[dict[str, Any]] = [
        {"gpus": [{"uuid": GPU0, "memory_used_mib": -1}], "attempts": []},
        {"gpus": [{"uuid": GPU0, "memory_used_mib": 10, "extra": 1}], "attempts": []},
        {"gpus": [{"uuid": "GPU-elsewhere", "memory_used_mib": 10}], "attempts": []},
        {"gpus": [{"uuid": GPU0}, {"uuid": GPU0}], "attempts": []},
        {"gpus": [{"uuid": GPU0}], "attempts": []},  # its use must be stated, if only as null
        {"gpus": [{"uuid": GPU0, "utilization_pct": 1e9}], "attempts": []},
        {"gpus": [{"uuid": GPU0, "memory_used_mib": 10}], "attempts": [{"job_id": 0}]},
        {"gpus": [{"uuid": GPU0, "memory_used_mib": 10}] * 100, "attempts": []},
        {"gpus": "all", "attempts": []},
    ]
    for body in bad_bodies:
        response = client.post(f"/v1/nodes/{node}/heartbeat", json=body)
        assert 400 <= response.status_code < 500, (body, response.text)
    assert client.get("/v1/admin/cluster").json() == before
    # readings beyond the GPU are kept within it
    beat(client, node, used=99_999)
    (gpu,) = client.get("/v1/admin/cluster").json()["nodes"][0]["gpus"]
    assert gpu["memory_used_mib"] == 15360 and gpu["memory_free_mib"] >= 0


@pytest.mark.parametrize("when", ["0001-01-01T00:00:00+14:00", "9999-12-31T23:00:00-14:00"])
def test_a_report_time_beyond_what_can_be_stored_is_clamped(client: TestClient, when: str) -> None:
    """Aware, yet before year 1 or after 9999 once in UTC: clamped, never a 5xx, as the
    agent would send the same report on every heartbeat until it is taken."""
    assert AttemptReport.model_validate({**running(1), "started_at": when}).started_at in (
        EARLIEST,
        LATEST,
    )
    node = register_node(client, "n1", [("Tesla T4", 15360)])
    job = submit(client, memory_mib=1000)["id"]
    cycle(client)
    beat(client, node, [{**running(job), "started_at": when}])
    beat(client, node, [{**exited(job), "started_at": when, "finished_at": when}])
    assert job_of(client, job)["state"] == "succeeded"


def test_the_same_idempotency_key_never_makes_two_jobs(client: TestClient) -> None:
    register_node(client, "n1", [("Tesla T4", 15360)])
    key = {"Idempotency-Key": "retry-1"}
    first = client.post("/v1/jobs", json={"name": "x", "command": ["a"]}, headers=key)
    again = client.post("/v1/jobs", json={"name": "x", "command": ["a"]}, headers=key)
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["id"] == again.json()["id"]
    other = client.post("/v1/jobs", json={"name": "y", "command": ["a"]}, headers=key)
    assert other.status_code == 409 and error_code(other) == "idempotency_conflict"
    assert client.get("/v1/jobs").json()["total"] == 1
    submit(client, name="z")
    assert client.get("/v1/jobs").json()["total"] == 2
