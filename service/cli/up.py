"""`colloc up`: the scheduler on SQLite plus one simulated agent per node, on one machine."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

import httpx
from sqlalchemy.orm import Session, sessionmaker

from agent.cluster import PACKAGED_CLUSTER, ClusterFileError, load_cluster
from agent.instance_lock import DirectoryInUse, DirectoryLock
from service.auth import tokens
from service.cli.errors import CliError
from service.cli.server import database_errors, settings_for
from service.db import make_engine, make_sessionmaker, transaction, upgrade

# a copy of examples/job.yaml shipped in the package: `pip install colloc` has no examples/
EXAMPLE_JOB = Path(__file__).with_name("example-job.yaml")


def _start(*args: str) -> subprocess.Popen[bytes]:
    """Run `colloc ARGS` with this Python, its scripts (`colloc`) on PATH for jobs; without
    a COLLOC_TOKEN of the caller's (the admin's, likely), so agents use their own."""
    scripts = str(Path(sys.executable).parent)
    env = {k: v for k, v in os.environ.items() if k != "COLLOC_TOKEN"}
    env["PATH"] = os.pathsep.join([scripts, os.environ.get("PATH", "")])
    return subprocess.Popen([sys.executable, "-m", "service.cli", *args], env=env)


def _answering_pid(response: httpx.Response) -> object:
    try:
        return response.json().get("pid")
    except (ValueError, AttributeError):  # not Colloc's /healthz
        return None


def _wait_healthy(url: str, server: subprocess.Popen[bytes], timeout_s: float = 60) -> None:
    """Until the server started here answers: /healthz names the process answering, so
    another server already on the port (whose /healthz answers too) is an error."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            response = httpx.get(f"{url}/healthz", timeout=2)
        except httpx.HTTPError:
            response = None
        if response is not None and response.status_code == 200:
            if _answering_pid(response) == server.pid:
                return
            raise CliError(
                f"{url} is taken: another server answers there (another `colloc up`?); "
                "stop it, or give this one another --port",
                2,
            )
        if server.poll() is not None:
            raise CliError(f"the server exited with status {server.returncode} while starting")
        time.sleep(0.3)
    raise CliError(f"the server did not answer at {url} within {timeout_s:.0f} s")


def _token_file(sessions: sessionmaker[Session], path: Path, role: str, name: str) -> Path:
    """`path`, holding a valid token of `role` for `name`: the one already there, or a
    new one (readable by this user only)."""
    with transaction(sessions) as session:
        if path.exists() and tokens.is_valid(session, path.read_text(encoding="utf-8").strip()):
            return path
        _token, raw = tokens.create(session, role=role, name=name)
    path.touch(mode=0o600)
    path.chmod(0o600)
    path.write_text(raw + "\n", encoding="utf-8")
    return path


def stop_all(processes: list[subprocess.Popen[bytes]], grace_s: float = 20.0) -> None:
    """SIGTERM every process (agents first), then SIGKILL whatever has not ended when
    one grace period shared by all of them is over: Ctrl-C never waits a grace period
    per process (with four processes that could take 80 s)."""
    for process in reversed(processes):
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for process in reversed(processes):
        try:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def run_up(args: argparse.Namespace) -> int:
    cluster: Path = args.cluster or PACKAGED_CLUSTER
    try:
        nodes = load_cluster(cluster)
    except ClusterFileError as exc:
        raise CliError(str(exc), 2) from exc
    data_dir: Path = args.data_dir.resolve()
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)  # the database and every token
    try:  # held until this process ends: a second `colloc up` must not share its agents' jobs
        _lock = DirectoryLock(data_dir, "colloc up", "--data-dir")
    except DirectoryInUse as exc:
        raise CliError(str(exc), 2) from exc
    url = f"http://{args.host}:{args.port}"
    database_url = f"sqlite:///{data_dir / 'colloc.db'}"
    auth = not settings_for(database_url).auth_disabled
    token_files: dict[str, Path] = {}
    if auth:
        with database_errors():
            upgrade(database_url)
            sessions = make_sessionmaker(make_engine(database_url))
            token_files["admin"] = _token_file(sessions, data_dir / "admin.token", "admin", "admin")
            for node in nodes:
                path = data_dir / f"agent-{node.name}.token"
                token_files[node.name] = _token_file(sessions, path, "agent", node.name)
    processes: list[subprocess.Popen[bytes]] = []

    def _interrupt(_signum: int, _frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _interrupt)
    try:
        server = _start(
            "server",
            "--host",
            args.host,
            "--port",
            str(args.port),
            "--db",
            database_url,
            "--log-level",
            args.log_level,
        )
        processes.append(server)
        _wait_healthy(url, server)
        for node in nodes:
            processes.append(
                _start(
                    "agent",
                    "--server",
                    url,
                    "--simulate",
                    str(cluster),
                    "--node",
                    node.name,
                    "--sim-state",
                    str(data_dir / "sim"),
                    "--state-dir",
                    str(data_dir / "agents" / node.name),
                    "--logs-dir",
                    str(data_dir / "logs" / node.name),
                    "--work-dir",
                    str(data_dir / "work" / node.name),
                    # one machine, one `colloc up` on its data directory (the lock above):
                    # nothing outlives it, not even jobs a killed earlier one left running
                    "--stop-jobs-on-exit",
                    "--stop-adopted-jobs-on-exit",
                    # one user: every job runs as whoever started `colloc up`, root included
                    "--run-jobs-as",
                    "agent",
                    "--allow-root-jobs",
                    *(["--token-file", str(token_files[node.name])] if auth else []),
                )
            )
        gpus = sum(len(node.gpus) for node in nodes)
        example = data_dir / EXAMPLE_JOB.name
        example.write_bytes(EXAMPLE_JOB.read_bytes())
        colloc = Path(sys.executable).parent / "colloc"  # the one installed beside this Python
        client_env = f"COLLOC_SERVER={url}"
        if auth:
            client_env = f"export {client_env} COLLOC_TOKEN=$(cat {token_files['admin']}); "
            login = f" (log in with the admin token in {token_files['admin']})"
        else:
            client_env += " "
            login = " (authentication is OFF: development setting)"
        print(
            f"\nColloc is up: {len(nodes)} simulated node(s), {gpus} GPU(s), data in {data_dir}\n"
            f"  API:       {url}/v1  (OpenAPI at {url}/docs)\n"
            f"  dashboard: {url}/{login}\n"
            f"  submit:    {client_env}{colloc} submit {example}\n"
            f"  watch:     {colloc} jobs --watch   (and {colloc} nodes)\n"
            "Press Ctrl-C to stop.\n",
            flush=True,
        )
        while all(process.poll() is None for process in processes):
            time.sleep(0.5)
        dead = next(p for p in processes if p.poll() is not None)
        role = "the server" if dead is server else "an agent"
        raise CliError(f"{role} (pid {dead.pid}) exited with status {dead.returncode}")
    except KeyboardInterrupt:
        print("stopping Colloc", flush=True)
        return 0
    finally:
        stop_all(processes)
