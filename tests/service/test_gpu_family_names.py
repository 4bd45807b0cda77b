"""`gpu_models: [V100]` on a cluster with one V100 model: the job asks for that model;
with two, the answer lists the names to choose from."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.conftest import register_node, submit


def test_a_family_name_asks_for_the_clusters_one_model_of_it(client: TestClient) -> None:
    register_node(client, "n1", [("Tesla V100-SXM2-16GB", 16160), ("Tesla T4", 15360)])
    assert submit(client, gpu_models=["V100"])["gpu_models"] == ["Tesla V100-SXM2-16GB"]


def test_a_family_name_with_two_models_lists_them(client: TestClient) -> None:
    register_node(client, "n1", [("Tesla V100-SXM2-16GB", 16160)])
    register_node(client, "n2", [("Tesla V100-SXM2-32GB", 32510)])
    body = {"name": "x", "command": ["true"], "gpu_models": ["V100"]}
    response = client.post("/v1/jobs", json=body)
    error = response.json()["error"]
    assert response.status_code == 422 and error["code"] == "unknown_gpu_model"
    assert {"Tesla V100-SXM2-16GB", "Tesla V100-SXM2-32GB"} <= set(error["details"]["known"])
