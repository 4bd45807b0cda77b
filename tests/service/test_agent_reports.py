"""What agents report beyond exits: job output, current use, notices, GPU health."""

from __future__ import annotations

import base64
from typing import Any

from fastapi.testclient import TestClient

from tests.conftest import register_node, submit
from tests.service.test_lifecycle import GPU0, cycle


def chunk(stream: str, offset: int, data: bytes) -> dict[str, Any]:
    return {"stream": stream, "offset": offset, "data": base64.b64encode(data).decode()}


def report(job_id: int, state: str = "running", **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"job_id": job_id, "attempt": 1, "state": state, **extra}
    if state == "exited":
        body.update(finished_at="2026-12-02T10:00:00+00:00", exit_code=0, outcome="succeeded")
    return body


def beat(
    client: TestClient, node: int, attempts: list[dict[str, Any]], **gpu: Any
) -> dict[str, Any]:
    body = {"gpus": [{"uuid": GPU0, "memory_used_mib": 0, **gpu}], "attempts": attempts}
    response = client.post(f"/v1/nodes/{node}/heartbeat", json=body)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def placed_job(client: TestClient) -> tuple[int, int]:
    node = register_node(client, "n1", [("Tesla T4", 15360)])
    job = submit(client, memory_mib=1000)
    cycle(client)
    beat(client, node, [])
    return node, int(job["id"])


def test_logs_are_kept_once_and_read_back_in_pages(client: TestClient) -> None:
    node, job = placed_job(client)
    reply = beat(client, node, [report(job, logs=[chunk("stdout", 0, b"hello ")])])
    assert reply["log_offsets"] == [{"job_id": job, "attempt": 1, "stdout": 6, "stderr": 0}]
    # a re-sent chunk overlapping what is held adds only its new part
    logs = [chunk("stdout", 0, b"hello world\n"), chunk("stderr", 0, "é!".encode())]
    reply = beat(client, node, [report(job, logs=logs)])
    assert reply["log_offsets"][0]["stdout"] == 12 and reply["log_offsets"][0]["stderr"] == 3
    page = client.get(f"/v1/jobs/{job}/logs").json()
    assert page["text"] == "hello world\n" and page["end_offset"] == 12
    assert client.get(f"/v1/jobs/{job}/logs", params={"stream": "stderr"}).json()["text"] == "é!"
    # pages never split a character
    first = client.get(f"/v1/jobs/{job}/logs", params={"stream": "stderr", "limit": 1}).json()
    assert first["text"] == "é" and first["next_offset"] == 2
    # output after the exit still arrives, and the exit is acknowledged each time
    tail = [chunk("stdout", 12, b"bye\n")]
    reply = beat(client, node, [report(job, "exited", logs=tail)])
    assert reply["acknowledged"] == [{"job_id": job, "attempt": 1}]
    reply = beat(client, node, [report(job, "exited", logs=[chunk("stdout", 16, b"!")])])
    assert reply["log_offsets"][0]["stdout"] == 17
    page = client.get(f"/v1/jobs/{job}/logs").json()
    assert page["text"] == "hello world\nbye\n!" and page["attempt_state"] == "succeeded"


def test_only_the_newest_output_is_kept(make_client: Any) -> None:
    client = make_client(log_keep_bytes=64 * 1024)
    node, job = placed_job(client)
    block = 40 * 1024
    for i in range(4):
        data = bytes([65 + i]) * block
        beat(client, node, [report(job, logs=[chunk("stdout", i * block, data)])])
    page = client.get(f"/v1/jobs/{job}/logs", params={"offset": 0}).json()
    assert page["first_offset"] == 3 * block and page["text"] == "D" * block
    # an agent that skipped ahead leaves a gap; pages stop at it
    beat(client, node, [report(job, logs=[chunk("stdout", 10 * block, b"Z")])])
    page = client.get(f"/v1/jobs/{job}/logs", params={"offset": 3 * block}).json()
    assert page["next_offset"] == 4 * block
    after = client.get(f"/v1/jobs/{job}/logs", params={"offset": page["next_offset"]})
    assert after.json()["text"] == "Z" and after.json()["offset"] == 10 * block


def test_bad_log_requests_and_chunks_are_4xx(client: TestClient) -> None:
    node, job = placed_job(client)
    assert client.get(f"/v1/jobs/{job}/logs", params={"attempt": 9}).status_code == 404
    assert client.get(f"/v1/jobs/{job}/logs", params={"stream": "x"}).status_code == 422
    waiting = submit(client, memory_mib=1000)  # not placed yet: no attempt, no output
    assert client.get(f"/v1/jobs/{waiting['id']}/logs").status_code == 404
    bad = {"stream": "stdout", "offset": 0, "data": "***not base64***"}
    body = {"gpus": [], "attempts": [report(job, logs=[bad])]}
    assert client.post(f"/v1/nodes/{node}/heartbeat", json=body).status_code == 422
    huge = chunk("stdout", 0, b"x" * (256 * 1024 + 1))
    body = {"gpus": [], "attempts": [report(job, logs=[huge])]}
    assert client.post(f"/v1/nodes/{node}/heartbeat", json=body).status_code == 422
    assert client.get(f"/v1/jobs/{job}/logs").json()["end_offset"] == 0


def test_current_use_and_notices_once(client: TestClient) -> None:
    node, job = placed_job(client)
    notice = {
        "seq": 1,
        "kind": "over_reservation",
        "gpu_uuid": GPU0,
        "used_mib": 1500,
        "reserved_mib": 1000,
        "action": "warn",
        "message": "over its reservation: used 1500 MiB",
    }
    attempt = report(job, current_mib_by_gpu={GPU0: 1500}, notices=[notice])
    beat(client, node, [attempt])
    beat(client, node, [attempt])  # the reply was lost: the agent sends it again
    shown = client.get(f"/v1/jobs/{job}").json()
    assert shown["attempts"][0]["gpus"][0]["used_mib"] == 1500
    events = client.get("/v1/admin/events", params={"job_id": job}).json()
    kinds = [e["kind"] for e in events["events"]]
    assert kinds.count("job.over_reservation") == 1


def test_health_changes_are_events_and_unhealthy_gpus_get_nothing(client: TestClient) -> None:
    node = register_node(client, "n1", [("Tesla T4", 15360)])
    beat(client, node, [], healthy=False, health_reason="XID 79", temperature_c=50.0)
    submit(client, memory_mib=1000)
    cycle(client)
    assert beat(client, node, [], healthy=False, health_reason="XID 79")["assignments"] == []
    gpu = client.get("/v1/admin/cluster").json()["nodes"][0]["gpus"][0]
    assert gpu["healthy"] is False and gpu["health_reason"] == "XID 79"
    assert gpu["temperature_c"] is None  # the latest reading had none
    beat(client, node, [])
    cycle(client)
    assert len(beat(client, node, [])["assignments"]) == 1
    events = client.get("/v1/admin/events").json()["events"]
    changes = [e for e in events if e["kind"].startswith("gpu.")]
    assert [e["kind"] for e in changes] == ["gpu.unhealthy", "gpu.healthy"]
    assert "XID 79" in changes[0]["message"]


def test_unknown_readings_are_kept_unknown_and_count_against_the_gpu(client: TestClient) -> None:
    node = register_node(client, "n1", [("Tesla T4", 15360)] * 2)
    job = submit(client, memory_mib=1000)
    cycle(client)
    (assignment,) = beat(client, node, [])["assignments"]
    (given,) = assignment["gpu_uuids"]
    (other,) = {"GPU-n1-0", "GPU-n1-1"} - {given}

    def send(readings: dict[str, dict[str, Any]], **attempt: Any) -> dict[str, dict[str, Any]]:
        gpus = [{"uuid": uuid, **reading} for uuid, reading in readings.items()]
        body = {"gpus": gpus, "attempts": [report(job["id"], **attempt)]}
        response = client.post(f"/v1/nodes/{node}/heartbeat", json=body)
        assert response.status_code == 200, response.text
        nodes = client.get("/v1/admin/cluster").json()["nodes"]
        return {gpu["uuid"]: gpu for gpu in nodes[0]["gpus"]}

    # the job holds memory the driver cannot measure on a GPU it was not given, and a
    # foreign process there cannot be measured either: all of that GPU's use is foreign
    shown = send(
        {
            given: {"memory_used_mib": 1000, "utilization_pct": None},
            other: {"memory_used_mib": 3000, "memory_foreign_mib": None},
        },
        unassigned_mib_by_gpu={other: None},
    )
    assert shown[other]["memory_foreign_mib"] == 3000
    assert shown[given]["utilization_pct"] is None and shown[given]["memory_foreign_mib"] == 0
    # a GPU whose use cannot be read is kept unknown, and is not free at all
    shown = send({given: {"memory_used_mib": 1000}, other: {"memory_used_mib": None}})
    assert shown[other]["memory_used_mib"] is None
    assert shown[other]["memory_foreign_mib"] == 15360 and shown[other]["memory_free_mib"] == 0
