"""The admin queries: job, event, utilisation and estimator-accuracy filters."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import update

from service.db import transaction
from service.jobs.models import Job
from service.usage.service import take_sample
from tests.conftest import register_node, submit
from tests.service.test_lifecycle import GPU0, beat, cycle, exited, running
from tests.service.test_scheduling import RESNET

T4 = "Tesla T4"
A100 = "NVIDIA A100-SXM4-40GB"


def set_owner(client: TestClient, job_id: int, owner: str) -> None:
    with transaction(client.app.state.sessions) as session:  # type: ignore[attr-defined]
        session.execute(update(Job).where(Job.id == job_id).values(owner=owner))


def ids(client: TestClient, path: str, **params: Any) -> list[int]:
    response = client.get(path, params=params)
    assert response.status_code == 200, response.text
    body = response.json()
    rows = body["jobs"] if "jobs" in body else body["events"]
    return [row["id"] for row in rows]


def test_job_filters_page_and_count(client: TestClient) -> None:
    node = register_node(client, "n1", [(T4, 15360)])
    register_node(client, "n2", [(A100, 40960)])
    on_t4 = submit(client, memory_mib=1000, gpu_models=["T4"])["id"]
    waiting = submit(client, memory_mib=30000, queue="big")["id"]
    cycle(client)
    set_owner(client, waiting, "ana")
    beat(client, node, [exited(on_t4, peak=900)])
    assert ids(client, "/v1/admin/jobs", state="succeeded") == [on_t4]
    assert ids(client, "/v1/admin/jobs", gpu_model="T4") == [on_t4]  # ran on a T4
    assert ids(client, "/v1/admin/jobs", gpu_model=A100) == [waiting]
    assert ids(client, "/v1/admin/jobs", queue="big", owner="ana") == [waiting]
    assert ids(client, "/v1/admin/jobs", owner="bob") == []
    page = client.get("/v1/admin/jobs", params={"limit": 1, "offset": 1}).json()
    assert page["total"] == 2 and [j["id"] for j in page["jobs"]] == [on_t4]
    now = datetime.now(UTC)
    assert ids(client, "/v1/admin/jobs", since=(now - timedelta(minutes=1)).isoformat()) == [
        waiting,
        on_t4,
    ]
    assert ids(client, "/v1/admin/jobs", until=(now - timedelta(minutes=1)).isoformat()) == []
    # the user-facing list takes the same filters
    assert ids(client, "/v1/jobs", state="placed") == [waiting]


def test_bad_filters_are_client_errors(client: TestClient) -> None:
    for params in (
        {"state": "sleeping"},
        {"since": "2026-12-01T10:00:00"},  # no time zone
        {"since": "2026-12-02T00:00:00Z", "until": "2026-12-01T00:00:00Z"},
        {"limit": 0},
        {"queue": "q" * 65},
    ):
        response = client.get("/v1/admin/jobs", params=params)
        assert response.status_code == 422, (params, response.text)
        assert response.json()["error"]["code"] in ("validation_error", "invalid_time_range")
    for path, params in (
        ("/v1/admin/events", {"order": "sideways"}),
        ("/v1/admin/utilization", {"group_by": "node"}),
        ("/v1/admin/utilization", {"step_s": -1}),
        ("/v1/admin/estimator", {"points": 10**6}),
    ):
        assert client.get(path, params=params).status_code == 422, (path, params)


def test_events_filter_order_and_total(client: TestClient) -> None:
    register_node(client, "n1", [(T4, 15360)])
    first = submit(client, memory_mib=1000)["id"]
    second = submit(client, memory_mib=1000)["id"]
    set_owner(client, second, "ana")
    cycle(client)
    placed = client.get("/v1/admin/events", params={"kind": "job.placed"}).json()
    assert placed["total"] == 2 and [e["job_id"] for e in placed["events"]] == [first, second]
    newest = client.get("/v1/admin/events", params={"order": "newest", "limit": 1}).json()
    everything = client.get("/v1/admin/events").json()
    assert newest["total"] == everything["total"] == len(everything["events"])
    assert newest["events"][0]["id"] == everything["events"][-1]["id"]
    mine = client.get("/v1/admin/events", params={"owner": "ana"}).json()["events"]
    assert {e["job_id"] for e in mine} == {second} and len(mine) == 2
    after = everything["events"][1]["id"]
    rest = client.get("/v1/admin/events", params={"after_id": after}).json()["events"]
    assert [e["id"] for e in rest] == [e["id"] for e in everything["events"][2:]]
    later = (datetime.now(UTC) + timedelta(seconds=5)).isoformat()
    assert client.get("/v1/admin/events", params={"since": later}).json()["total"] == 0
    # times at datetime's edges (year 0 or 10000 once in UTC) are answered, not a 500
    for edge in ("0001-01-01T00:00:00+00:01", "9999-12-31T23:59:00-00:01"):
        for name in ("since", "until"):
            for path in ("/v1/admin/events", "/v1/admin/jobs", "/v1/admin/utilization"):
                response = client.get(path, params={name: edge})
                assert response.status_code == 200, (path, name, edge, response.text)
    first_day = client.get("/v1/admin/events", params={"since": "0001-01-01T00:00:00+00:01"})
    assert first_day.json()["total"] == everything["total"]


def test_utilization_per_gpu_model_and_per_user(client: TestClient) -> None:
    node = register_node(client, "n1", [(T4, 15360)])
    register_node(client, "n2", [(A100, 40960)])
    mine = submit(client, memory_mib=4000, gpu_models=["T4"])["id"]
    theirs = submit(client, memory_mib=6000, gpu_models=["T4"])["id"]
    set_owner(client, theirs, "ana")
    cycle(client)
    now_using = [
        running(mine) | {"current_mib_by_gpu": {GPU0: 3000}},
        running(theirs) | {"current_mib_by_gpu": {GPU0: 5000}},
    ]
    beat(client, node, now_using, used=8000)
    # a day ago on the hour: whole steps, within the samples the server keeps
    start = (datetime.now(UTC) - timedelta(days=1)).replace(minute=0, second=0, microsecond=0)
    with transaction(client.app.state.sessions) as session:  # type: ignore[attr-defined]
        for minute in range(4):
            take_sample(session, start + timedelta(minutes=minute))
    window = {"since": start.isoformat(), "until": (start + timedelta(minutes=4)).isoformat()}
    by_model = client.get("/v1/admin/utilization", params={**window, "step_s": 120}).json()
    series = {s["key"]: s["points"] for s in by_model["series"]}
    assert set(series) == {T4, A100} and by_model["step_s"] == 120
    t4 = series[T4]
    steps = [start + timedelta(minutes=m) for m in (0, 2)]
    assert [p["at"] for p in t4] == [at.isoformat().replace("+00:00", "Z") for at in steps]
    assert t4[0] | {"at": None} == {
        "at": None,
        "gpus": 1,
        "capacity_mib": 15360,
        "reserved_mib": 10000,
        "used_mib": 8000,
        "foreign_mib": 0,
    }
    assert series[A100][0]["reserved_mib"] == 0 and series[A100][0]["capacity_mib"] == 40960
    per_user = client.get("/v1/admin/utilization", params={**window, "group_by": "owner"}).json()
    users = {s["key"]: s["points"] for s in per_user["series"]}
    assert set(users) == {"admin", "ana"} and len(users["ana"]) == 4  # one per sample
    assert users["ana"][0]["reserved_mib"] == 6000 and users["ana"][0]["used_mib"] == 5000
    # once her job has ended she reserves nothing: her series drops to zero
    beat(client, node, [exited(theirs, peak=5000)])
    with transaction(client.app.state.sessions) as session:  # type: ignore[attr-defined]
        take_sample(session, start + timedelta(minutes=4))
    longer = {**window, "until": (start + timedelta(minutes=5)).isoformat(), "group_by": "owner"}
    users = {
        s["key"]: s["points"]
        for s in client.get("/v1/admin/utilization", params=longer).json()["series"]
    }
    assert [p["reserved_mib"] for p in users["ana"]] == [6000, 6000, 6000, 6000, 0]
    ana_on_a100 = client.get(
        "/v1/admin/utilization",
        params={**window, "group_by": "owner", "gpu_model": "A100-40GB"},
    ).json()
    assert ana_on_a100["series"] == []
    # with no range the last hour is read
    with transaction(client.app.state.sessions) as session:  # type: ignore[attr-defined]
        take_sample(session, datetime.now(UTC) - timedelta(minutes=59))
    recent = client.get("/v1/admin/utilization").json()
    assert {s["key"] for s in recent["series"]} == {T4, A100}


def test_the_server_samples_usage_on_its_own(make_client: Any) -> None:
    client = make_client(usage_sample_interval_s=0.2)
    register_node(client, "n1", [(T4, 15360)])
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        series = client.get("/v1/admin/utilization").json()["series"]
        if series and len(series[0]["points"]) >= 2:
            break
        time.sleep(0.2)
    assert series[0]["key"] == T4 and series[0]["points"][-1]["capacity_mib"] == 15360


def test_estimator_accuracy_per_gpu_model(client: TestClient) -> None:
    node = register_node(client, "n1", [(T4, 15360)])
    low = submit(client, training=RESNET, gpu_models=["T4"])
    high = submit(client, training=RESNET, gpu_models=["T4"])
    set_owner(client, high["id"], "ana")
    (estimate,) = low["estimates"]
    over = estimate["upper_mib"] + 100  # above the reserved bound: an under-estimate
    for job, peak in ((low, estimate["peak_mib"] // 2), (high, over)):
        cycle(client)  # one at a time: the T4 holds one of them
        beat(client, node, [exited(job["id"], peak=peak)])
    body = client.get("/v1/admin/estimator").json()
    assert body["active"] == "packaged"
    (t4,) = body["accuracy"]
    ratios = [(estimate["peak_mib"] // 2) / estimate["peak_mib"], over / estimate["peak_mib"]]
    assert t4["gpu_model"] == T4 and t4["observations"] == 2 and t4["underestimates"] == 1
    assert t4["underestimate_share"] == 0.5
    assert abs(t4["mean_ratio"] - sum(ratios) / 2) < 1e-6
    counts = {b["le"]: b["count"] for b in t4["ratio_buckets"]}
    assert counts[0.5] == 1 and counts[2.0] == 2
    assert [p["job_id"] for p in body["points"]] == [high["id"], low["id"]]
    assert body["points"][0] | {"at": None} == {
        "job_id": high["id"],
        "attempt": 1,
        "gpu_model": T4,
        "observed_mib": over,
        "peak_mib": estimate["peak_mib"],
        "upper_mib": estimate["upper_mib"],
        "model_version": estimate["model_version"],
        "at": None,
    }
    anas = client.get("/v1/admin/estimator", params={"owner": "ana", "points": 0}).json()
    assert anas["accuracy"][0]["observations"] == 1 and anas["points"] == []
    assert (
        client.get("/v1/admin/estimator", params={"gpu_model": "A100-40GB"}).json()["accuracy"]
        == []
    )


def test_cluster_of_one_gpu_model(client: TestClient) -> None:
    register_node(client, "n1", [(T4, 15360)])
    register_node(client, "n2", [(A100, 40960), (T4, 15360)])
    job = submit(client, memory_mib=1000, gpu_models=["T4"])
    cycle(client)
    nodes = client.get("/v1/admin/cluster", params={"gpu_model": "T4"}).json()["nodes"]
    assert [(n["name"], [g["model"] for g in n["gpus"]]) for n in nodes] == [
        ("n1", [T4]),
        ("n2", [T4]),
    ]
    (allocation,) = [a for n in nodes for g in n["gpus"] for a in g["allocations"]]
    assert allocation["job_id"] == job["id"] and allocation["owner"] == "admin"
    assert allocation["job_name"] == "job" and allocation["reserved_mib"] == 1000
