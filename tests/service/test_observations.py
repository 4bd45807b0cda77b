"""Observations you can trust: history and refits learn only from credible peaks, one
owner's peaks answer only for that owner's jobs until corroborated or trusted, and no
estimate is ever negative."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError
from sqlalchemy.exc import IntegrityError

from estimator.estimate import Estimate, Estimator
from estimator.history import MIN_CREDIBLE_RUN_S, ObservationHistory, weights_mib
from estimator.spec import TrainingSpec
from service.db import transaction
from service.jobs.models import JobEstimate
from tests.conftest import bearer, make_token, register_node
from tests.service.test_lifecycle import beat, cycle, exited_after, job_of
from tests.service.test_poison import GOOD_TRAINING

T4 = "Tesla T4"
BIG = {  # about 1.8 GiB of fp32 weights
    "model": {"transformer": {"layers": 8, "hidden": 2048, "heads": 16}},
    "batch_size": 1,
    "seq_len": 128,
}


def submit_as(client: TestClient, token: dict[str, str], **spec: Any) -> dict[str, Any]:
    body = {"name": "job", "command": ["true"], **spec}
    response = client.post("/v1/jobs", json=body, headers=token)
    assert response.status_code == 201, response.text
    result: dict[str, Any] = response.json()
    return result


def finished_run(
    client: TestClient, node: int, token: dict[str, str], peak: int, ran_s: float = 600
) -> dict[str, Any]:
    """A job of the good spec by `token`'s owner, placed, run and ended with `peak`."""
    job = submit_as(client, token, training=GOOD_TRAINING)
    cycle(client)
    beat(client, node, [exited_after(client, job["id"], ran_s, peak=peak)])
    return job


def estimate_of(job: dict[str, Any]) -> dict[str, Any]:
    (estimate,) = job["estimates"]
    result: dict[str, Any] = estimate
    return result


@pytest.fixture
def users(database_url: str) -> dict[str, dict[str, str]]:
    return {
        name: bearer(make_token(database_url, "user", name)) for name in ("alice", "bob", "carol")
    }


def test_a_sleep_with_a_training_spec_teaches_nothing(
    client: TestClient, users: dict[str, dict[str, str]]
) -> None:
    node = register_node(client, "n1", [(T4, 15360)])
    honest = estimate_of(submit_as(client, users["bob"], training=GOOD_TRAINING))
    finished_run(client, node, users["alice"], peak=0, ran_s=3)  # `sleep 3`
    for user in ("alice", "bob"):
        later = estimate_of(submit_as(client, users[user], training=GOOD_TRAINING))
        assert later["method"] != "history" and later["upper_mib"] == honest["upper_mib"] > 0
    events = client.get("/v1/admin/events", params={"kind": "job.observation_doubted"}).json()
    (doubted,) = events["events"]
    assert "not learned from: no GPU memory was seen in use" in doubted["message"]


def test_a_short_run_or_a_peak_below_the_weights_is_not_learned_from(
    client: TestClient,
) -> None:
    node = register_node(client, "n1", [(T4, 15360)])
    weights = weights_mib(TrainingSpec.model_validate(BIG))
    short = client.post(
        "/v1/jobs", json={"name": "s", "command": ["a"], "training": GOOD_TRAINING}
    ).json()
    cycle(client)
    beat(client, node, [exited_after(client, short["id"], MIN_CREDIBLE_RUN_S / 2, peak=900)])
    small = client.post(
        "/v1/jobs", json={"name": "b", "command": ["a"], "training": BIG, "memory_mib": 3000}
    ).json()
    cycle(client)
    beat(client, node, [exited_after(client, small["id"], 600, peak=round(weights / 2))])
    messages = [
        e["message"]
        for e in client.get("/v1/admin/events", params={"kind": "job.observation_doubted"}).json()[
            "events"
        ]
    ]
    assert "less than the 60 s a training run takes" in messages[0]
    assert f"below the {weights:.0f} MiB its weights alone take" in messages[1]
    for training in (GOOD_TRAINING, BIG):
        again = client.post(
            "/v1/jobs", json={"name": "x", "command": ["a"], "training": training, "memory_mib": 9}
        ).json()
        assert not estimate_of(again)["method"].startswith("history")
    assert client.get("/v1/admin/estimator").json()["observed_peaks"] == 0


def test_one_owners_peaks_answer_for_others_only_once_an_admin_trusts_them(
    client: TestClient, users: dict[str, dict[str, str]]
) -> None:
    node = register_node(client, "n1", [(T4, 15360)])
    modelled = estimate_of(submit_as(client, users["bob"], training=GOOD_TRAINING))
    low = finished_run(client, node, users["alice"], peak=100)  # credible, and low
    mine = estimate_of(submit_as(client, users["alice"], training=GOOD_TRAINING))
    assert mine["method"] == "history" and mine["peak_mib"] == 100
    theirs = estimate_of(submit_as(client, users["bob"], training=GOOD_TRAINING))
    assert theirs["method"] != "history" and theirs["upper_mib"] == modelled["upper_mib"]
    assert client.get("/v1/admin/estimator").json()["observed_peaks"] == 0  # no refit takes it
    path = f"/v1/jobs/{low['id']}/trust"
    assert client.post(path, headers=users["alice"]).status_code == 403
    assert client.post(path).json() == {"job_id": low["id"], "trusted_peaks": 1}
    trusted = estimate_of(submit_as(client, users["bob"], training=GOOD_TRAINING))
    assert trusted["method"] == "history" and trusted["peak_mib"] == 100
    assert client.get("/v1/admin/estimator").json()["observed_peaks"] == 1


def test_a_waiting_jobs_estimates_are_made_again_once_an_admin_trusts_a_run(
    client: TestClient, users: dict[str, dict[str, str]]
) -> None:
    node = register_node(client, "n1", [(T4, 15360)])
    low = finished_run(client, node, users["alice"], peak=100)
    submit_as(client, users["carol"], memory_mib=15360 - 256 - 50)  # fills the GPU
    cycle(client)
    waiting = submit_as(client, users["bob"], training=GOOD_TRAINING)
    assert estimate_of(waiting)["method"] != "history"  # alice's run is hers alone
    cycle(client)
    assert client.post(f"/v1/jobs/{low['id']}/trust").status_code == 200
    cycle(client)  # the history is rebuilt with alice's run vouched for
    now = job_of(client, waiting["id"])
    assert now["state"] == "pending"
    assert estimate_of(now)["method"] == "history" and estimate_of(now)["peak_mib"] == 100


def test_another_owners_run_corroborates_a_spec() -> None:
    spec = TrainingSpec.model_validate(GOOD_TRAINING)
    history = ObservationHistory()
    assert history.add(spec, T4, 500, 1.0, owner="alice") == []  # alice's alone
    assert history.seen_by("alice").peaks_by_gpu(spec) == {T4: 500}
    assert history.seen_by("bob").peaks_by_gpu(spec) == {}
    # bob's run on another GPU model checks nothing of alice's T4 peak
    assert history.add(spec, "A100-40GB", 900, 1.0, owner="bob") == []
    assert history.seen_by("carol").peaks_by_gpu(spec) == {}
    # bob's run on the T4 went 40% higher: either of them may be wrong, neither counts
    assert history.add(spec, T4, 700, 1.0, owner="bob") == []
    assert history.seen_by("carol").peaks_by_gpu(spec) == {}
    # dave's agrees with bob's (within HISTORY_MARGIN): the higher of the two counts
    assert history.add(spec, T4, 650, 1.0, owner="dave") == [(T4, 700)]
    assert history.seen_by("carol").peaks_by_gpu(spec) == {T4: 700}
    # a trusted run counts at once (and agrees with bob's untrusted one, below it)
    a100 = "NVIDIA A100-SXM4-40GB"
    assert history.add(spec, a100, 950, 1.0, owner="bob", trusted=True) == [(a100, 950)]
    # another owner's run there, a little higher, agrees with it
    assert history.add(spec, a100, 1000, 1.0, owner="dave") == [(a100, 1000)]
    # one owner's far higher run counts for that owner only
    assert history.add(spec, a100, 5000, 1.0, owner="mallory") == []
    assert history.seen_by("carol").peaks_by_gpu(spec) == {T4: 700, a100: 1000}
    assert history.seen_by("mallory").peaks_by_gpu(spec) == {T4: 700, a100: 5000}


def test_no_estimate_is_negative(database_url: str, client: TestClient) -> None:
    spec = TrainingSpec.model_validate(GOOD_TRAINING)
    estimator = Estimator(None)
    estimator.observe(spec, "NVIDIA H200", 1)  # a tiny peak on a GPU of a large context
    moved = estimator.estimate(spec, T4)
    assert moved.method == "history-other-gpu" and moved.peak_mib >= 0 and moved.upper_mib >= 0
    with pytest.raises(ValidationError):
        Estimate(
            gpu_model=T4,
            peak_mib=-500,
            upper_mib=-500,
            coverage=0.9,
            method="x",
            breakdown_mib={},
            model_version="x",
        )
    job = client.post("/v1/jobs", json={"name": "j", "command": ["a"]}).json()
    state = client.app.state  # type: ignore[attr-defined]
    with pytest.raises(IntegrityError), transaction(state.sessions) as session:
        session.add(
            JobEstimate(
                job_id=job["id"],
                gpu_model=T4,
                peak_mib=-500,
                upper_mib=-500,
                coverage=0.9,
                method="x",
                model_version="x",
                breakdown_mib={},
            )
        )


def test_one_users_runs_do_not_move_the_clusters_fixed_cost(
    client: TestClient, users: dict[str, dict[str, str]]
) -> None:
    node = register_node(client, "n1", [(T4, 15360)])
    before = estimate_of(submit_as(client, users["bob"], training=GOOD_TRAINING))
    for _ in range(6):  # more than an offset needs to be learned (estimator/offsets.py)
        finished_run(client, node, users["alice"], peak=before["peak_mib"] - 400)
    after = estimate_of(submit_as(client, users["bob"], training=GOOD_TRAINING))
    assert after["peak_mib"] == before["peak_mib"] and after["upper_mib"] == before["upper_mib"]


def test_two_users_runs_teach_the_cluster_its_fixed_cost(
    client: TestClient, users: dict[str, dict[str, str]]
) -> None:
    """Corroboration needs no admin: owners who agree move the offset for everyone."""
    node = register_node(client, "n1", [(T4, 15360)])
    before = estimate_of(submit_as(client, users["bob"], training=GOOD_TRAINING))
    for owner in ("alice", "bob", "alice", "bob", "alice", "bob"):
        finished_run(client, node, users[owner], peak=before["peak_mib"] + 600)
        cycle(client)
    (learned,) = client.get("/v1/admin/estimator").json()["fixed_cost_offsets"]
    assert learned["in_force"] and learned["offset_mib"] == pytest.approx(600, abs=5)
    after = estimate_of(submit_as(client, users["carol"], training=GOOD_TRAINING))
    assert after["peak_mib"] == pytest.approx(before["peak_mib"] + 600, abs=5)


def alice_then_mallory(
    client: TestClient, node: int, alice: dict[str, str], mallory: dict[str, str], peak: int
) -> None:
    """Four runs of alice's at `peak` + 100 MiB, then one of mallory's at `peak` + 4000."""
    for _ in range(4):
        finished_run(client, node, alice, peak=peak + 100)
        cycle(client)
    finished_run(client, node, mallory, peak=peak + 4000)
    cycle(client)


def test_one_odd_job_of_a_second_owner_does_not_set_the_fixed_cost(
    client: TestClient, users: dict[str, dict[str, str]], database_url: str
) -> None:
    """Alice's runs and one of mallory's holding 4 GiB more are two owners who disagree:
    the offset stays at its prior, and carol's estimate of a model no one ran (the
    models' estimate, fixed cost included) where it was."""
    mallory = bearer(make_token(database_url, "user", "mallory"))
    node = register_node(client, "n1", [(T4, 15360)])
    ran = estimate_of(submit_as(client, users["alice"], training=GOOD_TRAINING))
    unseen = {**GOOD_TRAINING, "model": {"transformer": {"layers": 2, "hidden": 256, "heads": 4}}}
    before = estimate_of(submit_as(client, users["carol"], training=unseen))
    alice_then_mallory(client, node, users["alice"], mallory, ran["peak_mib"])
    (learned,) = client.get("/v1/admin/estimator").json()["fixed_cost_offsets"]
    assert learned["observations"] == 5
    assert not learned["in_force"] and learned["offset_mib"] == 0.0
    after = estimate_of(submit_as(client, users["carol"], training=unseen))
    assert (after["peak_mib"], after["upper_mib"]) == (before["peak_mib"], before["upper_mib"])


def test_one_odd_job_of_a_spec_does_not_raise_another_owners_estimate_of_it(
    client: TestClient, users: dict[str, dict[str, str]], database_url: str
) -> None:
    """Alice's runs of a spec, and one of mallory's holding 4 GiB more: carol's job of
    the same spec is estimated as if neither had run (not at mallory's peak, released
    by alice's runs), until bob's run agrees with alice's."""
    mallory = bearer(make_token(database_url, "user", "mallory"))
    node = register_node(client, "n1", [(T4, 15360)])
    before = estimate_of(submit_as(client, users["carol"], training=GOOD_TRAINING))
    alice_then_mallory(client, node, users["alice"], mallory, before["peak_mib"])
    after = estimate_of(submit_as(client, users["carol"], training=GOOD_TRAINING))
    assert (after["method"], after["peak_mib"], after["upper_mib"]) == (
        before["method"],
        before["peak_mib"],
        before["upper_mib"],
    )
    own = estimate_of(submit_as(client, mallory, training=GOOD_TRAINING))
    assert (own["method"], own["peak_mib"]) == ("history", before["peak_mib"] + 4000)
    finished_run(client, node, users["bob"], peak=before["peak_mib"] + 90)
    cycle(client)
    agreed = estimate_of(submit_as(client, users["carol"], training=GOOD_TRAINING))
    assert (agreed["method"], agreed["peak_mib"]) == ("history", before["peak_mib"] + 100)


def test_one_owners_odd_job_widens_only_that_owners_bounds_of_the_architecture(
    client: TestClient, users: dict[str, dict[str, str]], database_url: str
) -> None:
    """Mallory's one ResNet-50 job at batch 1 holding 38 GiB for ten minutes widens
    mallory's ResNet-50 bounds, not carol's: no one else ran that spec."""
    mallory = bearer(make_token(database_url, "user", "mallory"))
    node = register_node(client, "n1", [("NVIDIA A100-SXM4-40GB", 40960)])
    carols = {"model": {"catalog": "resnet50"}, "batch_size": 16, "image_size": 224}
    before = estimate_of(submit_as(client, users["carol"], training=carols))
    odd = submit_as(client, mallory, training={**carols, "batch_size": 1})
    cycle(client)
    beat(client, node, [exited_after(client, odd["id"], 600, peak=38000)])
    assert job_of(client, odd["id"])["state"] == "succeeded"
    cycle(client)
    after = estimate_of(submit_as(client, users["carol"], training=carols))
    assert (after["method"], after["upper_mib"]) == (before["method"], before["upper_mib"])
    own = estimate_of(submit_as(client, mallory, training=carols))
    assert own["method"].endswith("+model-history") and own["upper_mib"] > 20 * before["upper_mib"]
