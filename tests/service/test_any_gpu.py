"""A GPU no catalog lists is estimated and packed like any other, as its agent reports it."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from agent.backends.simulated import SimulatedBackend
from agent.cluster import parse_cluster
from tests.conftest import submit
from tests.service.test_lifecycle import cycle, job_of

BLACKWELL = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
CIFAR = {"model": {"catalog": "resnet18"}, "batch_size": 128, "image_size": 32}


def register_simulated(client: TestClient, tmp_path: Path, gpu: dict[str, object]) -> None:
    """Register a simulated node as its agent would (the backend's device descriptions)."""
    (node,) = parse_cluster({"nodes": [{"name": "bw", "gpus": [gpu]}]})
    backend = SimulatedBackend(node, tmp_path)
    body = {
        "name": "bw",
        "agent_version": "test",
        "gpus": [device.model_dump() for device in backend.devices()],
    }
    response = client.post("/v1/nodes/register", json=body)
    assert response.status_code == 200, response.text


def test_two_jobs_are_packed_on_one_uncatalogued_gpu(client: TestClient, tmp_path: Path) -> None:
    register_simulated(
        client,
        tmp_path,
        {
            "model": BLACKWELL,
            "memory_mib": 97887,
            "compute_capability": "12.0",
            "driver_version": "575.57.08",
            "context_mib": 480,
        },
    )
    gpu = client.get("/v1/admin/cluster").json()["nodes"][0]["gpus"][0]
    assert (gpu["compute_capability"], gpu["driver_version"], gpu["context_mib"]) == (
        "12.0",
        "575.57.08",
        480,
    )
    first = submit(client, training=CIFAR)
    second = submit(client, training={**CIFAR, "batch_size": 256})
    (estimate,) = first["estimates"]
    assert estimate["gpu_model"] == BLACKWELL and 0 < estimate["upper_mib"] < 97887 // 4
    # described as reported: Blackwell's cuBLAS workspaces, the measured context
    assert estimate["breakdown_mib"]["workspaces"] == 128
    cycle(client)
    placed = [job_of(client, job["id"])["attempts"][0] for job in (first, second)]
    assert [p["gpus"][0]["uuid"] for p in placed] == [gpu["uuid"]] * 2
    assert all(p["reserved_mib"] < 97887 // 2 for p in placed)  # no whole-GPU reservations


def test_the_estimate_api_takes_any_gpu(client: TestClient, tmp_path: Path) -> None:
    register_simulated(client, tmp_path, {"model": BLACKWELL, "memory_mib": 97887})
    body = {"training": CIFAR}
    (reported,) = client.post("/v1/estimate", json=body).json()["estimates"]
    # its memory as reported; its compute capability was not (an older agent): assumed
    assert reported["gpu_model"] == BLACKWELL
    (note,) = reported["notes"]
    assert "compute capability" in note and "MiB" not in note
    named = client.post("/v1/estimate", json={**body, "gpu_models": ["Z9000 Accelerator"]})
    assert named.status_code == 200
    (guessed,) = named.json()["estimates"]
    assert guessed["gpu_model"] == "Z9000 Accelerator" and "assuming" in guessed["notes"][0]
    described = client.post(
        "/v1/estimate",
        json={
            **body,
            "gpus": [{"model": "Z9000", "memory_total_mib": 65536, "compute_capability": "9.0"}],
        },
    )
    (hopper_like,) = described.json()["estimates"]
    assert hopper_like["notes"] == [] and hopper_like["breakdown_mib"]["workspaces"] == 128
    both = client.post(
        "/v1/estimate", json={**body, "gpu_models": ["T4"], "gpus": [{"model": "T4"}]}
    )
    assert both.status_code == 422
    bad = client.post(
        "/v1/estimate", json={**body, "gpus": [{"model": "T4", "compute_capability": "x"}]}
    )
    assert bad.status_code == 422 and "Traceback" not in bad.text
