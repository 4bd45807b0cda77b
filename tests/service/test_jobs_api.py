"""Submitting, listing and cancelling jobs, and the errors bad input gets."""

from __future__ import annotations

import json
import re

from fastapi.testclient import TestClient

from tests.conftest import register_node, submit


def test_submit_and_read_back(client: TestClient) -> None:
    register_node(client, "n1", [("Tesla T4", 15360)])
    job = submit(client, name="bert", gpu_models=["T4"], memory_mib=4000, env={"A": "1"})
    assert job["state"] == "pending" and job["gpu_models"] == ["Tesla T4"]
    assert client.get(f"/v1/jobs/{job['id']}").json()["name"] == "bert"
    listing = client.get("/v1/jobs").json()
    assert listing["total"] == 1 and listing["jobs"][0]["id"] == job["id"]
    events = client.get("/v1/admin/events", params={"job_id": job["id"]}).json()["events"]
    assert [e["kind"] for e in events] == ["job.submitted"]


def error_of(response: object) -> dict[str, object]:
    body = response.json()  # type: ignore[attr-defined]
    assert set(body) == {"error"}
    error: dict[str, object] = body["error"]
    assert isinstance(error["message"], str) and error["message"]
    return error


def test_bad_specs_get_clear_4xx_and_change_nothing(client: TestClient) -> None:
    register_node(client, "n1", [("Tesla T4", 15360), ("Tesla T4", 15360)])
    cases = [
        ({"name": "x", "command": ["true"], "gpus": 0}, 422, "validation_error"),
        ({"name": "x", "command": []}, 422, "validation_error"),
        ({"name": "bad name!", "command": ["true"]}, 422, "validation_error"),
        ({"name": "x", "command": ["true"], "surprise": 1}, 422, "validation_error"),
        ({"name": "x", "command": ["true"], "gpu_models": ["Z900"]}, 422, "unknown_gpu_model"),
        ({"name": "x", "command": ["true"], "memory_mib": 20000}, 422, "never_fits"),
        ({"name": "x", "command": ["true"], "gpus": 3}, 422, "never_fits"),
        (
            {"name": "x", "command": ["true"], "gpu_models": ["A100-40GB"]},
            422,
            "never_fits",
        ),
    ]
    for body, status, code in cases:
        response = client.post("/v1/jobs", json=body)
        assert response.status_code == status, (body, response.text)
        assert error_of(response)["code"] == code
    malformed = client.post(
        "/v1/jobs", content=b"{not json", headers={"Content-Type": "application/json"}
    )
    assert malformed.status_code == 422 and error_of(malformed)["code"] == "validation_error"
    assert client.get("/v1/jobs").json()["total"] == 0


def test_a_jobs_gpus_hold_its_training_split_or_a_share_of_it(client: TestClient) -> None:
    register_node(client, "n1", [("NVIDIA A100-SXM4-40GB", 40960)] * 4)
    training = {"model": {"catalog": "resnet50"}, "batch_size": 8, "parallelism": {"dp": 6}}
    four = client.post(
        "/v1/jobs", json={"name": "x", "command": ["true"], "gpus": 4, "training": training}
    )
    assert four.status_code == 422, four.text
    assert error_of(four)["message"] == (
        "invalid request: body: training.parallelism spans 6 GPUs (dp x tp x pp x cp), and "
        "the job's 4 GPUs do not divide it: set gpus to 6 or a divisor of it, or describe "
        "the job's own split"
    )
    assert client.get("/v1/jobs").json()["total"] == 0
    # the whole split, or one node's share of a larger one
    assert submit(client, gpus=4, training={**training, "parallelism": {"dp": 4}})["gpus"] == 4
    assert submit(client, gpus=3, training=training)["gpus"] == 3
    # one rank (the default split) is every GPU running the spec, as plain DDP does
    submit(client, gpus=4, training={**training, "parallelism": {}})


def test_unknown_gpu_model_error_lists_known_models(client: TestClient) -> None:
    register_node(client, "n1", [("Acme X1", 8000)])
    response = client.post("/v1/jobs", json={"name": "x", "command": ["a"], "gpu_models": ["Q"]})
    details = error_of(response)["details"]
    assert isinstance(details, dict)
    assert "Acme X1" in details["known"] and "Tesla T4" in details["known"]
    accepted = submit(client, gpu_models=["acme x1"])
    assert accepted["gpu_models"] == ["Acme X1"]


def test_idempotency_key_returns_the_first_job(client: TestClient) -> None:
    body = {"name": "x", "command": ["true"]}
    headers = {"Idempotency-Key": "abc"}
    first = client.post("/v1/jobs", json=body, headers=headers)
    again = client.post("/v1/jobs", json=body, headers=headers)
    assert first.status_code == 201 and again.status_code == 200
    assert first.json()["id"] == again.json()["id"]
    other = client.post("/v1/jobs", json={**body, "name": "y"}, headers=headers)
    assert other.status_code == 409 and error_of(other)["code"] == "idempotency_conflict"
    assert client.get("/v1/jobs").json()["total"] == 1


def test_cancel_pending_then_again(client: TestClient) -> None:
    job = submit(client)
    cancelled = client.post(f"/v1/jobs/{job['id']}/cancel")
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled"
    again = client.post(f"/v1/jobs/{job['id']}/cancel")
    assert again.status_code == 409 and error_of(again)["code"] == "already_finished"


def test_unknown_ids_and_routes_are_404_json(client: TestClient) -> None:
    for response in (
        client.get("/v1/jobs/999"),
        client.post("/v1/jobs/999/cancel"),
        client.get("/v1/nope"),
        client.post("/v1/nodes/999/heartbeat", json={"gpus": []}),
    ):
        assert response.status_code == 404 and error_of(response)["code"] == "not_found"


def test_listing_filters_and_pages(client: TestClient) -> None:
    ids = [submit(client, name=f"j{i}")["id"] for i in range(5)]
    client.post(f"/v1/jobs/{ids[0]}/cancel")
    page = client.get("/v1/jobs", params={"limit": 2, "offset": 1}).json()
    assert page["total"] == 5 and [j["id"] for j in page["jobs"]] == [ids[3], ids[2]]
    pending = client.get("/v1/admin/jobs", params={"state": "pending"}).json()
    assert pending["total"] == 4
    assert client.get("/v1/jobs", params={"limit": 0}).status_code == 422


def test_health_dashboard_and_openapi(client: TestClient) -> None:
    assert client.get("/healthz").json()["status"] == "ok"
    page = client.get("/")
    assert "Colloc" in page.text and page.headers["content-type"].startswith("text/html")
    assets = re.findall(r'(?:src|href)="(/static/[^"]+)"', page.text)
    assert sorted(assets) == ["/static/app.js", "/static/charts.js", "/static/style.css"]
    # the page's JavaScript lists states as the server defines them, before app.js runs
    assert page.text.index('src="/states.js"') < page.text.index('src="/static/app.js"')
    script = client.get("/states.js")
    assert script.headers["content-type"].startswith("text/javascript")
    lists = json.loads(script.text.removeprefix("const STATES = Object.freeze(").strip()[:-2])
    assert lists == {
        "job": [
            "pending",
            "placed",
            "running",
            "succeeded",
            "failed",
            "oom",
            "cancelled",
            "lost",
            "timeout",
        ],
        "jobEnded": ["succeeded", "failed", "oom", "cancelled", "lost", "timeout"],
        "attemptEnded": ["succeeded", "failed", "oom", "cancelled", "lost", "timeout", "preempted"],
    }
    for asset in assets:
        response = client.get(asset)
        assert response.status_code == 200, asset
        # vendored, never fetched from elsewhere: no absolute URL but the SVG namespace
        urls = set(re.findall(r"\w+://[^\s\"'`)]+", response.text))
        assert urls <= {"http://www.w3.org/2000/svg"}, (asset, urls)
    assert client.get("/static/../service/app.py").status_code == 404
    paths = client.get("/openapi.json").json()["paths"]
    for path in (
        "/v1/jobs",
        "/v1/jobs/{job_id}",
        "/v1/jobs/{job_id}/cancel",
        "/v1/nodes/register",
        "/v1/nodes/{node_id}/heartbeat",
        "/v1/admin/cluster",
        "/v1/admin/jobs",
        "/v1/admin/events",
        "/v1/admin/utilization",
        "/v1/admin/estimator",
        "/metrics",
    ):
        assert path in paths


def test_huge_ids_and_offsets_are_refused_not_passed_to_the_database(client: TestClient) -> None:
    huge = 10**20
    for response in (
        client.get(f"/v1/jobs/{huge}"),
        client.post(f"/v1/jobs/{huge}/cancel"),
        client.get(f"/v1/jobs/{huge}/explain"),
        client.get("/v1/jobs", params={"offset": huge}),
        client.get("/v1/admin/events", params={"after_id": huge}),
        client.get("/v1/admin/events", params={"job_id": huge}),
        client.post(f"/v1/nodes/{huge}/heartbeat", json={"gpus": []}),
        client.post(
            "/v1/nodes/1/heartbeat",
            json={"gpus": [], "attempts": [{"job_id": huge, "attempt": 1, "state": "running"}]},
        ),
        client.post(
            "/v1/nodes/1/heartbeat",
            json={
                "gpus": [],
                "attempts": [
                    {
                        "job_id": 1,
                        "attempt": 1,
                        "state": "running",
                        "started_at": "2026-01-01T00:00",
                    }
                ],
            },
        ),
    ):
        assert response.status_code == 422, response.text
        assert error_of(response)["code"] == "validation_error"
