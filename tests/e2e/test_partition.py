"""At most once across a network partition longer than the node's lease, with real
processes: a TCP proxy between one agent and the server drops everything while cut.

The agent fences its jobs before the lease ends; the server reruns them elsewhere only
after that; the jobs that exited 0 during the partition are taken late, never rerun.
Each job process appends the time to its attempt's record every 0.1 s, so the records
show whether two attempts of a job ever ran at once."""

from __future__ import annotations

import contextlib
import itertools
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import FINAL, LocalColloc
from tests.e2e.test_faults import all_jobs, check_reservations

# lease 4 s with 0.5 s heartbeats: the agent fences 1 s before it ends; no back-off
# after a lost attempt, so only the fencing margin keeps a rerun from starting early
ENV = {"COLLOC_NODE_LEASE_S": "4", "COLLOC_OOM_BACKOFF_S": "0"}
A100, T4 = "NVIDIA A100-SXM4-40GB", "Tesla T4"

# a job that records itself until the file named by its kind appears, then exits 0
JOB = """
import os, sys, time
from pathlib import Path
records, kind = Path(sys.argv[1]), sys.argv[2]
name = f"job-{os.environ['COLLOC_JOB_ID']}-attempt-{os.environ['COLLOC_ATTEMPT']}"
while True:
    with open(records / f"{name}.times", "a") as out:
        out.write(f"{time.time()}\\n")
    if (records / kind).exists():
        (records / f"{name}.done").touch()
        sys.exit(0)
    time.sleep(0.1)
"""


class Partition:
    """A TCP proxy in front of the server. `cut()` drops every byte either way (requests
    go unanswered, as across a partition; nothing is refused) until `heal()`."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.cut_off = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def cut(self) -> None:
        self.cut_off.set()

    def heal(self) -> None:
        self.cut_off.clear()

    def close(self) -> None:
        self.listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
        except OSError:
            client.close()
            return
        for source, sink in ((client, upstream), (upstream, client)):
            threading.Thread(target=self._pipe, args=(source, sink), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                if not self.cut_off.is_set():
                    sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)


@pytest.fixture
def colloc(tmp_path: Path, database_url: str) -> Iterator[LocalColloc]:
    local = LocalColloc(tmp_path, database_url, ENV)
    local.start_server()
    try:
        yield local
    finally:
        local.stop()


def submit(colloc: LocalColloc, records: Path, kind: str, models: list[str]) -> int:
    body = {
        "name": kind,
        "memory_mib": 8000,
        "gpu_models": models,
        "command": [sys.executable, "-c", JOB, str(records), kind],
    }
    response = colloc.http.post("/v1/jobs", json=body)
    assert response.status_code == 201, response.text
    return int(response.json()["id"])


def wait(colloc: LocalColloc, what: str, done: Any, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, f"never {what}: " + colloc.log("server")[-3000:]
        time.sleep(0.2)


def runs(records: Path, job_id: int) -> list[tuple[float, float, int]]:
    """(first, last) record times of each attempt of the job, and its number."""
    spans = []
    for path in records.glob(f"job-{job_id}-attempt-*.times"):
        times = [float(line) for line in path.read_text().split()]
        spans.append((times[0], times[-1], int(path.stem.rsplit("-", 1)[1])))
    return sorted(spans)


def test_a_partition_longer_than_the_lease_runs_no_job_twice(
    colloc: LocalColloc, tmp_path: Path
) -> None:
    records = tmp_path / "records"
    records.mkdir()
    partition = Partition(colloc.port)
    try:
        colloc.start_agent("node-a", "--server", partition.url)
        # two jobs that finish during the partition (they can run on node-a only) and
        # two that outlive it (they may move to node-b's T4s)
        short = [submit(colloc, records, "short", [A100]) for _ in range(2)]
        long = [submit(colloc, records, "long", [A100, T4]) for _ in range(2)]
        for job in short + long:
            colloc.wait_for(job, {"running"})
        colloc.start_agent("node-b")

        partition.cut()
        (records / "short").touch()  # the short jobs exit 0 with nobody to tell
        wait(
            colloc,
            "ran the long jobs on node-b",
            lambda: all(
                len(j["attempts"]) == 2 and j["attempts"][1]["state"] == "running"
                for j in map(colloc.job, long)
            ),
        )
        for job in short:  # no other node may run them: lost, waiting
            assert colloc.job(job)["state"] == "pending"
        partition.heal()

        for job in short:  # the success is taken late
            done = colloc.wait_for(job, FINAL)
            assert done["state"] == "succeeded"
            assert [a["state"] for a in done["attempts"]] == ["succeeded"], done
        (records / "long").touch()
        for job in long:
            done = colloc.wait_for(job, FINAL)
            assert [a["state"] for a in done["attempts"]] == ["lost", "succeeded"], done
            assert done["attempts"][1]["node"] == "node-b"
        check_reservations(colloc)
    finally:
        partition.close()

    for job in short + long:
        spans = runs(records, job)
        for (_, ended, before), (began, _, after) in itertools.pairwise(spans):
            assert ended < began, f"job {job}: attempts {before} and {after} ran at once"
        exited_0 = [a for a in range(1, 3) if (records / f"job-{job}-attempt-{a}.done").exists()]
        assert len(exited_0) == 1, f"job {job} exited 0 in attempts {exited_0}"  # never again
    assert [len(runs(records, job)) for job in short] == [1, 1]
    assert "fenced" in colloc.log("agent-node-a")
    assert {j["state"] for j in all_jobs(colloc)} == {"succeeded"}
