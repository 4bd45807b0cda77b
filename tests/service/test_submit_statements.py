"""What one job submit sends to the database, whatever the cluster's size: the cluster
make-up's key, the job and its event; nothing of the estimator for a job it does not
estimate, nothing read back after the commit. (That a job with a training spec is still
estimated with what the estimator learned is tests/service/test_fixed_cost_offsets.py's.)"""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.conftest import register_node, submit
from tests.service.test_heartbeat_cost import statements, without_token_reads


def verbs_and_tables(sent: list[str]) -> list[str]:
    """Each statement's verb and first table, in the order sent, less the reads of API
    tokens (`without_token_reads`) and SQLite's BEGIN, which service.db sends as a
    statement."""
    seen: list[str] = []
    for sql in without_token_reads(sent):
        words = sql.replace('"', "").split()
        verb = words[0].upper()
        if verb == "BEGIN":
            continue
        upper = [w.upper() for w in words]
        key = {"SELECT": "FROM", "INSERT": "INTO"}.get(verb, verb)
        seen.append(f"{verb} {words[upper.index(key) + 1] if key in upper[1:] else ''}")
    return seen


def test_a_plain_submit_sends_three_statements(client: TestClient) -> None:
    for node in ("a", "b"):
        register_node(client, node, [("NVIDIA A100-SXM4-40GB", 40960)] * 4)
    submit(client, memory_mib=1000)  # the token and the cluster's make-up remembered
    with statements() as sent:
        job = submit(client, memory_mib=2000)
    assert verbs_and_tables(sent) == ["SELECT events", "INSERT jobs", "INSERT events"]
    assert job["state"] == "pending" and job["attempts"] == [] and job["estimates"] == []
