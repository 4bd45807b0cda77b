"""The scheduler in the service: estimates, reservations that follow use, preemption,
back-off, explain, and the estimator's closed loop."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from estimator.estimate import Estimator, default_estimator
from estimator.spec import TrainingSpec
from service.db import transaction
from service.errors import ApiError
from service.jobs import submission
from service.jobs.models import JobEstimate
from service.jobs.submission import MadeEstimates, store_estimates
from service.scheduling import snapshot_reader
from tests.conftest import register_node, submit
from tests.service.test_lifecycle import beat, cycle, exited, exited_after, job_of, running

RESNET = {"model": {"catalog": "resnet50"}, "batch_size": 32}
GPUS = ("GPU-n1-0", "GPU-n1-1")  # `register_node`'s, of a node "n1" of two GPUs


def test_training_jobs_are_placed_by_their_estimate(client: TestClient) -> None:
    register_node(client, "n1", [("Tesla T4", 15360), ("Tesla T4", 15360)])
    register_node(client, "n2", [("NVIDIA A100-SXM4-40GB", 40960)])
    job = submit(client, training=RESNET)
    estimates = {e["gpu_model"]: e for e in job["estimates"]}
    assert set(estimates) == {"Tesla T4", "NVIDIA A100-SXM4-40GB"}
    cycle(client)
    placed = job_of(client, job["id"])["attempts"][0]
    t4 = estimates["Tesla T4"]
    assert placed["gpus"][0]["model"] == "Tesla T4"  # the smaller GPU that holds it
    assert placed["reserved_mib"] == t4["upper_mib"] >= t4["peak_mib"]
    bad = client.post(
        "/v1/jobs",
        json={
            "name": "x",
            "command": ["a"],
            "training": {"model": {"catalog": "resnet5"}, "batch_size": 8},
        },
    )
    assert bad.status_code == 422 and "did you mean" in bad.json()["error"]["message"]


def test_reservation_grows_at_once_and_shrinks_when_steady(make_client: Any) -> None:
    client = make_client(reservation_stable_s=0, reservation_margin=0.1)
    node = register_node(client, "n1", [("Tesla T4", 15360)])
    job = submit(client, memory_mib=4000)
    cycle(client)
    beat(client, node, [running(job["id"], peak=5000)], used=5000)
    assert job_of(client, job["id"])["attempts"][0]["reserved_mib"] == 5500  # grown
    beat(client, node, [running(job["id"], peak=5000)], used=5000)
    slow = make_client(reservation_stable_s=3600)
    beat(slow, node, [running(job["id"], peak=5000)], used=5000)
    assert job_of(slow, job["id"])["attempts"][0]["reserved_mib"] == 5500
    job2 = submit(client)  # no claim, no spec: a whole GPU
    beat(client, node, [running(job["id"], peak=5000), exited(job["id"], peak=5000)][1:])
    cycle(client)
    assert job_of(client, job2["id"])["attempts"][0]["reserved_mib"] == 15360
    beat(client, node, [running(job2["id"], peak=3000)], used=3000)
    assert job_of(client, job2["id"])["attempts"][0]["reserved_mib"] == 3300  # shrunk
    kinds = [
        e["message"]
        for e in client.get("/v1/admin/events", params={"kind": "job.reservation"}).json()["events"]
    ]
    assert any("grown from 4000 to 5500" in k for k in kinds)
    assert any("shrunk from 15360 to 3300" in k for k in kinds)


def test_oom_back_off_delays_the_retry(make_client: Any) -> None:
    client = make_client(oom_backoff_s=600)
    node = register_node(client, "n1", [("Tesla T4", 15360), ("NVIDIA A100-SXM4-40GB", 40960)])
    job = submit(client, memory_mib=4000)
    cycle(client)
    beat(client, node, [exited(job["id"], code=1, outcome="oom", peak=5000)])
    cycle(client)
    shown = job_of(client, job["id"])
    assert shown["state"] == "pending" and shown["not_before"] is not None
    assert "backing off" in shown["reason"] and len(shown["attempts"]) == 1


def test_a_gang_whose_oom_floor_no_node_can_hold_fails_instead_of_waiting(
    client: TestClient,
) -> None:
    register_node(client, "big", [("NVIDIA A100-SXM4-40GB", 40960)])
    node = register_node(client, "n1", [("Tesla T4", 15360), ("Tesla T4", 15360)])
    gang = submit(client, gpus=2, memory_mib=14000, gpu_models=["T4", "A100-40GB"])
    cycle(client)
    assert job_of(client, gang["id"])["attempts"][0]["node"] == "n1"
    beat(client, node, [exited(gang["id"], code=1, outcome="oom", peak=14000)])
    # the floor (1.2 x the whole T4) fits the lone A100, but no node has two such GPUs
    shown = job_of(client, gang["id"])
    assert shown["state"] == "oom" and shown["reservation_floor_mib"] > 15360
    assert "on each of 2 GPU(s) of one node" in shown["reason"]


def test_preemption_requeues_the_victim_without_spending_its_budget(make_client: Any) -> None:
    client = make_client(preemption=True)
    node = register_node(client, "n1", [("Tesla T4", 15360)])
    low = submit(client, memory_mib=12000, preemptible=True, max_attempts=1)
    cycle(client)
    beat(client, node, [running(low["id"])])
    high = submit(client, memory_mib=12000, priority=10)
    cycle(client)
    assert "preempting job(s)" in job_of(client, high["id"])["reason"]
    reply = beat(client, node, [running(low["id"])])
    assert reply["cancellations"] == [{"job_id": low["id"], "attempt": 1}]
    beat(client, node, [exited(low["id"], code=-15)])
    victim = job_of(client, low["id"])
    assert victim["state"] == "pending" and victim["attempts"][0]["state"] == "preempted"
    cycle(client)
    assert job_of(client, high["id"])["state"] == "placed"
    assert job_of(client, low["id"])["state"] == "pending"


def test_explain_endpoint_and_placed_jobs(client: TestClient) -> None:
    register_node(client, "n1", [("Tesla T4", 15360)])
    submit(client, memory_mib=10240)
    cycle(client)
    waiting = submit(client, memory_mib=8192)
    explanation = client.get(f"/v1/jobs/{waiting['id']}/explain").json()
    assert explanation["state"] == "pending" and len(explanation["gpus"]) == 1
    (verdict,) = explanation["gpus"]
    assert not verdict["fits"] and verdict["demand_mib"] == 8192
    assert verdict["free_mib"] == 15360 - 10240 - 256
    assert (
        "needs 8.0 GiB, GPU has 4.8 GiB free (15.0 GiB total, 10.0 GiB reserved"
        in (verdict["reasons"][0])
    )
    fits = submit(client, memory_mib=1000)
    held = client.get(f"/v1/jobs/{fits['id']}/explain").json()
    assert f"held for job(s) {waiting['id']}" in held["summary"]
    assert held["gpus"][0]["held_for_job"] == waiting["id"]
    client.post(f"/v1/jobs/{waiting['id']}/cancel")
    assert "fits now" in client.get(f"/v1/jobs/{fits['id']}/explain").json()["summary"]
    cycle(client)
    placed = client.get(f"/v1/jobs/{fits['id']}/explain").json()
    assert placed["state"] == "placed" and "placed on Tesla T4" in placed["summary"]
    assert client.get("/v1/jobs/999/explain").status_code == 404


def test_a_spec_that_ran_on_a_gpu_model_may_run_there_alone(client: TestClient) -> None:
    node = register_node(client, "n1", [("NVIDIA A100-SXM4-40GB", 40960)])
    first = submit(client, training=RESNET)
    cycle(client)
    near_the_card = exited_after(client, first["id"], 600, peak=38000)  # its 40 GiB
    beat(client, node, [near_the_card])
    again = submit(client, training=RESNET)
    (estimate,) = again["estimates"]
    assert estimate["method"] == "history" and estimate["upper_mib"] == 41800  # over the card
    cycle(client)
    (attempt,) = job_of(client, again["id"])["attempts"]
    assert attempt["reserved_mib"] == 40960 - 256  # the whole GPU, less the headroom
    third = submit(client, memory_mib=1000)
    cycle(client)
    assert job_of(client, third["id"])["state"] == "pending"  # it has the GPU to itself


def test_an_oom_widens_the_next_estimate_of_the_architecture(client: TestClient) -> None:
    node = register_node(client, "n1", [("NVIDIA A100-SXM4-40GB", 40960)])
    job = submit(client, training=RESNET, max_attempts=1)
    (plain,) = job["estimates"]
    cycle(client)
    beat(client, node, [exited(job["id"], code=1, outcome="oom", peak=3 * plain["peak_mib"])])
    assert job_of(client, job["id"])["state"] == "oom"
    bigger = submit(client, training={**RESNET, "batch_size": 64})
    (estimate,) = bigger["estimates"]
    assert estimate["method"] == "analytical+learned+model-history"
    assert estimate["upper_mib"] > 3 * estimate["peak_mib"]
    again = submit(client, training=RESNET)  # the OOM was no peak: no history
    assert again["estimates"][0]["method"] == "analytical+learned+model-history"


def test_a_waiting_job_is_estimated_again_once_a_job_of_its_architecture_oomed(
    client: TestClient,
) -> None:
    node = register_node(client, "n1", [("NVIDIA A100-SXM4-40GB", 40960)])
    first = submit(client, training=RESNET, max_attempts=1)
    (plain,) = first["estimates"]
    cycle(client)
    room = 40960 - 256 - plain["upper_mib"]  # the card less its headroom and the first job
    filler = submit(client, memory_mib=room - 1000)
    cycle(client)
    waiting = submit(client, training=RESNET)
    twin = submit(client, training=RESNET)
    assert waiting["estimates"][0]["upper_mib"] == plain["upper_mib"]  # fits once first ends
    cycle(client)
    assert job_of(client, waiting["id"])["state"] == "pending"
    oom = exited(first["id"], code=1, outcome="oom", peak=3 * plain["peak_mib"])
    beat(client, node, [oom, running(filler["id"])])
    cycle(client)  # the first job's room is free, but the waiting one needs more now
    now = job_of(client, waiting["id"])
    (estimate,) = now["estimates"]
    assert now["state"] == "pending"
    assert estimate["method"] == "analytical+learned+model-history"
    assert estimate["upper_mib"] > 3 * plain["peak_mib"] > plain["upper_mib"] + 1000
    assert job_of(client, twin["id"])["estimates"] == [estimate]  # remade alike
    beat(client, node, [exited(filler["id"], peak=room - 1000)])
    cycle(client)
    (attempt,) = job_of(client, waiting["id"])["attempts"]
    assert attempt["reserved_mib"] == estimate["upper_mib"]
    cycle(client)  # nothing new was observed: the estimate is kept as it is
    assert job_of(client, waiting["id"])["estimates"] == [estimate]


def test_remade_estimates_no_gpu_could_hold_are_not_taken(client: TestClient) -> None:
    node = register_node(client, "n1", [("NVIDIA A100-SXM4-40GB", 40960)])
    first = submit(client, training=RESNET)
    (plain,) = first["estimates"]
    cycle(client)
    filler = submit(client, memory_mib=40960 - 256 - plain["upper_mib"] - 1000)
    cycle(client)
    twin = submit(client, training=RESNET)
    cycle(client)
    assert job_of(client, twin["id"])["state"] == "pending"
    state = client.app.state  # type: ignore[attr-defined]
    stored = select(JobEstimate.basis).where(JobEstimate.job_id == twin["id"])
    with transaction(state.sessions) as session:
        before = session.scalars(stored).all()
    # the spec ran at the card's full memory: remade, its twin would need more than
    # any GPU gives a job (40,704 MiB), so the estimate it was admitted with stands
    beat(client, node, [exited_after(client, first["id"], 600, peak=40900), running(filler["id"])])
    cycle(client)
    shown = job_of(client, twin["id"])
    assert shown["estimates"][0]["upper_mib"] == plain["upper_mib"]
    assert shown["attempts"][0]["reserved_mib"] == plain["upper_mib"]
    with transaction(state.sessions) as session:
        assert session.scalars(stored).all() != before  # judged on the new basis


def test_a_remake_that_fails_keeps_the_estimates_and_is_not_tried_every_cycle(
    client: TestClient, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    node = register_node(client, "n1", [("NVIDIA A100-SXM4-40GB", 40960)])
    first = submit(client, training=RESNET)
    (plain,) = first["estimates"]
    cycle(client)
    room = 40960 - 256 - plain["upper_mib"]
    filler = submit(client, memory_mib=room - 1000)
    cycle(client)
    cousin = submit(client, training={**RESNET, "batch_size": 128})  # needs more than first
    twin = submit(client, training={**RESNET, "batch_size": 128})
    (admitted,) = cousin["estimates"]
    assert admitted["upper_mib"] > plain["upper_mib"] + 1000
    beat(client, node, [exited_after(client, first["id"], 600, peak=9000), running(filler["id"])])

    def refused(*_args: Any) -> None:
        raise RuntimeError("the estimator refuses this spec now")

    monkeypatch.setattr(submission, "estimate_for", refused)
    with caplog.at_level(logging.WARNING, logger=snapshot_reader.log.name):
        cycle(client)  # its architecture ran: stale, but the remake fails
        cycle(client)
    warned = [r for r in caplog.records if "could not be made again" in r.getMessage()]
    # once for the two jobs of one spec, and judged on the basis it failed on: not
    # tried every cycle
    assert len(warned) == 1
    assert job_of(client, cousin["id"])["estimates"] == [admitted]
    assert job_of(client, twin["id"])["estimates"] == [admitted]
    beat(client, node, [exited(filler["id"], peak=room - 1000)])
    cycle(client)
    (attempt,) = job_of(client, cousin["id"])["attempts"]
    assert attempt["reserved_mib"] == admitted["upper_mib"]


@pytest.mark.parametrize(
    "error, level",
    [
        (ApiError(422, "unknown_model", "the estimator refuses this spec now"), logging.WARNING),
        (KeyError("a bug in the estimator"), logging.ERROR),
    ],
)
def test_a_job_whose_estimates_cannot_be_made_on_a_new_gpu_model_runs_on_its_old_ones(
    client: TestClient,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    error: Exception,
    level: int,
) -> None:
    """Estimates for a GPU model that joined after a job was admitted are made when the
    scheduler next reads it; where the estimator refuses them now, the job neither
    fails nor waits: it runs where its own estimates say it fits, never on the new
    model, which its reason does not count either. The failure is logged once while it
    rests on one basis, and again once that moves: a warning where the estimator refused
    the spec, an error where it broke."""
    a100 = register_node(client, "n1", [("NVIDIA A100-SXM4-40GB", 40960)])
    filler = submit(client, memory_mib=40000)
    cycle(client)
    waiting, twin = (submit(client, training=RESNET) for _ in range(2))
    (admitted,) = waiting["estimates"]
    register_node(client, "n2", [("Tesla T4", 15360)])  # free, and left so

    def refused(*_args: Any) -> None:
        raise error

    monkeypatch.setattr(submission, "estimate_for", refused)

    def warned() -> int:
        logged = [r for r in caplog.records if "GPU models that joined" in r.getMessage()]
        assert {r.levelno for r in logged} <= {level}
        return len(logged)

    with caplog.at_level(logging.WARNING, logger=snapshot_reader.log.name):
        cycle(client)
        assert warned() == 1  # for the two jobs of one spec
        cycle(client)
        explained = client.get(f"/v1/jobs/{waiting['id']}/explain").json()
        cycle(client)
        assert warned() == 1  # not again by the next cycles, nor by a user's explain
        moved = Estimator.basis
        monkeypatch.setattr(Estimator, "basis", lambda self, spec: moved(self, spec) + "+")
        cycle(client)
        assert warned() == 2  # what it rests on moved: tried, and failing, anew
        beat(client, a100, [exited(filler["id"], peak=1000)])
        cycle(client)
    # the most free where it may run is the A100's, not the empty T4's 14.8 GiB
    assert "the most free on an eligible GPU is 0.7 GiB" in explained["summary"]
    for job in (waiting, twin):
        shown = job_of(client, job["id"])
        assert shown["estimates"] == [admitted]
        assert [a["gpus"][0]["model"] for a in shown["attempts"]] == ["NVIDIA A100-SXM4-40GB"]
        assert [a["reserved_mib"] for a in shown["attempts"]] == [admitted["upper_mib"]]


def test_estimates_of_several_jobs_are_stored_at_once_each_on_its_own_basis(
    client: TestClient,
) -> None:
    register_node(client, "n1", [("Tesla T4", 15360), ("NVIDIA A100-SXM4-40GB", 40960)])
    one, two, three = (submit(client, training=RESNET)["id"] for _ in range(3))
    bigger = TrainingSpec.model_validate({**RESNET, "batch_size": 64})
    new = default_estimator().estimate(bigger, "Tesla T4")
    rows = select(JobEstimate.job_id, JobEstimate.gpu_model, JobEstimate.upper_mib)
    rows = rows.add_columns(JobEstimate.basis).order_by(JobEstimate.job_id, JobEstimate.gpu_model)
    state = client.app.state  # type: ignore[attr-defined]
    with transaction(state.sessions) as session:
        before = {(j, m): (upper, basis) for j, m, upper, basis in session.execute(rows)}
        made = {one: MadeEstimates({"Tesla T4": new}, "b1"), two: MadeEstimates({}, "b2")}
        store_estimates(session, made)
    with transaction(state.sessions) as session:
        after = {(j, m): (upper, basis) for j, m, upper, basis in session.execute(rows)}
    a100 = "NVIDIA A100-SXM4-40GB"
    assert after[(one, "Tesla T4")] == (new.upper_mib, "b1")  # replaced
    assert after[(one, a100)] == (before[(one, a100)][0], "b1")  # stands, judged anew
    for model in ("Tesla T4", a100):
        assert after[(two, model)] == (before[(two, model)][0], "b2")
        assert after[(three, model)] == before[(three, model)]  # not among them
    assert len(after) == len(before)


def test_a_retried_jobs_estimates_stay_those_its_attempt_was_placed_with(
    client: TestClient,
) -> None:
    node = register_node(client, "n1", [("Tesla T4", 15360), ("NVIDIA A100-SXM4-40GB", 40960)])
    job = submit(client, training=RESNET, max_attempts=2)
    cycle(client)
    placed_with = job_of(client, job["id"])["estimates"]
    beat(client, node, [running(job["id"])])
    beat(client, node, [exited(job["id"], code=1, outcome="oom", peak=6000)])
    cycle(client)  # its architecture ran (this very job), but its retry goes by its floor
    again = job_of(client, job["id"])
    assert again["reservation_floor_mib"] and again["estimates"] == placed_with


def test_a_surprise_on_every_gpu_of_one_run_is_one_runs_surprise(client: TestClient) -> None:
    node = register_node(client, "n1", [("NVIDIA A100-SXM4-40GB", 40960)] * 2)
    pair = {**RESNET, "parallelism": {"dp": 2}}
    for peaks in ((10_000, 10_100), (10_050, 10_000), (25_000, 24_800)):  # the last: a surprise
        job = submit(client, training=pair, gpus=2)
        cycle(client)
        ended = exited_after(client, job["id"], 600)
        beat(client, node, [{**ended, "peak_mib_by_gpu": dict(zip(GPUS, peaks, strict=True))}])
    (estimate,) = submit(client, training=pair, gpus=2)["estimates"]
    assert estimate["method"] == "history" and estimate["peak_mib"] == 10_100


def test_closed_loop_history_refit_and_rollback(client: TestClient) -> None:
    node = register_node(client, "n1", [("NVIDIA A100-SXM4-40GB", 40960)])
    first = submit(client, training=RESNET)
    cycle(client)
    beat(client, node, [exited_after(client, first["id"], 600, peak=7777)])
    again = submit(client, training=RESNET)
    (estimate,) = again["estimates"]
    assert estimate["method"] == "history" and estimate["peak_mib"] == 7777
    before = client.get("/v1/admin/estimator").json()
    assert before["active"] == "packaged" and before["observed_peaks"] == 1
    refit = client.post("/v1/admin/estimator/refit")
    assert refit.status_code == 200
    new = refit.json()["active"]
    assert new != "packaged" and [v["version"] for v in refit.json()["versions"]][-1] == new
    back = client.post("/v1/admin/estimator/activate", json={"version": "packaged"})
    assert back.json()["active"] == "packaged"
    assert client.post("/v1/admin/estimator/activate", json={"version": "nope"}).status_code == 404


def test_scheduled_refit_learns_from_finished_jobs(make_client: Any) -> None:
    # launch_timeout_s: the loop must not take the attempt back unstarted once
    # exited_after has moved its placement 600 s back
    client = make_client(
        scheduler_enabled=True,
        schedule_interval_s=0.05,
        estimator_refit_interval_s=0.1,
        launch_timeout_s=3600,
    )
    node = register_node(client, "n1", [("NVIDIA A100-SXM4-40GB", 40960)])
    job = submit(client, training=RESNET)
    # a refit trains for ~10 s alone (bench/RESULTS.md); on a loaded machine several times that
    deadline = time.monotonic() + 120
    while job_of(client, job["id"])["state"] == "pending":
        assert time.monotonic() < deadline, "the loop never placed the job"
        time.sleep(0.05)
    beat(client, node, [exited_after(client, job["id"], 600, peak=6000)])
    while client.get("/v1/admin/estimator").json()["active"] == "packaged":
        assert time.monotonic() < deadline, "no scheduled refit"
        time.sleep(0.2)
