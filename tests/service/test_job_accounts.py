"""The server side of jobs running as their owners and of GPU confinement: the
assignment names the Unix account (the owner's name, or the admin's mapping of it);
a job's use of a GPU it was not given counts as foreign use and is an event."""

from __future__ import annotations

from fastapi.testclient import TestClient

from service.cli import main
from tests.conftest import bearer, make_token, register_node
from tests.service.test_lifecycle import GPU0, beat, cycle, running

GPU1 = "GPU-n1-1"


def _submit_as(client: TestClient, token: str) -> int:
    body = {"name": "job", "command": ["true"], "memory_mib": 1000}
    response = client.post("/v1/jobs", json=body, headers=bearer(token))
    assert response.status_code == 201, response.text
    job_id: int = response.json()["id"]
    return job_id


def test_the_assignment_names_the_owners_account_or_its_mapping(
    client: TestClient, database_url: str
) -> None:
    node = register_node(client, "n1", [("Tesla T4", 15360)])
    ana = make_token(database_url, "user", "ana")
    _submit_as(client, ana)
    cycle(client)
    (assignment,) = beat(client, node)["assignments"]
    assert assignment["account"] == "ana"  # by default, the token's name

    reply = client.put("/v1/admin/accounts/ana", json={"account": "ana_hpc"})
    assert reply.status_code == 200 and reply.json()["account"] == "ana_hpc"
    assert [m["name"] for m in client.get("/v1/admin/accounts").json()] == ["ana"]
    _submit_as(client, ana)
    cycle(client)
    accounts = {a["account"] for a in beat(client, node)["assignments"]}
    assert accounts == {"ana_hpc"}  # every assignment from now on, re-sent ones too

    assert client.delete("/v1/admin/accounts/ana").status_code == 204
    assert {a["account"] for a in beat(client, node)["assignments"]} == {"ana"}
    assert client.delete("/v1/admin/accounts/ana").status_code == 404
    # users cannot choose their account
    assert (
        client.put(
            "/v1/admin/accounts/ana", json={"account": "root"}, headers=bearer(ana)
        ).status_code
        == 403
    )


def test_an_account_must_be_a_unix_user_name(client: TestClient) -> None:
    for bad in ("Root", "a b", "../etc", "-rf", "x" * 33, "ana\u0000", ""):
        reply = client.put("/v1/admin/accounts/ana", json={"account": bad})
        assert reply.status_code == 422, (bad, reply.text)
    assert client.get("/v1/admin/accounts").json() == []


def test_account_cli(database_url: str, capsys: object) -> None:
    for argv in (
        ["account", "set", "ana", "ana_hpc", "--db", database_url],
        ["account", "list", "--db", database_url],
        ["account", "unset", "ana", "--db", database_url],
    ):
        try:
            main(argv)
        except SystemExit as exit_:
            assert exit_.code == 0, argv
    out = capsys.readouterr().out  # type: ignore[attr-defined]
    assert "ana_hpc" in out and "run as Unix account 'ana' again" in out
    try:
        main(["account", "set", "ana", "Not A User", "--db", database_url])
    except SystemExit as exit_:
        assert exit_.code == 2
    assert "is not a Unix user name" in capsys.readouterr().err  # type: ignore[attr-defined]


def test_use_of_a_gpu_not_given_is_foreign_use_and_an_event(client: TestClient) -> None:
    node = register_node(client, "n1", [("Tesla T4", 15360), ("Tesla T4", 15360)])
    job = client.post("/v1/jobs", json={"name": "j", "command": ["x"], "memory_mib": 1000})
    job_id = job.json()["id"]
    cycle(client)
    (assignment,) = beat(client, node)["assignments"]
    given, other = assignment["gpu_uuids"][0], ({GPU0, GPU1} - set(assignment["gpu_uuids"])).pop()
    report = {
        **running(job_id),
        "unassigned_mib_by_gpu": {other: 12000},
        "notices": [
            {
                "seq": 1,
                "kind": "unassigned_gpu",
                "gpu_uuid": other,
                "used_mib": 12000,
                "reserved_mib": 0,
                "action": "stop",
                "message": f"used 12000 MiB on GPU {other}, which it was not given",
            }
        ],
    }
    body = {
        "gpus": [
            {"uuid": given, "memory_used_mib": 0},
            {"uuid": other, "memory_used_mib": 12500, "memory_foreign_mib": 500},
        ],
        "attempts": [report],
    }
    assert client.post(f"/v1/nodes/{node}/heartbeat", json=body).status_code == 200
    gpus = {
        gpu["uuid"]: gpu
        for listed in client.get("/v1/admin/cluster").json()["nodes"]
        for gpu in listed["gpus"]
    }
    assert gpus[other]["memory_foreign_mib"] == 12500  # the job's 12000 + 500 of others
    events = client.get("/v1/admin/events", params={"kind": "job.unassigned_gpu"}).json()
    (event,) = events["events"]
    assert event["job_id"] == job_id and "which it was not given" in event["message"]
