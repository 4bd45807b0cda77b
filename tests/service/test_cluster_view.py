"""The cluster view every user reads (`GET /v1/cluster`, `colloc nodes`): capacity and
load as the admins' view counts them, without naming other users' jobs."""

from __future__ import annotations

import argparse
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.cli import views
from service.cli.errors import CliError
from tests.conftest import bearer, make_token, register_node, submit
from tests.service.test_lifecycle import cycle


def test_a_user_reads_the_cluster_without_others_jobs(
    client: TestClient, database_url: str
) -> None:
    register_node(client, "n1", [("Tesla T4", 15360), ("Tesla T4", 15360)])
    register_node(client, "n2", [("NVIDIA A100-SXM4-40GB", 40960)])
    bob = bearer(make_token(database_url, "user", "bob"))
    body = {"name": "secret-run", "command": ["x"], "memory_mib": 4000, "gpu_models": ["T4"]}
    assert client.post("/v1/jobs", json=body, headers=bob).status_code == 201
    cycle(client)
    ana = bearer(make_token(database_url, "user", "ana"))
    response = client.get("/v1/cluster", headers=ana)
    assert response.status_code == 200
    seen = response.json()
    for hidden in ("bob", "secret-run", "GPU-n1-0", "job_id", "owner", "agent_version"):
        assert hidden not in response.text, hidden
    admin = client.get("/v1/admin/cluster").json()  # the test client's token is an admin's
    assert [n["name"] for n in seen["nodes"]] == [n["name"] for n in admin["nodes"]]
    for mine, full in zip(seen["nodes"], admin["nodes"], strict=True):
        assert mine["state"] == full["state"]
        for gpu, full_gpu in zip(mine["gpus"], full["gpus"], strict=True):
            for key in ("model", "memory_total_mib", "memory_reserved_mib", "memory_free_mib"):
                assert gpu[key] == full_gpu[key], key
    n1, n2 = seen["nodes"]
    assert (n1["running_jobs"], n2["running_jobs"]) == (1, 0)
    reserved = [g for g in n1["gpus"] if g["memory_reserved_mib"] > 0]
    assert len(reserved) == 1 and reserved[0]["memory_reserved_mib"] >= 4000
    assert reserved[0]["running_jobs"] == 1
    only_a100 = client.get("/v1/cluster", params={"gpu_model": "A100-40GB"}, headers=ana)
    assert [n["name"] for n in only_a100.json()["nodes"]] == ["n2"]
    none = client.get("/v1/cluster", params={"gpu_model": "Acme"}, headers=ana).json()
    assert none == {"nodes": []}


def _as(client: TestClient, token: str) -> Any:
    """The CLI's request, answered by the test app with `token`."""

    def request(_args: argparse.Namespace, method: str, path: str, **kwargs: Any) -> Any:
        response = client.request(method, path, headers=bearer(token), **kwargs)
        if response.status_code >= 400:
            raise CliError(f"{response.json()['error']['message']} (HTTP {response.status_code})")
        return response.json()

    return request


def test_colloc_nodes_works_with_a_user_token(
    client: TestClient,
    database_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    register_node(client, "n1", [("Tesla T4", 15360)])
    submit(client, memory_mib=2048)
    cycle(client)
    monkeypatch.setattr(views, "request", _as(client, make_token(database_url, "user", "ana")))
    args = argparse.Namespace(output="table", watch=False, interval=1.0)
    assert views.run_nodes(args) == 0
    header, row = capsys.readouterr().out.splitlines()
    assert header.split() == views.NODE_HEADER
    assert row.split()[:3] == ["n1", "ready", "1xT4"] and row.split()[-1] == "1"
    # the wide view names jobs and agents: an admin's
    with pytest.raises(CliError, match="needs an admin token"):
        views.run_nodes(argparse.Namespace(output="wide", watch=False, interval=1.0))
    monkeypatch.setattr(views, "request", _as(client, make_token(database_url, "admin", "root")))
    assert views.run_nodes(argparse.Namespace(output="wide", watch=False, interval=1.0)) == 0
    header, row = capsys.readouterr().out.splitlines()
    assert header.split() == views.NODE_HEADER + views.NODE_WIDE_HEADER
