"""No poison pills: a bad spec is refused at submission whatever the cluster holds, one
job the scheduler cannot handle fails alone, and one node's report is stored whatever
the database's limits. Good jobs submitted beside the poison run."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event, select

from estimator.estimate import Estimator
from estimator.spec import TrainingSpec
from service.db import transaction, utcnow
from service.jobs.models import Attempt, Job, Observation
from service.nodes.models import Gpu
from service.scheduler.placement import Scheduler
from service.scheduler.states import JobState
from tests.conftest import register_node, submit
from tests.service.test_lifecycle import GPU0, beat, cycle, exited, job_of, running

GOOD_TRAINING = {
    "model": {"transformer": {"layers": 4, "hidden": 256, "heads": 4}},
    "batch_size": 4,
    "seq_len": 128,
}
HF = {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 2}

# raw JSON bodies: 1e400 and NaN cannot be written by json.dumps without allow_nan
POISON_BODIES: dict[str, bytes] = {
    "unknown catalog name": b'{"model": {"catalog": "no-such-model-xyz"}, "batch_size": 8}',
    "hf_config count as a list": json.dumps(
        {"model": {"hf_config": {**HF, "num_hidden_layers": [2]}}, "batch_size": 1, "seq_len": 8}
    ).encode(),
    "hf_config count as a dict": json.dumps(
        {"model": {"hf_config": {**HF, "hidden_size": {"a": 1}}}, "batch_size": 1, "seq_len": 8}
    ).encode(),
    "hf_config 1e400": b'{"model": {"hf_config": {"num_hidden_layers": 1e400, "hidden_size": 64,'
    b' "num_attention_heads": 2}}, "batch_size": 1, "seq_len": 8}',
    "hf_config NaN": b'{"model": {"hf_config": {"num_hidden_layers": 2, "hidden_size": NaN,'
    b' "num_attention_heads": 2}}, "batch_size": 1, "seq_len": 8}',
    "hf_config negative": json.dumps(
        {"model": {"hf_config": {**HF, "num_hidden_layers": -4}}, "batch_size": 1, "seq_len": 8}
    ).encode(),
    "hf_config absurd size": json.dumps(
        {"model": {"hf_config": {**HF, "hidden_size": 10**30}}, "batch_size": 1, "seq_len": 8}
    ).encode(),
    "hf_config count as a truth value": json.dumps(
        {"model": {"hf_config": {**HF, "num_hidden_layers": True}}, "batch_size": 1, "seq_len": 8}
    ).encode(),
    "hf_config fractional count": json.dumps(
        {"model": {"hf_config": {**HF, "num_attention_heads": 2.7}}, "batch_size": 1, "seq_len": 8}
    ).encode(),
    "hf_config missing keys": b'{"model": {"hf_config": {"hidden_size": 64}}, "batch_size": 1,'
    b' "seq_len": 8}',
    "hf_config of 300 KB": json.dumps(
        {"model": {"hf_config": {**HF, "x": "a" * 300_000}}, "batch_size": 1, "seq_len": 8}
    ).encode(),
    "hf_config nested 40 deep": b'{"model": {"hf_config": {"num_hidden_layers": 2,'
    b' "hidden_size": 64, "num_attention_heads": 2, "x": '
    + b'{"a": ' * 40
    + b"1"
    + b"}" * 40
    + b'}}, "batch_size": 1, "seq_len": 8}',
    "transformer without seq_len": json.dumps(
        {"model": {"transformer": {"layers": 2, "hidden": 64, "heads": 2}}, "batch_size": 1}
    ).encode(),
    "batch size 1e400": b'{"model": {"catalog": "resnet50"}, "batch_size": 1e400}',
    "tp that does not divide heads": json.dumps(
        {**GOOD_TRAINING, "parallelism": {"tp": 3}}
    ).encode(),
}


def post_training(client: TestClient, training: bytes, **extra: Any) -> Any:
    fields = "".join(f', "{k}": {json.dumps(v)}' for k, v in extra.items())
    body = b'{"name": "p", "command": ["true"], "training": ' + training + fields.encode() + b"}"
    return client.post("/v1/jobs", content=body, headers={"Content-Type": "application/json"})


@pytest.mark.parametrize("nodes", [False, True], ids=["no-node", "nodes"])
def test_bad_specs_are_refused_at_submission_whatever_the_cluster_holds(
    client: TestClient, nodes: bool
) -> None:
    if nodes:
        register_node(client, "n1", [("Tesla T4", 15360)])
    for case, training in POISON_BODIES.items():
        response = post_training(client, training)
        assert response.status_code == 422, (case, response.status_code, response.text[:300])
        assert response.json()["error"]["message"], case
    assert client.get("/v1/jobs").json()["total"] == 0
    assert submit(client, training=GOOD_TRAINING)["state"] == "pending"


def _store_stale(client: TestClient, training: dict[str, Any]) -> int:
    """A pending job whose spec was stored before submission refused such specs (as an
    older server, or a row written by hand, left it)."""
    state = client.app.state  # type: ignore[attr-defined]
    now = utcnow()
    with transaction(state.sessions) as session:
        job = Job(
            name="stale",
            owner="admin",
            queue="default",
            priority=5,  # ahead of the good jobs in the queue
            state="pending",
            spec={"name": "stale", "command": ["true"], "gpus": 1, "training": training},
            gpus=1,
            memory_mib=None,
            max_attempts=1,
            created_at=now,
            updated_at=now,
        )
        session.add(job)
        session.flush()
        return job.id


STALE_SPECS = [
    {"model": {"catalog": "no-such-model-xyz"}, "batch_size": 8},
    {"model": {"hf_config": {**HF, "num_hidden_layers": [1, 2]}}, "batch_size": 1, "seq_len": 8},
    {"model": {"hf_config": {**HF, "hidden_size": {"x": 1}}}, "batch_size": 1, "seq_len": 8},
    {"model": {"transformer": {"layers": 2, "hidden": 64, "heads": 2}}, "batch_size": -3},
    {"model": {"summary": {"params": 10, "activations_per_sample": 1}}, "batch_size": 1, "x": 1},
]


def test_one_job_the_scheduler_cannot_handle_fails_alone(client: TestClient) -> None:
    stale = [_store_stale(client, spec) for spec in STALE_SPECS]  # before any node
    register_node(client, "n1", [("Tesla T4", 15360), ("Tesla T4", 15360)])
    good = [submit(client, training=GOOD_TRAINING)["id"], submit(client, memory_mib=2000)["id"]]
    explained = client.get(f"/v1/jobs/{stale[0]}/explain")  # says why; the cycle fails it
    assert explained.status_code == 200 and explained.json()["state"] == "pending"
    assert "cannot be scheduled" in explained.json()["summary"]
    for job_id in good:
        assert client.get(f"/v1/jobs/{job_id}/explain").status_code == 200
    cycle(client)
    for job_id in good:
        assert job_of(client, job_id)["state"] == "placed"
    for job_id in stale:
        shown = job_of(client, job_id)
        assert shown["state"] == "failed" and "cannot be scheduled" in shown["reason"], shown
    failed = client.get("/v1/admin/events", params={"kind": "job.failed"}).json()["events"]
    assert {e["job_id"] for e in failed} == set(stale)


def test_a_failing_cycle_does_not_stop_lease_expiry(
    make_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(self: Scheduler, snapshot: Any) -> Any:
        raise RuntimeError("a cycle that fails")

    monkeypatch.setattr(Scheduler, "place", broken)
    client = make_client(
        scheduler_enabled=True, schedule_interval_s=0.05, heartbeat_interval_s=0.1, node_lease_s=0.3
    )
    register_node(client, "n1", [("Tesla T4", 15360)])  # and never heard from again
    deadline = time.monotonic() + 20
    while client.get("/v1/admin/cluster").json()["nodes"][0]["state"] != "lost":
        assert time.monotonic() < deadline, "leases stopped expiring with the cycle"
        time.sleep(0.05)


def test_learning_skips_an_observation_of_a_stale_spec(client: TestClient) -> None:
    node = register_node(client, "n1", [("Tesla T4", 15360)])
    stale = _store_stale(client, STALE_SPECS[1])
    state = client.app.state  # type: ignore[attr-defined]
    with transaction(state.sessions) as session:  # it ran once, under an older server
        job = session.get(Job, stale)
        assert job is not None
        job.state = JobState.SUCCEEDED
        attempt = Attempt(
            job_id=stale,
            number=1,
            node_id=node,
            state="succeeded",
            reserved_mib=1,
            placed_at=utcnow(),
        )
        session.add(attempt)
        session.flush()
        gpu_id = session.scalars(select(Gpu.id)).one()
        session.add(
            Observation(
                attempt_id=attempt.id,
                gpu_id=gpu_id,
                gpu_model="Tesla T4",
                peak_mib=500,
                created_at=utcnow(),
                credible=True,
            )
        )
    good = submit(client, training=GOOD_TRAINING)  # the estimator syncs the bad row first
    cycle(client)
    assert job_of(client, good["id"])["state"] == "placed"


def test_a_nodes_report_is_stored_whatever_the_databases_limits(client: TestClient) -> None:
    node = register_node(client, "n1", [("Tesla T4", 15360)])
    innocent = submit(client, memory_mib=1000)
    poisoned = submit(client, memory_mib=1000)
    cycle(client)
    oom_line = "CUDA out of memory\x00 at /" + "a" * 10_000  # a NUL, and past every limit
    gpu = {
        "uuid": GPU0,
        "memory_used_mib": 2000,
        "healthy": False,
        "health_reason": "Xid 79\x00" + "b" * 5000,
    }
    notice = {
        "seq": 1,
        "kind": "over_reservation",
        "gpu_uuid": GPU0,
        "used_mib": 1500,
        "reserved_mib": 1000,
        "action": "warn",
        "message": "over\x00" + "c" * 5000,
    }
    report = {
        **exited(poisoned["id"], code=1, outcome="failed"),
        "reason": oom_line,
        "notices": [notice],
    }
    body = {"gpus": [gpu], "attempts": [running(innocent["id"]), report]}
    response = client.post(f"/v1/nodes/{node}/heartbeat", json=body)
    assert response.status_code == 200, response.text
    failed = job_of(client, poisoned["id"])
    assert failed["state"] == "failed" and "\x00" not in failed["reason"]
    assert failed["reason"].startswith("CUDA out of memory at /") and len(failed["reason"]) == 4096
    cluster = client.get("/v1/admin/cluster").json()["nodes"][0]
    assert cluster["state"] == "ready" and len(cluster["gpus"][0]["health_reason"]) == 1024
    assert job_of(client, innocent["id"])["state"] == "running"
    beat(client, node, [running(innocent["id"])])  # the node goes on reporting


def test_a_node_registering_during_a_cycle_is_seen_whole_or_not_at_all(
    client: TestClient, database_url: str
) -> None:
    if not database_url.startswith("postgresql"):
        pytest.skip("SQLite serialises a registration behind the cycle's transaction")
    register_node(client, "n1", [("Tesla T4", 15360)])
    job = submit(client, memory_mib=1000)
    engine = client.app.state.sessions.kw["bind"]  # type: ignore[attr-defined]
    registered: list[str] = []

    def register_meanwhile(*args: Any) -> None:  # right after the cycle first reads nodes
        if not registered and "FROM nodes" in args[2]:
            registered.append("n2")  # before: registering reads nodes too
            register_node(client, "n2", [("Tesla T4", 15360)])

    event.listen(engine, "after_cursor_execute", register_meanwhile)
    try:
        cycle(client)
    finally:
        event.remove(engine, "after_cursor_execute", register_meanwhile)
    assert registered and job_of(client, job["id"])["state"] == "placed"


def test_a_job_the_server_errs_on_waits_and_the_others_run(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    unlucky = {**GOOD_TRAINING, "batch_size": 7}
    held = submit(client, training=unlucky)  # estimated fine while no node is there
    good = submit(client, training=GOOD_TRAINING)
    real = Estimator.estimate

    def flaky(self: Estimator, spec: TrainingSpec, *args: Any, **kwargs: Any) -> Any:
        if spec.batch_size == 7:
            raise RuntimeError("a fault of the server's")
        return real(self, spec, *args, **kwargs)

    monkeypatch.setattr(Estimator, "estimate", flaky)
    register_node(client, "n1", [("Tesla T4", 15360)])
    cycle(client)
    cycle(client)
    waiting = job_of(client, held["id"])
    assert waiting["state"] == "pending" and "a fault of the server's" in waiting["reason"]
    assert job_of(client, good["id"])["state"] == "placed"
    explained = client.get(f"/v1/jobs/{held['id']}/explain").json()
    assert "cannot handle it now" in explained["summary"]
    events = client.get("/v1/admin/events", params={"kind": "job.unschedulable"}).json()
    assert len(events["events"]) == 1  # not one per cycle
    monkeypatch.setattr(Estimator, "estimate", real)  # fixed: it runs
    cycle(client)
    assert job_of(client, held["id"])["state"] == "placed"


ODD_SPECS: dict[str, dict[str, Any]] = {  # valid or not, never a 5xx nor a stuck cycle
    "largest transformer": {
        "model": {
            "transformer": {"layers": 1024, "hidden": 131072, "heads": 4096, "vocab": 4194304}
        },
        "batch_size": 1048576,
        "seq_len": 16777216,
    },
    "largest summary": {
        "model": {"summary": {"params": 10**13, "activations_per_sample": 10**13}},
        "batch_size": 1048576,
        "image_size": 32768,
    },
    "NUL in an hf_config string": {
        "model": {"hf_config": {**HF, "model_type": "llama\x00"}},
        "batch_size": 1,
        "seq_len": 8,
    },
    "NUL in an hf_config key": {
        "model": {"hf_config": {**HF, "a\x00b": 1}},
        "batch_size": 1,
        "seq_len": 8,
    },
    "NUL in a catalog name": {"model": {"catalog": "resnet\x0050"}, "batch_size": 1},
}


def test_odd_specs_answer_4xx_or_run_and_never_stop_the_cycle(client: TestClient) -> None:
    for nodes in (False, True):
        if nodes:  # room for the valid ones and one more
            register_node(client, "n1", [("Tesla T4", 15360), ("Tesla T4", 15360)])
        for case, training in ODD_SPECS.items():
            body = {"name": "o", "command": ["true"], "training": training}
            status = client.post("/v1/jobs", json=body).status_code
            assert status in (201, 422), (case, nodes, status)
    good = submit(client, memory_mib=1000)
    cycle(client)
    assert job_of(client, good["id"])["state"] == "placed"
