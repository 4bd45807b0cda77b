"""`GET /metrics` parses as Prometheus text and says what the admin API says."""

from __future__ import annotations

import time
from typing import Any

from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from service.scheduler.states import JobState
from tests.conftest import register_node, submit
from tests.service.test_admin_queries import T4, set_owner
from tests.service.test_lifecycle import GPU0, beat, cycle, exited, running
from tests.service.test_scheduling import RESNET

MIB = 1024 * 1024
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(client: TestClient) -> Samples:
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=")
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


def admin_total(client: TestClient, path: str, **params: Any) -> int:
    total: int = client.get(path, params=params).json()["total"]
    return total


def test_metrics_match_the_admin_api(client: TestClient) -> None:
    node = register_node(client, "n1", [(T4, 15360)])
    trained = submit(client, training=RESNET, gpu_models=["T4"])["id"]
    cycle(client)
    beat(client, node, [exited(trained, peak=3000)])
    blocker = submit(client, memory_mib=12000)["id"]
    flaky = submit(client, memory_mib=2000)["id"]
    set_owner(client, flaky, "ana")
    cycle(client)  # both share the T4
    beat(client, node, [exited(flaky, code=1, outcome="oom", peak=2100)])
    beat(client, node, [exited(blocker, peak=11000)])
    cycle(client)  # the retry, with a larger reservation
    live = running(flaky, attempt=2) | {"current_mib_by_gpu": {GPU0: 2300}}
    beat(client, node, [live], used=3000)
    submit(client, memory_mib=14000)  # waits: the T4 is taken
    cancelled = submit(client, memory_mib=1000)["id"]
    client.post(f"/v1/jobs/{cancelled}/cancel")

    samples = scrape(client)
    (gpu,) = client.get("/v1/admin/cluster").json()["nodes"][0]["gpus"]
    labels = {"node": "n1", "gpu": "0", "uuid": GPU0, "model": T4}
    assert value(samples, "colloc_gpu_memory_total_bytes", **labels) == 15360 * MIB
    assert value(samples, "colloc_gpu_memory_reserved_bytes", **labels) == (
        gpu["memory_reserved_mib"] * MIB
    )
    assert value(samples, "colloc_gpu_memory_used_bytes", **labels) == 3000 * MIB
    assert value(samples, "colloc_gpu_memory_foreign_bytes", **labels) == (
        gpu["memory_foreign_mib"] * MIB
    )
    assert value(samples, "colloc_gpu_jobs", **labels) == len(gpu["allocations"]) == 1
    assert value(samples, "colloc_node_up", node="n1") == 1

    for state in JobState:
        expected = admin_total(client, "/v1/admin/jobs", state=state)
        assert value(samples, "colloc_jobs", state=state) == expected, state
    assert value(samples, "colloc_jobs", state="running") == 1

    jobs = client.get("/v1/admin/jobs").json()["jobs"]
    attempts = [a for job in jobs for a in job["attempts"]]
    assert value(samples, "colloc_placements_total") == len(attempts) == 4
    assert value(samples, "colloc_placements_total") == admin_total(
        client, "/v1/admin/events", kind="job.placed"
    )
    assert value(samples, "colloc_ooms_total") == admin_total(
        client, "/v1/admin/events", kind="job.oom"
    )
    assert value(samples, "colloc_ooms_total") == 1
    assert value(samples, "colloc_attempts_ended_total", outcome="succeeded") == 2
    assert value(samples, "colloc_retries_total", cause="oom") == 1

    estimator = client.get("/v1/admin/estimator").json()
    (accuracy,) = estimator["accuracy"]
    model = {"gpu_model": T4}
    assert value(samples, "colloc_estimator_peak_ratio_count", **model) == accuracy["observations"]
    assert (
        abs(
            value(samples, "colloc_estimator_peak_ratio_sum", **model)
            - accuracy["mean_ratio"] * accuracy["observations"]
        )
        < 1e-9
    )
    for bucket in accuracy["ratio_buckets"]:
        le = str(bucket["le"])
        assert (
            value(samples, "colloc_estimator_peak_ratio_bucket", le=le, **model) == bucket["count"]
        )
    assert (
        value(samples, "colloc_estimator_underestimates_total", **model)
        == (accuracy["underestimates"])
    )
    assert value(samples, "colloc_estimator_model_info", version=estimator["active"]) == 1

    # request latency is labelled by route template, not by the path with its ids
    template = {"method": "POST", "route": "/v1/jobs/{job_id}/cancel", "status": "200"}
    assert value(samples, "colloc_http_request_duration_seconds_count", **template) == 1
    client.get("/no/such/page")
    unmatched = {"method": "GET", "route": "unmatched", "status": "404"}
    assert value(scrape(client), "colloc_http_request_duration_seconds_count", **unmatched) == 1


def test_scheduling_cycles_are_timed(make_client: Any) -> None:
    client = make_client(scheduler_enabled=True, schedule_interval_s=0.05)
    deadline = time.monotonic() + 20
    count = 0.0
    while time.monotonic() < deadline and count < 3:
        count = value(scrape(client), "colloc_scheduling_cycle_duration_seconds_count")
        time.sleep(0.1)
    assert count >= 3
    samples = scrape(client)
    assert value(samples, "colloc_scheduling_cycle_duration_seconds_sum") > 0
