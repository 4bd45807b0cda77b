"""Admin controls: nodes cordoned, drained (jobs requeued after a deadline) and resumed;
jobs held, released and requeued; time limits ending `timeout`; tokens over the API; and
the commands for each, through the app."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError
from sqlalchemy import select, update

from service.cli import build_parser, run_command
from service.config import Settings
from service.db import transaction, utcnow
from service.jobs.lifecycle import _agent_time, stop_overdue
from service.jobs.models import Attempt
from service.nodes.admin import enforce_drain_deadlines
from service.nodes.models import Node
from service.scheduling.loop import SchedulerLoop
from tests.conftest import bearer, make_token, register_node, submit
from tests.service.test_lifecycle import beat, cycle, exited, job_of, running, started_ago


def events(client: TestClient, kind: str) -> list[str]:
    found = client.get("/v1/admin/events", params={"kind": kind}).json()["events"]
    return [event["message"] for event in found]


def test_a_held_job_waits_until_released(client: TestClient, database_url: str) -> None:
    register_node(client, "n1", [("Tesla T4", 15360)])
    alice = bearer(make_token(database_url, "user", "alice"))
    bob = bearer(make_token(database_url, "user", "bob"))
    job = client.post(
        "/v1/jobs", json={"name": "j", "command": ["a"], "memory_mib": 1000}, headers=alice
    ).json()["id"]
    assert client.post(f"/v1/jobs/{job}/hold", headers=bob).status_code == 404  # not his
    held = client.post(f"/v1/jobs/{job}/hold", headers=alice).json()
    assert held["held"] and held["reason"] == "held by alice"
    cycle(client)
    assert job_of(client, job)["state"] == "pending"
    why = client.get(f"/v1/jobs/{job}/explain", headers=alice).json()["summary"]
    assert why == "held by alice: not scheduled until released"
    assert client.post(f"/v1/jobs/{job}/release", headers=alice).json()["held"] is False
    cycle(client)
    assert job_of(client, job)["state"] == "placed"
    assert client.post(f"/v1/jobs/{job}/hold", headers=alice).status_code == 409  # not pending
    assert events(client, "job.held") == ["held by alice"]
    assert events(client, "job.released") == ["released by alice"]


def test_requeue_stops_the_attempt_and_the_job_waits_again(client: TestClient) -> None:
    node = register_node(client, "n1", [("Tesla T4", 15360)])
    job = submit(client, memory_mib=1000, max_attempts=1)["id"]
    assert client.post(f"/v1/jobs/{job}/requeue").status_code == 409  # pending: nothing to stop
    cycle(client)
    beat(client, node)
    beat(client, node, [running(job)])
    assert client.post(f"/v1/jobs/{job}/requeue").status_code == 200
    reply = beat(client, node, [running(job)])
    assert reply["cancellations"] == [{"job_id": job, "attempt": 1}]
    beat(client, node, [exited(job, code=143)])
    after = job_of(client, job)
    assert after["state"] == "pending" and after["attempts"][0]["state"] == "preempted"
    cycle(client)  # a requeue spends no try: its one attempt is still to come
    assert job_of(client, job)["state"] == "placed"
    assert events(client, "job.requeue_requested") == ["requeued by admin"]


def test_a_cordoned_node_takes_no_new_jobs_until_resumed(client: TestClient) -> None:
    register_node(client, "n1", [("Tesla T4", 15360)])
    job = submit(client, memory_mib=1000)["id"]
    cordoned = client.post("/v1/nodes/n1/cordon").json()
    assert cordoned["admin_state"] == "cordoned"
    (shown,) = client.get("/v1/admin/cluster").json()["nodes"]  # as the dashboard reads it
    assert shown["admin_state"] == "cordoned" and shown["drain_deadline"] is None
    cycle(client)
    assert job_of(client, job)["state"] == "pending"
    assert client.post("/v1/nodes/n1/resume").json()["admin_state"] == "active"
    cycle(client)
    assert job_of(client, job)["state"] == "placed"
    assert client.post("/v1/nodes/nx/cordon").status_code == 404
    assert events(client, "node.cordoned") == ["node n1 cordoned by admin"]
    assert events(client, "node.active") == ["node n1 resumed by admin"]


def test_a_drained_nodes_job_is_requeued_after_the_deadline(client: TestClient) -> None:
    node = register_node(client, "n1", [("Tesla T4", 15360)])
    job = submit(client, memory_mib=1000)["id"]
    cycle(client)
    beat(client, node)
    beat(client, node, [running(job)])
    assert client.post("/v1/nodes/n1/drain", json={"deadline": "bad"}).status_code == 422
    drained = client.post("/v1/nodes/n1/drain", json={"deadline": "10m"}).json()
    assert drained["admin_state"] == "draining" and drained["drain_deadline"]
    later = submit(client, memory_mib=1000)["id"]
    cycle(client)
    assert job_of(client, later)["state"] == "pending"  # no new placements there
    sessions = client.app.state.sessions  # type: ignore[attr-defined]
    with transaction(sessions) as session:  # before the deadline its job runs on
        assert enforce_drain_deadlines(session=session, now=utcnow()) == []
    with transaction(sessions) as session:
        later_now = utcnow() + timedelta(minutes=10, seconds=1)
        assert enforce_drain_deadlines(session=session, now=later_now) == [job]
    reply = beat(client, node, [running(job)])
    assert reply["cancellations"] == [{"job_id": job, "attempt": 1}]
    beat(client, node, [exited(job, code=143)])
    assert job_of(client, job)["state"] == "pending"
    cycle(client)
    assert job_of(client, job)["state"] == "pending"  # still draining: nothing placed
    assert events(client, "node.drain_deadline") == [
        "node n1's drain deadline passed: 1 job(s) requeued"
    ]


def test_a_job_past_its_time_limit_is_stopped_and_ends_timeout(make_client: Any) -> None:
    client = make_client(queue_max_time_limit_s={"*": 7200})  # 2 h
    node = register_node(client, "n1", [("Tesla T4", 15360)])
    refused = client.post(
        "/v1/jobs", json={"name": "j", "command": ["a"], "memory_mib": 1000, "time_limit": "3h"}
    )
    assert refused.status_code == 422 and refused.json()["error"]["code"] == "time_limit_too_long"
    assert submit(client, memory_mib=1000)["time_limit_s"] == 7200  # the queue's maximum
    job = submit(client, memory_mib=1000, time_limit="1m", max_attempts=3)
    assert job["time_limit_s"] == 60
    cycle(client)
    beat(client, node)
    beat(client, node, [running(job["id"]), running(job["id"] - 1)])
    sessions = client.app.state.sessions
    with transaction(sessions) as session:
        started = session.scalar(select(Attempt.started_at).where(Attempt.job_id == job["id"]))
    assert started is not None
    with transaction(sessions) as session:
        assert stop_overdue(session=session, now=started + timedelta(seconds=59)) == []
    with transaction(sessions) as session:
        assert stop_overdue(session=session, now=started + timedelta(seconds=61)) == [job["id"]]
    reply = beat(client, node, [running(job["id"]), running(job["id"] - 1)])
    assert reply["cancellations"] == [{"job_id": job["id"], "attempt": 1}]
    beat(client, node, [exited(job["id"], code=143), running(job["id"] - 1)])
    ended = job_of(client, job["id"])
    assert ended["state"] == "timeout" and ended["attempts"][0]["state"] == "timeout"
    cycle(client)  # not retried, attempts left or not
    assert len(job_of(client, job["id"])["attempts"]) == 1
    assert len(events(client, "job.time_limit")) == 1


@pytest.mark.parametrize("skew", [-timedelta(days=1), timedelta(days=365)])
def test_an_agents_clock_decides_no_time_limit(client: TestClient, skew: timedelta) -> None:
    """A node's clock behind or ahead: the start and end its agent reports are kept
    between the attempt's placement and the server's now, so a 1 h limit runs out 1 h
    into the run, neither as it starts nor the skew later."""
    node = register_node(client, "n1", [("Tesla T4", 15360)])
    job = submit(client, memory_mib=1000, time_limit="1h")["id"]
    cycle(client)
    beat(client, node)
    beat(client, node, [{**running(job), "started_at": (utcnow() + skew).isoformat()}])
    (attempt,) = job_of(client, job)["attempts"]
    started = datetime.fromisoformat(attempt["started_at"])
    assert datetime.fromisoformat(attempt["placed_at"]) <= started <= utcnow()
    sessions = client.app.state.sessions  # type: ignore[attr-defined]
    with transaction(sessions) as session:
        assert stop_overdue(session=session, now=started + timedelta(minutes=59)) == []
    with transaction(sessions) as session:
        assert stop_overdue(session=session, now=started + timedelta(minutes=61)) == [job]
    beat(client, node, [{**exited(job), "finished_at": (utcnow() + skew).isoformat()}])
    (attempt,) = job_of(client, job)["attempts"]
    assert started <= datetime.fromisoformat(attempt["finished_at"]) <= utcnow()


def test_a_clock_behind_by_more_than_a_run_keeps_the_runs_length() -> None:
    """Both ends reported a day behind are taken as when the server heard them, ten
    minutes apart, not squeezed against the placement (a run of 0 s, its peak doubted);
    a time within what the server can believe stays as reported."""
    placed = utcnow() - timedelta(hours=1)
    attempt = Attempt(placed_at=placed, started_at=None)
    heard_start = placed + timedelta(minutes=5)
    attempt.started_at = _agent_time(attempt, heard_start - timedelta(days=1), heard_start)
    heard_end = heard_start + timedelta(minutes=10)
    finished = _agent_time(attempt, heard_end - timedelta(days=1), heard_end)
    assert (attempt.started_at, finished - attempt.started_at) == (
        heard_start,
        timedelta(minutes=10),
    )
    within = heard_start + timedelta(minutes=4)
    assert _agent_time(attempt, within, heard_end) == within
    assert _agent_time(attempt, heard_end + timedelta(days=1), heard_end) == heard_end


def test_tokens_are_made_listed_and_revoked_over_the_api(
    client: TestClient, database_url: str
) -> None:
    made = client.post("/v1/admin/tokens", json={"role": "user", "name": "carol"})
    assert made.status_code == 201
    secret = made.json()["token"]
    assert client.get("/v1/jobs", headers=bearer(secret)).status_code == 200
    listed = client.get("/v1/admin/tokens").json()
    assert [t["name"] for t in listed] == ["admin", "carol"]
    assert all("token" not in t and "token_hash" not in t for t in listed)
    assert secret.startswith(listed[1]["prefix"]) and secret != listed[1]["prefix"]
    assert client.post("/v1/admin/tokens", json={"role": "root", "name": "x"}).status_code == 422
    user = bearer(make_token(database_url, "user", "dan"))
    assert client.get("/v1/admin/tokens", headers=user).status_code == 403
    revoked = client.delete(f"/v1/admin/tokens/{made.json()['id']}").json()
    assert revoked["revoked_at"] is not None
    assert client.get("/v1/jobs", headers=bearer(secret)).status_code == 401
    assert client.delete("/v1/admin/tokens/999").status_code == 404
    assert len(events(client, "token.created")) == 1
    assert len(events(client, "token.revoked")) == 1


def colloc(*words: str) -> int:
    return run_command(build_parser().parse_args([*words, "--server", "http://colloc"]))


def test_the_control_commands(through_app: TestClient, capsys: Any) -> None:
    client = through_app
    register_node(client, "n1", [("Tesla T4", 15360)])
    job = submit(client, memory_mib=1000)["id"]
    assert colloc("hold", str(job)) == 0
    assert colloc("release", str(job)) == 0
    assert colloc("node", "drain", "n1", "--deadline", "10m") == 0
    assert colloc("nodes", "-o", "wide") == 0
    assert colloc("node", "resume", "n1") == 0
    out = capsys.readouterr().out.splitlines()
    assert out[4].split()[:3] == ["n1", "ready,", "draining"]
    assert out[:2] == [
        f"job {job}: pending (held): held by admin",
        f"job {job}: pending: released by admin",
    ]
    assert out[2].startswith("node n1: draining, running jobs requeued at ")
    assert out[-1] == "node n1: active"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["node", "drain", "n1", "--deadline", "soon"])


def test_the_token_command_talks_to_a_server(through_app: TestClient, capsys: Any) -> None:
    assert colloc("token", "create", "--role", "user", "--name", "erin") == 0
    created = capsys.readouterr().out.splitlines()
    assert created[0].startswith("created user token 2 for 'erin'")
    assert colloc("token", "list") == 0
    listing = capsys.readouterr().out
    assert "erin" in listing and created[1] not in listing  # the secret shown once only
    assert colloc("token", "revoke", "2") == 0
    assert capsys.readouterr().out == "revoked user token 2 for 'erin'\n"
    assert through_app.get("/v1/jobs", headers=bearer(created[1])).status_code == 401


def test_queue_time_limits_read_as_durations() -> None:
    settings = Settings(
        queue_default_time_limit_s={"*": "1h30m"}, queue_max_time_limit_s={"gpu": 60}
    )
    assert settings.default_time_limit_s("any") == 5400 and settings.max_time_limit_s("any") is None
    assert settings.max_time_limit_s("gpu") == 60
    with pytest.raises(ValidationError, match="not a duration"):
        Settings(queue_default_time_limit_s={"*": "soon"})


def test_the_scheduling_loop_enforces_time_limits_and_drain_deadlines(client: TestClient) -> None:
    """One tick of the loop, on an attempt that started 2 minutes ago with a 1-minute
    limit and a node whose drain deadline is already past."""
    node = register_node(client, "n1", [("Tesla T4", 15360)])
    limited = submit(client, memory_mib=1000, time_limit=60)["id"]
    drained = submit(client, memory_mib=1000)["id"]
    cycle(client)
    beat(client, node)
    reports = [
        {**running(job), "started_at": started_ago(client, job, 120)} for job in (limited, drained)
    ]
    beat(client, node, reports)
    client.post("/v1/nodes/n1/drain", json={"deadline": 1})
    sessions = client.app.state.sessions  # type: ignore[attr-defined]
    with transaction(sessions) as session:
        session.execute(update(Node).values(drain_deadline=utcnow() - timedelta(seconds=1)))
    state = client.app.state  # type: ignore[attr-defined]
    SchedulerLoop(sessions, state.settings, state.scheduler, state.estimator_state)._tick()
    assert events(client, "job.time_limit") and events(client, "node.drain_deadline")
    cancelled = beat(client, node, reports)["cancellations"]
    assert sorted(c["job_id"] for c in cancelled) == [limited, drained]
