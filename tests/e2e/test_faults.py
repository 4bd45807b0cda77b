"""Faults a long-running cluster meets: the server killed with -9 in the middle of
placement cycles, an agent silent past its lease, the database going away under load.
After each, no job is lost or duplicated and every reservation adds up."""

from __future__ import annotations

import random
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from sqlalchemy.engine import make_url

from tests.e2e.harness import FINAL, LocalColloc, running, simjob

# longer than a server restart plus 2 heartbeats: agents fence their jobs (stop them)
# once unanswered that long, as they cannot tell a server outage from a partition
LEASE = {"COLLOC_NODE_LEASE_S": "10"}


@pytest.fixture
def colloc(tmp_path: Path, database_url: str) -> Iterator[LocalColloc]:
    with running(tmp_path, database_url, LEASE) as local:
        yield local


def submit(colloc: LocalColloc, name: str, mib: int, seconds: float, **spec: Any) -> int:
    body = {"name": name, "memory_mib": mib, "command": simjob(mib - 200, seconds, 0.2), **spec}
    response = colloc.http.post("/v1/jobs", json=body)
    assert response.status_code == 201, response.text
    return int(response.json()["id"])


def all_jobs(colloc: LocalColloc) -> list[dict[str, Any]]:
    jobs: list[dict[str, Any]] = colloc.http.get("/v1/admin/jobs", params={"limit": 1000}).json()[
        "jobs"
    ]
    return jobs


def check_reservations(colloc: LocalColloc) -> None:
    """Every GPU's reservations are its active attempts' and fit it; no job holds two."""
    active: dict[int, int] = {}
    for node in colloc.http.get("/v1/admin/cluster").json()["nodes"]:
        for gpu in node["gpus"]:
            held = sum(a["reserved_mib"] for a in gpu["allocations"])
            assert held == gpu["memory_reserved_mib"] <= gpu["memory_total_mib"], gpu
            for allocation in gpu["allocations"]:
                active.setdefault(allocation["job_id"], allocation["attempt"])
                assert active[allocation["job_id"]] == allocation["attempt"], allocation
    for job in all_jobs(colloc):
        live = [a for a in job["attempts"] if a["state"] in ("placed", "running")]
        assert len(live) <= 1, job


def wait_all_final(colloc: LocalColloc, timeout_s: float = 180) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            jobs = all_jobs(colloc)
            if all(job["state"] in FINAL for job in jobs):
                return jobs
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise AssertionError(
        "jobs never finished: "
        + str([(j["id"], j["state"]) for j in all_jobs(colloc) if j["state"] not in FINAL])
        + colloc.log("server")
    )


def test_server_killed_during_placement_cycles(colloc: LocalColloc) -> None:
    rng = random.Random(7)
    submitted = [
        submit(colloc, f"job-{i}", rng.choice([1500, 3000, 6000]), rng.uniform(0.5, 2.0))
        for i in range(40)
    ]
    for _ in range(3):  # cycles place every 0.3 s while the queue drains
        time.sleep(rng.uniform(0.5, 2.0))
        colloc.kill_server()
        colloc.start_server()
        check_reservations(colloc)
    jobs = wait_all_final(colloc)
    assert sorted(job["id"] for job in jobs) == sorted(submitted)  # none lost, none added
    for job in jobs:
        states = [a["state"] for a in job["attempts"]]
        assert job["state"] == "succeeded" and states.count("succeeded") == 1, job
    check_reservations(colloc)
    assert all(mib == 0 for mib in colloc.gpu_used_mib().values())
    submitted_events = colloc.http.get(
        "/v1/admin/events", params={"kind": "job.submitted", "limit": 1}
    ).json()["total"]
    assert submitted_events == len(submitted)


def test_agent_silent_past_its_lease(colloc: LocalColloc) -> None:
    job = submit(colloc, "survivor", 2000, 30)  # still running when its agent resumes
    first = colloc.wait_for(job, {"running"})["attempts"][0]
    silent = first["node"]
    agent = colloc.agents[silent]
    agent.send_signal(signal.SIGSTOP)  # alive but silent; its job goes on running
    try:
        moved = colloc.wait_until(
            job,
            lambda j: len(j["attempts"]) == 2 and j["attempts"][1]["state"] == "running",
            "ran again elsewhere",
            timeout_s=60,
        )
        assert moved["attempts"][0]["state"] == "lost"
        assert moved["attempts"][1]["node"] != silent
        nodes = {n["name"]: n for n in colloc.http.get("/v1/admin/cluster").json()["nodes"]}
        assert nodes[silent]["state"] == "lost"
    finally:
        agent.send_signal(signal.SIGCONT)
    deadline = time.monotonic() + 30
    while True:  # it reports again, and is told to stop the attempt that was given away
        nodes = {n["name"]: n for n in colloc.http.get("/v1/admin/cluster").json()["nodes"]}
        stale = sum(g["memory_used_mib"] for g in nodes[silent]["gpus"])
        if nodes[silent]["state"] == "ready" and stale == 0:
            break
        assert time.monotonic() < deadline, (nodes[silent], colloc.log(f"agent-{silent}"))
        time.sleep(0.3)
    done = colloc.wait_for(job, FINAL, timeout_s=60)
    assert done["state"] == "succeeded"
    assert [a["state"] for a in done["attempts"]] == ["lost", "succeeded"]
    kinds = [
        e["kind"]
        for e in colloc.http.get("/v1/admin/events", params={"limit": 1000}).json()["events"]
    ]
    assert "node.lost" in kinds and "node.recovered" in kinds
    check_reservations(colloc)


def _block_database(database_url: str, blocked: bool) -> None:
    """Close every connection to the test database and refuse (or allow) new ones, as a
    restart or fail-over of the database looks to its clients."""
    url = make_url(database_url)
    admin = url.set(drivername="postgresql", database="postgres").render_as_string(False)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(
            f'ALTER DATABASE "{url.database}" ALLOW_CONNECTIONS {str(not blocked).lower()}'
        )
        if blocked:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = %s AND pid <> pg_backend_pid()",
                (url.database,),
            )


def test_the_database_going_away_under_load(colloc: LocalColloc, database_url: str) -> None:
    if not database_url.startswith("postgresql"):
        pytest.skip("an outage of the PostgreSQL server; SQLite is a file in the process")
    stop = threading.Event()
    keys: list[str] = []
    statuses: list[int] = []

    def keep_submitting() -> None:
        """A client that retries each submission with its Idempotency-Key until answered."""
        client = httpx.Client(base_url=colloc.url, headers=colloc.http.headers, timeout=10)
        n = 0
        while not stop.is_set() and n < 60:
            key = f"load-{n}"
            body = {"name": key, "memory_mib": 1500, "command": simjob(1200, 0.5, 0.1)}
            while not stop.is_set():
                try:
                    response = client.post("/v1/jobs", json=body, headers={"Idempotency-Key": key})
                    statuses.append(response.status_code)
                    if response.status_code in (200, 201):
                        keys.append(key)
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.2)
            n += 1
            time.sleep(0.1)

    submitter = threading.Thread(target=keep_submitting)
    submitter.start()
    try:
        time.sleep(3)
        _block_database(database_url, blocked=True)
        time.sleep(6)  # longer than a heartbeat and several cycles, shorter than a lease
        _block_database(database_url, blocked=False)
        time.sleep(3)
    finally:
        _block_database(database_url, blocked=False)
        stop.set()
        submitter.join(timeout=60)
    assert colloc.server is not None and colloc.server.poll() is None  # never restarted
    assert 503 in statuses and not any(status >= 500 and status != 503 for status in statuses)
    jobs = wait_all_final(colloc)
    names = sorted(job["name"] for job in jobs)
    assert names == sorted(keys) and len(set(names)) == len(names)  # each once
    assert all(job["state"] == "succeeded" for job in jobs), [
        (j["id"], j["state"], j["reason"]) for j in jobs if j["state"] != "succeeded"
    ]
    check_reservations(colloc)
