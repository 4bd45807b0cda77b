"""The cluster learns its own fixed cost per process from finished jobs, keeps it in
the database, and every later estimate (also after a restart) uses it."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import String, select

from estimator.analytical.model import breakdown
from estimator.estimate import (
    FIXED_TERMS,
    HISTORY,
    HISTORY_BATCH,
    HISTORY_OTHER_GPU,
    HISTORY_RATIO,
    MODEL_HISTORY,
)
from estimator.history import HISTORY_MARGIN
from estimator.spec import TrainingSpec
from service.db import transaction
from service.estimates.models import FixedCostOffset
from service.jobs.models import JobEstimate
from tests.conftest import submit
from tests.service.test_lifecycle import GPU0, beat, cycle, exited_after

A100 = {
    "uuid": GPU0,
    "index": 0,
    "model": "NVIDIA A100-SXM4-40GB",
    "memory_total_mib": 40960,
    "compute_capability": "8.0",
    "driver_version": "535.183.01",
    "cuda_driver_version": 12020,
    "context_mib": 300,
}
STACK_MIB = 700  # what this cluster's stack holds per process beyond the defaults


def cifar(batch: int) -> dict[str, Any]:
    return {"model": {"catalog": "resnet18"}, "batch_size": batch, "image_size": 32}


def register(client: TestClient) -> int:
    body = {"name": "n1", "agent_version": "test", "gpus": [A100]}
    response = client.post("/v1/nodes/register", json=body)
    assert response.status_code == 200, response.text
    return int(response.json()["node_id"])


def estimate_now(client: TestClient) -> dict[str, Any]:
    """The models' estimate of a configuration no job ran (no history answers it)."""
    unseen = {"model": {"catalog": "resnet34"}, "batch_size": 100, "image_size": 32}
    response = client.post("/v1/estimate", json={"training": unseen})
    assert response.status_code == 200, response.text
    (answer,) = response.json()["estimates"]
    result: dict[str, Any] = answer
    return result


def offsets(client: TestClient) -> list[dict[str, Any]]:
    read = client.get("/v1/admin/estimator").json()
    rows: list[dict[str, Any]] = read["fixed_cost_offsets"]
    return rows


def test_the_offset_moves_after_observations_and_survives_a_restart(make_client: Any) -> None:
    client = make_client()
    node = register(client)
    before = estimate_now(client)
    for batch in (8, 16, 32, 64, 128):
        job = submit(client, training=cifar(batch))
        (estimate,) = job["estimates"]
        cycle(client)
        peak = estimate["peak_mib"] + STACK_MIB
        beat(client, node, [exited_after(client, job["id"], 600, peak=peak)])
        cycle(client)  # a committed sync takes the residual in
    (learned,) = offsets(client)
    assert learned["environment"] == "NVIDIA A100-SXM4-40GB|driver 535.183.01"
    assert learned["in_force"] and learned["observations"] == 5
    assert learned["offset_mib"] == pytest.approx(STACK_MIB, abs=3)
    assert learned["margin_mib"] < 10  # every run held the same 700 MiB more
    after = estimate_now(client)
    assert after["peak_mib"] == pytest.approx(before["peak_mib"] + STACK_MIB, abs=3)
    assert after["breakdown_mib"]["fixed_offset"] == pytest.approx(STACK_MIB, abs=3)
    assert after["model_version"] != before["model_version"]
    assert "+fc." in client.get("/v1/admin/estimator").json()["model_version"]
    state = client.app.state
    with transaction(state.sessions) as session:
        (row,) = session.scalars(select(FixedCostOffset))
        assert row.offset_mib == pytest.approx(STACK_MIB, abs=3) and len(row.residuals) == 5

    restarted = make_client()  # a new server process on the same database
    again = estimate_now(restarted)
    assert again["peak_mib"] == after["peak_mib"]
    assert again["model_version"] == after["model_version"]
    assert offsets(restarted) == offsets(client)
    assert len(offsets(restarted)) == 1 and offsets(restarted)[0]["observations"] == 5


def imagenet(batch: int) -> dict[str, Any]:
    return {"model": {"catalog": "resnet50"}, "batch_size": batch, "image_size": 224}


def test_jobs_of_large_models_leave_the_offset_at_its_prior(make_client: Any) -> None:
    """Finished jobs whose model terms dwarf the fixed cost (ResNet-50 on ImageNet:
    GiBs of activations) measure their own model error, not the stack's fixed cost:
    however many finish, no offset is learned from them (estimator/offsets.py)."""
    client = make_client()
    node = register(client)
    before = estimate_now(client)
    for batch in (16, 32, 48, 64, 96):
        job = submit(client, training=imagenet(batch))
        (estimate,) = job["estimates"]
        cycle(client)
        peak = estimate["peak_mib"] + STACK_MIB
        beat(client, node, [exited_after(client, job["id"], 600, peak=peak)])
        cycle(client)
    (kept,) = offsets(client)
    assert kept["observations"] == 5 and not kept["in_force"] and kept["offset_mib"] == 0.0
    after = estimate_now(client)
    assert after["peak_mib"] == before["peak_mib"]
    assert after["model_version"] == before["model_version"]


def test_two_batch_sizes_bound_a_third_and_the_bound_survives_a_restart(
    make_client: Any,
) -> None:
    """Once the offset is learned, ResNet-50's runs at two batch sizes bound its model
    terms at a third (method history-ratio, worked out at estimate time); a
    restarted server, with the same peaks and stored offsets, gives the same bound."""
    client = make_client()
    node = register(client)
    for batch in (8, 16, 32, 64, 128):  # small runs: the stack's offset
        job = submit(client, training=cifar(batch))
        cycle(client)
        peak = job["estimates"][0]["peak_mib"] + STACK_MIB
        beat(client, node, [exited_after(client, job["id"], 600, peak=peak)])
        cycle(client)
    unseen = {"training": imagenet(512)}
    ratios = []
    for batch in (64, 128):  # each run reaches its estimate's point
        job = submit(client, training=imagenet(batch))
        (estimate,) = job["estimates"]
        analytical = breakdown(TrainingSpec.model_validate(imagenet(batch)), None).model_mib
        fixed = sum(estimate["breakdown_mib"][term] for term in FIXED_TERMS)
        assert estimate["fixed_mib"] == fixed > STACK_MIB  # as POST /v1/estimate says
        ratios.append((estimate["peak_mib"] - fixed) / analytical)
        cycle(client)
        beat(client, node, [exited_after(client, job["id"], 600, peak=estimate["peak_mib"])])
        cycle(client)
    bounded = client.post("/v1/estimate", json=unseen).json()["estimates"][0]
    assert bounded["method"] == "history-ratio"
    analytical = breakdown(TrainingSpec.model_validate(imagenet(512)), None).model_mib
    expected = bounded["fixed_mib"] + analytical * max(ratios) * (1 + HISTORY_MARGIN)
    assert bounded["upper_mib"] == pytest.approx(expected, abs=15)  # + the offset's margin
    restarted = make_client()  # a new server process on the same database
    again = restarted.post("/v1/estimate", json=unseen).json()["estimates"][0]
    assert (again["method"], again["upper_mib"]) == ("history-ratio", bounded["upper_mib"])


def test_every_estimate_method_fits_the_column_a_job_keeps_it_in() -> None:
    """A job's estimates are stored (PostgreSQL enforces the column's length): every
    method, raised by its architecture's runs, must fit."""
    methods = (HISTORY, HISTORY_OTHER_GPU, HISTORY_BATCH, HISTORY_RATIO, "analytical+learned")
    column = JobEstimate.__table__.c.method.type
    assert isinstance(column, String) and column.length is not None
    assert max(len(method + MODEL_HISTORY) for method in methods) <= column.length
