"""Two scheduler replicas on one PostgreSQL never promise a GPU's memory twice.

A property check under real concurrency. Removing the advisory lock alone rarely breaks
it (identical plans collide on the attempts' unique key and one rolls back), so the
lock itself is proven by tests/service/test_concurrency.py."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import text

from service.db import make_engine
from tests.conftest import bearer, make_token
from tests.e2e.harness import free_port

GPUS = {"GPU-r1-0": 15360, "GPU-r1-1": 15360, "GPU-r2-0": 40960}


@pytest.fixture
def replicas(tmp_path: Path, database_url: str) -> Iterator[list[str]]:
    if not database_url.startswith("postgresql"):
        pytest.skip("replicas share a PostgreSQL database")
    env = {**os.environ, "COLLOC_SCHEDULE_INTERVAL_S": "0.05", "COLLOC_MAX_JOBS_PER_GPU": "64"}
    servers, urls = [], []
    for i in range(2):
        port = free_port()
        log = open(tmp_path / f"server-{i}.log", "wb")  # noqa: SIM115 (owned by the process)
        servers.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "service.cli",
                    "server",
                    "--port",
                    str(port),
                    "--db",
                    database_url,
                ],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        )
        urls.append(f"http://127.0.0.1:{port}")
    try:
        for url in urls:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if httpx.get(f"{url}/healthz").status_code == 200:
                        break
                except httpx.HTTPError:
                    assert time.monotonic() < deadline, "a replica did not start"
                    time.sleep(0.2)
        yield urls
    finally:
        for server in servers:
            server.terminate()
            server.wait(timeout=30)


@pytest.fixture
def admin(database_url: str) -> dict[str, str]:
    return bearer(make_token(database_url, "admin", "admin"))


def register(url: str, headers: dict[str, str]) -> None:
    for node, prefix in (("r1", "GPU-r1"), ("r2", "GPU-r2")):
        gpus = [
            {
                "uuid": uuid,
                "index": int(uuid[-1]),
                "model": "Tesla T4" if mib < 20000 else "NVIDIA A100-SXM4-40GB",
                "memory_total_mib": mib,
            }
            for uuid, mib in GPUS.items()
            if uuid.startswith(prefix)
        ]
        response = httpx.post(
            f"{url}/v1/nodes/register",
            json={"name": node, "agent_version": "t", "gpus": gpus},
            headers=headers,
        )
        assert response.status_code == 200


def test_concurrent_submissions_never_overcommit_a_gpu(
    replicas: list[str], database_url: str, admin: dict[str, str]
) -> None:
    engine = make_engine(database_url)
    worst: dict[str, int] = {}
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            with engine.connect() as conn:
                rows = conn.execute(
                    text(
                        "SELECT g.uuid, g.memory_total_mib, COALESCE(SUM(a.reserved_mib), 0) "
                        "FROM gpus g LEFT JOIN allocations a ON a.gpu_id = g.id AND a.active "
                        "GROUP BY g.uuid, g.memory_total_mib"
                    )
                )
                for uuid, total, reserved in rows:
                    worst[uuid] = max(worst.get(uuid, 0), int(reserved) - int(total))
            time.sleep(0.02)

    def submit(worker: int) -> None:
        rng = random.Random(worker)
        with httpx.Client(base_url=replicas[worker % 2], timeout=30, headers=admin) as client:
            for i in range(15):
                response = client.post(
                    "/v1/jobs",
                    json={
                        "name": f"w{worker}-{i}",
                        "command": ["true"],
                        "memory_mib": rng.choice([1500, 2500, 4000, 7000]),
                    },
                )
                assert response.status_code == 201, response.text

    # a queue builds up while there are no GPUs; then both replicas see the same nodes
    # arrive at once, and the rest of the jobs come in while they place
    submit(100)
    watcher = threading.Thread(target=watch)
    watcher.start()
    register(replicas[0], admin)
    workers = [threading.Thread(target=submit, args=(w,)) for w in range(8)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    time.sleep(2)  # let both replicas run several more cycles
    stop.set()
    watcher.join()

    with engine.connect() as conn:
        placed = conn.execute(text("SELECT count(*) FROM attempts")).scalar_one()
        pending = conn.execute(
            text("SELECT count(*) FROM jobs WHERE state = 'pending'")
        ).scalar_one()
    engine.dispose()
    assert placed > 10 and pending > 0  # the cluster filled up and jobs had to wait
    assert worst and max(worst.values()) <= 0, worst  # never more reserved than capacity
