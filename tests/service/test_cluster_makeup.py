"""The cluster's GPU make-up that submits check against is cached, and a registration
through any replica is seen by every other at its next submit."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from service.db import make_engine
from service.nodes.makeup import cluster_gpus
from tests.conftest import register_node, submit
from tests.service.test_lifecycle import cycle, job_of

T4 = ("Tesla T4", 15360)
A100 = ("NVIDIA A100-SXM4-40GB", 40960)


def test_a_registration_through_another_replica_is_seen_at_the_next_submit(
    make_client: Any,
) -> None:
    first, second = make_client(), make_client()  # two servers on one database
    register_node(first, "node-a", [T4, T4])
    register_node(first, "node-b", [T4, T4])
    big = {"name": "big", "command": ["true"], "memory_mib": 30000}
    assert first.post("/v1/jobs", json=big).json()["error"]["code"] == "never_fits"
    gang = {"name": "gang", "command": ["true"], "gpus": 4, "memory_mib": 1000}
    assert first.post("/v1/jobs", json=gang).json()["error"]["code"] == "never_fits"

    register_node(second, "node-c", [A100, T4, T4, T4])

    assert submit(first, **{k: v for k, v in big.items() if k != "name"})["state"] == "pending"
    assert submit(first, gpus=4, memory_mib=1000)["state"] == "pending"


def test_nodes_alike_are_kept_once_and_every_gpu_of_a_kept_node_stays(
    client: Any, database_url: str
) -> None:
    for name in ("a", "b", "c"):
        register_node(client, f"node-{name}", [T4, T4])
    register_node(client, "node-d", [A100, T4])
    engine = make_engine(database_url)
    with Session(engine) as session:
        makeup = cluster_gpus(session)
    engine.dispose()
    by_node: dict[int, list[str]] = {}
    for node, model, _total in makeup:
        by_node.setdefault(node, []).append(model)
    assert sorted(sorted(models) for models in by_node.values()) == [
        sorted([A100[0], T4[0]]),
        [T4[0], T4[0]],
    ]


def test_a_job_whose_bound_fits_no_gpu_runs_alone_where_its_estimate_fits(
    client: Any,
) -> None:
    register_node(client, "node-a", [T4, T4])
    imagenet = {"model": {"catalog": "resnet50"}, "image_size": 224}
    (estimate,) = client.post(
        "/v1/estimate", json={"training": {**imagenet, "batch_size": 128}}
    ).json()["estimates"]
    room = T4[1] - 256  # the default headroom
    assert estimate["peak_mib"] <= room < estimate["upper_mib"]  # the case at hand
    job = submit(client, training={**imagenet, "batch_size": 128})
    assert job["state"] == "pending"
    cycle(client)
    (attempt,) = job_of(client, job["id"])["attempts"]
    assert attempt["reserved_mib"] == room  # the whole GPU: no neighbour shares it
    # an estimate that fits no GPU either is refused, as before
    bigger = {"name": "b", "command": ["true"], "training": {**imagenet, "batch_size": 256}}
    assert client.post("/v1/jobs", json=bigger).json()["error"]["code"] == "never_fits"
