"""Tokens and roles: every endpoint refuses the roles it must refuse, users see only
their own jobs, an agent token speaks for one node, revoked tokens stop working."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.cli import main
from service.cli.server import is_loopback
from tests.conftest import bearer, make_token, register_node, submit
from tests.service.test_auth_cache import frozen_cache
from tests.service.test_lifecycle import GPU0, cycle, exited

ANYONE = {"none", "user", "agent", "admin"}
USERS = {"user", "admin"}
AGENTS = {"agent", "admin"}
ADMINS = {"admin"}

# who may call each operation of the OpenAPI document (admins may call everything)
MATRIX: dict[tuple[str, str], set[str]] = {
    ("POST", "/v1/jobs"): USERS,
    ("GET", "/v1/jobs"): USERS,
    ("GET", "/v1/jobs/{job_id}"): USERS,
    ("POST", "/v1/jobs/{job_id}/cancel"): USERS,
    ("GET", "/v1/jobs/{job_id}/explain"): USERS,
    ("GET", "/v1/jobs/{job_id}/logs"): USERS,
    ("POST", "/v1/jobs/{job_id}/hold"): USERS,
    ("POST", "/v1/jobs/{job_id}/release"): USERS,
    ("POST", "/v1/jobs/{job_id}/requeue"): USERS,
    ("POST", "/v1/jobs/{job_id}/priority"): ADMINS,
    ("POST", "/v1/jobs/{job_id}/trust"): ADMINS,
    ("POST", "/v1/estimate"): USERS,
    ("POST", "/v1/nodes/register"): AGENTS,
    ("POST", "/v1/nodes/{node_id}/heartbeat"): AGENTS,
    ("POST", "/v1/nodes/{name}/cordon"): ADMINS,
    ("POST", "/v1/nodes/{name}/drain"): ADMINS,
    ("POST", "/v1/nodes/{name}/resume"): ADMINS,
    ("GET", "/v1/cluster"): USERS,
    ("GET", "/v1/admin/cluster"): ADMINS,
    ("GET", "/v1/admin/jobs"): ADMINS,
    ("GET", "/v1/admin/utilization"): ADMINS,
    ("GET", "/v1/admin/events"): ADMINS,
    ("GET", "/v1/admin/estimator"): ADMINS,
    ("POST", "/v1/admin/estimator/refit"): ADMINS,
    ("POST", "/v1/admin/estimator/activate"): ADMINS,
    ("GET", "/v1/admin/accounts"): ADMINS,
    ("PUT", "/v1/admin/accounts/{name}"): ADMINS,
    ("DELETE", "/v1/admin/accounts/{name}"): ADMINS,
    ("GET", "/v1/admin/tokens"): ADMINS,
    ("POST", "/v1/admin/tokens"): ADMINS,
    ("DELETE", "/v1/admin/tokens/{token_id}"): ADMINS,
    ("GET", "/metrics"): ADMINS,
    ("GET", "/healthz"): ANYONE,
}


@pytest.fixture
def tokens(database_url: str) -> dict[str, str]:
    """A token per role; the user is "ana", the agent serves node "n1"."""
    return {
        "user": make_token(database_url, "user", "ana"),
        "agent": make_token(database_url, "agent", "n1"),
        "admin": make_token(database_url, "admin", "root"),
    }


def call(client: TestClient, method: str, path: str, token: str | None) -> int:
    headers = bearer(token) if token else {"Authorization": ""}
    body: dict[str, Any] | None = {} if method == "POST" else None
    status: int = client.request(method, path, json=body, headers=headers).status_code
    return status


def test_every_operation_refuses_the_roles_it_must(
    client: TestClient, tokens: dict[str, str]
) -> None:
    node = register_node(client, "n1", [("Tesla T4", 15360)])
    job = submit(client, memory_mib=1000)["id"]
    operations = {
        (method.upper(), path)
        for path, methods in client.get("/openapi.json").json()["paths"].items()
        for method in methods
    }
    assert operations == set(MATRIX), "classify every new endpoint in MATRIX"
    for (method, template), allowed in MATRIX.items():
        path = template.format(job_id=job, node_id=node, name="ana", token_id=999_999)
        for role in ANYONE:
            status = call(client, method, path, tokens.get(role))
            if role in allowed:
                assert status not in (401, 403), (method, template, role, status)
            else:
                assert status == (401 if role == "none" else 403), (method, template, role, status)
    # the page, the API description and the liveness probe are public
    for path in ("/", "/static/app.js", "/openapi.json", "/docs", "/healthz"):
        assert call(client, "GET", path, None) == 200, path


def test_bad_tokens_are_refused_with_a_challenge(client: TestClient, database_url: str) -> None:
    for header in (
        "",
        "Bearer",
        "Bearer colloc_nope",
        "Basic dXNlcjpwYXNz",
        "Bearer " + "x" * 5000,
    ):
        response = client.get("/v1/jobs", headers={"Authorization": header})
        assert response.status_code == 401, header
        assert response.headers["www-authenticate"] == "Bearer"
        assert response.json()["error"]["code"] in ("unauthenticated", "invalid_token")


def test_users_see_and_cancel_only_their_own_jobs(
    client: TestClient, database_url: str, tokens: dict[str, str]
) -> None:
    ana = bearer(tokens["user"])
    bob = bearer(make_token(database_url, "user", "bob"))
    register_node(client, "n1", [("Tesla T4", 15360)])
    mine = client.post("/v1/jobs", json={"name": "a", "command": ["x"]}, headers=ana).json()
    theirs = client.post("/v1/jobs", json={"name": "b", "command": ["x"]}, headers=bob).json()
    assert (mine["owner"], theirs["owner"]) == ("ana", "bob")
    listed = client.get("/v1/jobs", params={"owner": "bob"}, headers=ana).json()
    assert [j["id"] for j in listed["jobs"]] == [mine["id"]] and listed["total"] == 1
    for path in ("", "/explain", "/logs"):
        assert client.get(f"/v1/jobs/{theirs['id']}{path}", headers=ana).status_code == 404
    assert client.post(f"/v1/jobs/{theirs['id']}/cancel", headers=ana).status_code == 404
    assert client.get(f"/v1/jobs/{theirs['id']}").json()["state"] == "pending"  # untouched
    assert client.post(f"/v1/jobs/{mine['id']}/cancel", headers=ana).json()["state"] == (
        "cancelled"
    )
    # an admin sees and may cancel everyone's
    everyone = client.get("/v1/jobs").json()
    assert {j["owner"] for j in everyone["jobs"]} == {"ana", "bob"}
    assert client.post(f"/v1/jobs/{theirs['id']}/cancel").status_code == 200
    # the same Idempotency-Key from two users makes two jobs
    key = {"Idempotency-Key": "k1"}
    first = client.post("/v1/jobs", json={"name": "c", "command": ["x"]}, headers=ana | key)
    second = client.post("/v1/jobs", json={"name": "c", "command": ["x"]}, headers=bob | key)
    assert first.status_code == second.status_code == 201
    assert first.json()["id"] != second.json()["id"]


def test_an_agent_token_speaks_for_its_own_node_only(
    client: TestClient, database_url: str, tokens: dict[str, str]
) -> None:
    agent = bearer(tokens["agent"])  # for node "n1"
    gpus = [{"uuid": GPU0, "index": 0, "model": "Tesla T4", "memory_total_mib": 15360}]
    other = {"name": "n2", "agent_version": "t", "gpus": [{**gpus[0], "uuid": "GPU-n2-0"}]}
    response = client.post("/v1/nodes/register", json=other, headers=agent)
    assert response.status_code == 403 and "n1" in response.json()["error"]["message"]
    n2 = register_node(client, "n2", [("NVIDIA A100-SXM4-40GB", 40960)])  # by an admin
    body = {"name": "n1", "agent_version": "t", "gpus": gpus}
    n1 = client.post("/v1/nodes/register", json=body, headers=agent).json()["node_id"]
    beat: dict[str, list[Any]] = {"gpus": [], "attempts": []}
    assert client.post(f"/v1/nodes/{n1}/heartbeat", json=beat, headers=agent).status_code == 200
    assert client.post(f"/v1/nodes/{n2}/heartbeat", json=beat, headers=agent).status_code == 403
    new_job = {"name": "x", "command": ["x"]}
    assert client.post("/v1/jobs", json=new_job, headers=agent).status_code == 403
    # an attempt on n2 reported by n1's agent changes nothing
    job = submit(client, memory_mib=1000, gpu_models=["A100-40GB"])["id"]
    cycle(client)
    assert client.get(f"/v1/jobs/{job}").json()["attempts"][0]["node"] == "n2"
    report = {"gpus": [], "attempts": [exited(job)]}
    client.post(f"/v1/nodes/{n1}/heartbeat", json=report, headers=agent)
    assert client.get(f"/v1/jobs/{job}").json()["state"] == "placed"


def test_revoked_tokens_stop_working(client: TestClient, database_url: str) -> None:
    from service.auth import tokens as service_tokens
    from service.db import make_engine, make_sessionmaker, transaction

    clock = frozen_cache(client)
    raw = make_token(database_url, "user", "carol")
    assert client.get("/v1/jobs", headers=bearer(raw)).status_code == 200
    engine = make_engine(database_url)
    with transaction(make_sessionmaker(engine)) as session:
        (token,) = [t for t in service_tokens.list_tokens(session) if t.name == "carol"]
        service_tokens.revoke(session, token.id)
    engine.dispose()
    clock.now += service_tokens.PRINCIPAL_TTL_S  # revoked on the database, not through
    # this server: refused once the token it remembers is due to be read again
    response = client.get("/v1/jobs", headers=bearer(raw))
    assert response.status_code == 401 and response.json()["error"]["code"] == "invalid_token"


def test_token_commands(database_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    def colloc(*args: str) -> tuple[int, str, str]:
        with pytest.raises(SystemExit) as ended:
            main([*args, "--db", database_url])
        out, err = capsys.readouterr()
        return int(ended.value.code or 0), out, err

    status, out, _ = colloc("token", "create", "--role", "user", "--name", "dora")
    raw = out.strip().splitlines()[-1]  # the token alone on the last line
    assert status == 0 and raw.startswith("colloc_") and " " not in raw
    status, out, _ = colloc("token", "list")
    (line,) = [row for row in out.splitlines() if "dora" in row]
    assert raw not in out and raw[:13] in line and line.split()[2] == "user"
    token_id = line.split()[0]
    assert colloc("token", "revoke", token_id)[0] == 0
    assert "dora" in colloc("token", "list")[1] and colloc("token", "revoke", "999")[0] == 2
    assert colloc("token", "revoke", str(10**12))[0] == 2  # beyond any id: a message
    status, _, err = colloc("token", "create", "--role", "user", "--name", "x" * 200)
    assert status == 2 and "1 to 128 characters" in err
    with pytest.raises(SystemExit):
        main(["token", "create", "--role", "root", "--name", "x"])  # argparse refuses it


def test_the_server_refuses_auth_off_on_a_public_address(
    database_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLLOC_AUTH_DISABLED", "true")
    with pytest.raises(SystemExit) as ended:
        main(["server", "--host", "0.0.0.0", "--db", database_url])
    assert ended.value.code == 2
    assert "only binds to a loopback address" in capsys.readouterr().err


def test_auth_off_is_a_development_setting(make_client: Any) -> None:
    client = make_client(auth_disabled=True)
    anonymous = {"Authorization": ""}
    assert client.get("/v1/admin/cluster", headers=anonymous).status_code == 200
    job = client.post("/v1/jobs", json={"name": "x", "command": ["x"]}, headers=anonymous)
    assert job.json()["owner"] == "anonymous"
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.1.2.3") and not is_loopback("gpu-1")
