"""`colloc up` (what `make run` starts): scheduler plus an agent per packaged node."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import cast

import httpx

from service.cli.up import stop_all
from tests.e2e.harness import FAST, free_port


def colloc_up(port: int, data_dir: Path, stderr: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "service.cli", "up", "--port", str(port), "--data-dir", data_dir],
        env={**os.environ, **FAST},
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
    )


def test_up_serves_the_packaged_cluster_runs_a_job_and_stops(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    up = colloc_up(port, tmp_path / "data", subprocess.DEVNULL)
    try:
        assert up.stdout is not None
        banner = ""
        while "Press Ctrl-C" not in banner:
            line = up.stdout.readline()
            assert line, "colloc up ended before it was ready"
            banner += line
        assert f"{url}/v1" in banner and "dashboard" in banner and "colloc submit" in banner
        token_file = tmp_path / "data" / "admin.token"
        assert str(token_file) in banner and token_file.stat().st_mode & 0o777 == 0o600
        http = httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {token_file.read_text().strip()}"}
        )
        assert httpx.get(f"{url}/v1/admin/cluster").status_code == 401  # auth is on

        deadline = time.monotonic() + 30
        while True:
            nodes = http.get("/v1/admin/cluster").json()["nodes"]
            if len(nodes) == 3 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        models = {gpu["model"] for node in nodes for gpu in node["gpus"]}
        assert len(nodes) >= 2 and len(models) >= 2
        assert (tmp_path / "data" / "colloc.db").exists()

        job = http.post(
            "/v1/jobs",
            json={
                "name": "hello",
                "memory_mib": 2000,
                "command": ["colloc", "simjob", "--peak-mib", "1500", "--seconds", "3"],
            },
        ).json()
        deadline = time.monotonic() + 60
        while http.get(f"/v1/jobs/{job['id']}").json()["state"] != "running":
            assert time.monotonic() < deadline, "the job did not start"
            time.sleep(0.2)
        # a second `colloc up` on the same data directory, or on the same port, is refused
        # at once: it neither says it is up nor touches the running job
        for other_port, data_dir, refusal in [
            (free_port(), tmp_path / "data", f"in use by colloc up (pid {up.pid})"),
            (port, tmp_path / "other-data", f"{url} is taken"),
        ]:
            second = colloc_up(other_port, data_dir, subprocess.PIPE)
            out, err = second.communicate(timeout=60)
            assert second.returncode == 2 and refusal in err, err
            assert "Colloc is up" not in out and "Traceback" not in err
        while http.get(f"/v1/jobs/{job['id']}").json()["state"] != "succeeded":
            assert time.monotonic() < deadline, "the job did not succeed"
            time.sleep(0.2)
    finally:
        up.send_signal(signal.SIGINT)
        assert up.wait(timeout=60) == 0
    try:
        httpx.get(f"{url}/healthz", timeout=2)
        raise AssertionError("the server still answers after colloc up stopped")
    except httpx.HTTPError:
        pass


class IgnoresSigterm:
    """A process that ends only when killed; its wait lets the clock run out."""

    def __init__(self) -> None:
        self.waited: list[float] = []
        self.killed = False

    def poll(self) -> int | None:
        return -signal.SIGKILL if self.killed else None

    def send_signal(self, _signal: int) -> None:
        pass

    def wait(self, timeout: float | None = None) -> int:
        if self.killed:
            return -signal.SIGKILL
        assert timeout is not None
        self.waited.append(timeout)
        time.sleep(timeout)
        raise subprocess.TimeoutExpired("stubborn", timeout)

    def kill(self) -> None:
        self.killed = True


def test_stopping_shares_one_grace_period_among_all_processes() -> None:
    stubborn = [IgnoresSigterm() for _ in range(4)]
    stop_all(cast(list[subprocess.Popen[bytes]], stubborn), grace_s=0.5)
    assert all(process.killed for process in stubborn)
    assert sum(sum(process.waited) for process in stubborn) <= 0.5
