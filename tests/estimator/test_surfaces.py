"""`colloc estimate` and `POST /v1/estimate`: answers and clear errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from fastapi.testclient import TestClient

from estimator.estimate import Estimate
from tests.conftest import register_node

SPEC = "model: {catalog: resnet50}\nbatch_size: 32\n"


def colloc(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "service.cli", *args], capture_output=True, text=True, timeout=120
    )


def test_cli_estimates_one_spec_or_a_list(tmp_path: Path) -> None:
    one = tmp_path / "one.yaml"
    one.write_text(SPEC)
    result = colloc("estimate", str(one), "--gpu", "T4", "--json")
    assert result.returncode == 0, result.stderr
    (line,) = result.stdout.splitlines()
    assert Estimate.model_validate_json(line).gpu_model == "Tesla T4"
    many = tmp_path / "many.json"
    many.write_text(
        json.dumps(
            [
                {"model": {"catalog": "resnet50"}, "batch_size": 8},
                {"training": {"model": {"catalog": "gpt2"}, "batch_size": 2, "seq_len": 1024}},
            ]
        )
    )
    every_gpu = colloc("estimate", str(many))
    assert every_gpu.returncode == 0 and len(every_gpu.stdout.splitlines()) > 2 * 10


def test_cli_lists_every_problem_without_a_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: {catalog: resnet50}\nbatch_size: -1\nprecision: fp7\n")
    result = colloc("estimate", str(bad))
    assert result.returncode == 2
    assert "batch_size" in result.stderr and "precision" in result.stderr
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text("model: {catalog: resnet5}\nbatch_size: 1\n")
    result = colloc("estimate", str(unknown), "--gpu", "T4")
    assert result.returncode == 2 and "did you mean" in result.stderr
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    result = colloc("estimate", str(spec), "--gpu", "T4", "--compute-capability", "nine")
    assert result.returncode == 2 and "compute capability 'nine'" in result.stderr
    result = colloc("estimate", str(spec), "--gpu-memory-mib", "8000")
    assert result.returncode == 2 and "--gpu NAME" in result.stderr
    for output in (result.stderr,):
        assert "Traceback" not in output


def test_cli_answers_every_spec_of_a_list_and_names_each_it_cannot_use(tmp_path: Path) -> None:
    llama = {"transformer": {"layers": 2, "hidden": 64, "heads": 2}}
    many = tmp_path / "many.json"
    many.write_text(
        json.dumps(
            [
                {"model": llama, "batch_size": 1, "seq_len": 8, "parallelism": {"pp": 4}},
                {"model": {"catalog": "resnet50"}, "batch_size": 8},
                {"model": llama, "batch_size": 1, "seq_len": 8, "parallelism": {"tp": 4}},
            ]
        )
    )
    result = colloc("estimate", str(many), "--gpu", "T4")
    assert result.returncode == 2
    assert [line.split()[:2] for line in result.stdout.splitlines()] == [["spec", "2"]]
    assert "spec 1: " in result.stderr and "spec 3: " in result.stderr
    empty = tmp_path / "empty.json"
    empty.write_text("[]")
    result = colloc("estimate", str(empty))
    assert result.returncode == 2 and "empty list" in result.stderr


def test_cli_estimates_any_gpu(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    name = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
    guessed = colloc("estimate", str(spec), "--gpu", name, "--json")
    assert guessed.returncode == 0, guessed.stderr
    assert "not in the catalog; assuming" in guessed.stderr  # one line, to stderr
    assert len(guessed.stderr.strip().splitlines()) == 1
    estimate = Estimate.model_validate_json(guessed.stdout)
    assert estimate.gpu_model == name and estimate.notes
    described = colloc(
        "estimate",
        str(spec),
        *("--gpu", name, "--gpu-memory-mib", "97887", "--compute-capability", "12.0", "--json"),
    )
    assert described.returncode == 0 and described.stderr == ""
    told = Estimate.model_validate_json(described.stdout)
    assert (
        told.notes == [] and told.breakdown_mib["workspaces"] > estimate.breakdown_mib["workspaces"]
    )


def test_api_estimates_for_the_cluster_models(client: TestClient) -> None:
    register_node(client, "n1", [("Tesla T4", 15360)])
    body = {"training": {"model": {"catalog": "resnet50"}, "batch_size": 32}}
    response = client.post("/v1/estimate", json=body)
    assert response.status_code == 200
    (estimate,) = response.json()["estimates"]
    assert estimate["gpu_model"] == "Tesla T4" and estimate["upper_mib"] >= estimate["peak_mib"]
    chosen = client.post("/v1/estimate", json={**body, "gpu_models": ["A100-40GB", "H100"]})
    assert [e["gpu_model"] for e in chosen.json()["estimates"]] == [
        "NVIDIA A100-SXM4-40GB",
        "NVIDIA H100 80GB HBM3",
    ]


def test_api_bad_specs_are_422_with_every_problem(client: TestClient) -> None:
    bad = {"training": {"model": {"catalog": "resnet50"}, "batch_size": -2, "precision": "fp7"}}
    response = client.post("/v1/estimate", json=bad)
    assert response.status_code == 422
    locations = {tuple(d["loc"]) for d in response.json()["error"]["details"]}
    assert ("body", "training", "batch_size") in locations
    assert ("body", "training", "precision") in locations
    unknown = {"training": {"model": {"catalog": "resnet5"}, "batch_size": 1}}
    response = client.post("/v1/estimate", json=unknown)
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "invalid_training_spec"
    assert "did you mean" in response.json()["error"]["message"]
    tp = {
        "training": {
            "model": {"catalog": "gpt2"},
            "batch_size": 1,
            "seq_len": 64,
            "parallelism": {"tp": 5},
        }
    }
    assert client.post("/v1/estimate", json=tp).json()["error"]["details"]["problems"]
    gpu = {"training": {"model": {"catalog": "resnet50"}, "batch_size": 1}, "gpu_models": ["Z9"]}
    (any_gpu,) = client.post("/v1/estimate", json=gpu).json()["estimates"]  # no GPU is unknown
    assert any_gpu["gpu_model"] == "Z9" and any_gpu["notes"]
