"""Load on the service: simulated agents heartbeating every 5 s plus sustained job
submissions, against PostgreSQL on this machine.

    .venv/bin/python bench/load.py [--pg URL] [--steps 100,250,500,1000] [--step-s 30]
                                   [--submit-rate 5]
    .venv/bin/python bench/load.py --nodes 100,1000,10000 [--clients 8] [--phase-s 20]

With `--nodes`, the service's capacity at each cluster size instead (below); without
it, the open-loop steps.

A fresh database is created on the PostgreSQL server at `--pg` (default: the local test
server) and dropped afterwards; `colloc server` runs on it as a process on a loopback
port, with authentication on. Each simulated agent is an asyncio task speaking the real
agent protocol with its own agent token: it registers a node of 4 GPUs, heartbeats every
5 s with its GPU state and the attempts it holds, runs each assignment for 20 s and
reports its exit. Each step runs a number of agents (the first step is the baseline)
plus one submitter at a fixed rate, for a bounded time; nothing but 127.0.0.1 is sent
anything. The agents, the submitter and the server share this machine's cores.

Printed per step: offered and achieved heartbeat rates, heartbeat and submission
latency (p50/p99), errors, placements, the server's mean scheduling-cycle time, and each
p99 as a ratio to the baseline step's. The service is saturated at the first step that
achieves under 95% of the offered heartbeats or whose heartbeat p99 exceeds the 5 s
interval.

Capacity (`--nodes`): for each cluster size a fresh database holds that many nodes of 4
GPUs (inserted directly: registering 10,000 nodes over HTTP takes minutes), a fresh
`colloc server` runs on it, and `--clients` closed-loop clients (each sends its next
request when the last is answered) drive three phases of `--phase-s`: heartbeats of idle
nodes, job submissions, then heartbeats again while the submitted jobs are placed, run
and reported (busy). Each agent's heartbeats stay sequential, as a real agent's are.
Printed per phase: the achieved rate, p50/p99, errors, statements' worth of work
(attempts carried per heartbeat), the server's mean scheduling cycle, and the rate as a
share of pgbench's single-row INSERT rate with as many clients, measured in the same run
on the same server (`bench/pg_baseline.py`). "Needed" is a heartbeat every 5 s from
each node.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from pg_baseline import insert_rate, scratch_database
from prometheus_client.parser import text_string_to_metric_families

from service.auth import tokens
from service.db import make_engine, make_sessionmaker, transaction, upgrade, utcnow
from service.events.models import Event
from service.nodes.makeup import REGISTERED
from service.nodes.models import Gpu, Node

HEARTBEAT_S = 5.0
JOB_SECONDS = 20.0
GPUS = [("NVIDIA A100-SXM4-40GB", 40960), ("Tesla T4", 15360)]
ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Latencies:
    seconds: list[float] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)

    def add(self, started: float, status: int | str) -> None:
        if status in (200, 201):
            self.seconds.append(time.perf_counter() - started)
        else:
            self.errors[str(status)] = self.errors.get(str(status), 0) + 1

    def quantile(self, q: float) -> float:
        if len(self.seconds) < 2:
            return float("nan")
        return statistics.quantiles(self.seconds, n=100, method="inclusive")[round(q * 100) - 1]


@dataclass
class Step:
    agents: int
    heartbeats: Latencies = field(default_factory=Latencies)
    submissions: Latencies = field(default_factory=Latencies)
    placed: int = 0


class Agent:
    """One node's agent, speaking the agent protocol without running anything."""

    def __init__(self, name: str, token: str) -> None:
        self.name = name
        self.headers = {"Authorization": f"Bearer {token}"}
        self.uuids = [f"GPU-{name}-{i}" for i in range(4)]
        self.node_id: int | None = None
        self.running: dict[tuple[int, int], tuple[float, list[str], int]] = {}
        self.exited: dict[tuple[int, int], dict[str, Any]] = {}

    def registration(self) -> dict[str, Any]:
        gpus = [
            {"uuid": uuid_, "index": i, "model": GPUS[i % 2][0], "memory_total_mib": GPUS[i % 2][1]}
            for i, uuid_ in enumerate(self.uuids)
        ]
        return {"name": self.name, "agent_version": "load", "gpus": gpus}

    def heartbeat(self, now: float) -> dict[str, Any]:
        used = dict.fromkeys(self.uuids, 0)
        attempts = []
        for (job_id, attempt), (started, gpus, mib) in list(self.running.items()):
            peaks = {gpu: mib for gpu in gpus}
            if now - started >= JOB_SECONDS:
                del self.running[(job_id, attempt)]
                self.exited[(job_id, attempt)] = {
                    "job_id": job_id,
                    "attempt": attempt,
                    "state": "exited",
                    "exit_code": 0,
                    "outcome": "succeeded",
                    "peak_mib_by_gpu": peaks,
                }
                continue
            for gpu in gpus:
                used[gpu] += mib
            attempts.append(
                {
                    "job_id": job_id,
                    "attempt": attempt,
                    "state": "running",
                    "peak_mib_by_gpu": peaks,
                    "current_mib_by_gpu": peaks,
                }
            )
        gpus_state = [{"uuid": gpu, "memory_used_mib": used[gpu]} for gpu in self.uuids]
        return {"gpus": gpus_state, "attempts": attempts + list(self.exited.values())}

    def apply(self, reply: dict[str, Any], now: float) -> None:
        for done in reply["acknowledged"]:
            self.exited.pop((done["job_id"], done["attempt"]), None)
        for stop in reply["cancellations"]:
            self.running.pop((stop["job_id"], stop["attempt"]), None)
        for assignment in reply["assignments"]:
            key = (assignment["job_id"], assignment["attempt"])
            mib = int(assignment["reserved_mib"] * 0.8)
            self.running.setdefault(key, (now, assignment["gpu_uuids"], mib))


async def timed_post(
    http: httpx.AsyncClient,
    path: str,
    body: dict[str, Any],
    headers: dict[str, str],
    latencies: Latencies,
) -> httpx.Response | None:
    """POST `body`, timing it into `latencies` under its status, or under the error's
    name when no answer came (None then)."""
    started = time.perf_counter()
    try:
        response = await http.post(path, json=body, headers=headers)
    except httpx.HTTPError as exc:
        latencies.add(started, type(exc).__name__)
        return None
    latencies.add(started, response.status_code)
    return response


async def send_heartbeat(
    http: httpx.AsyncClient,
    agent: Agent,
    body: dict[str, Any],
    now: float,
    latencies: Latencies,
) -> int:
    """Post one heartbeat, time it into `latencies` and apply the server's reply to the
    agent; returns how many jobs the reply placed on it."""
    path = f"/v1/nodes/{agent.node_id}/heartbeat"
    response = await timed_post(http, path, body, agent.headers, latencies)
    if response is None or response.status_code != 200:
        return 0
    reply = response.json()
    agent.apply(reply, now)
    return len(reply["assignments"])


async def run_agent(
    http: httpx.AsyncClient, agent: Agent, step: Step, until: float, rng: random.Random
) -> None:
    await asyncio.sleep(rng.uniform(0, HEARTBEAT_S))  # agents start out of step
    while time.monotonic() < until:
        began = time.monotonic()
        body = agent.heartbeat(began)
        step.placed += await send_heartbeat(http, agent, body, began, step.heartbeats)
        await asyncio.sleep(max(0.0, HEARTBEAT_S - (time.monotonic() - began)))


async def run_submitter(
    http: httpx.AsyncClient, headers: dict[str, str], step: Step, rate: float, until: float
) -> None:
    rng = random.Random(step.agents)
    n = 0
    pending: set[asyncio.Task[None]] = set()

    async def submit(i: int) -> None:
        body = {
            "name": f"load-{step.agents}-{i}",
            "command": ["true"],
            "memory_mib": rng.choice([1000, 2000, 4000, 8000]),
        }
        await timed_post(http, "/v1/jobs", body, headers, step.submissions)

    began = time.monotonic()
    while time.monotonic() < until:
        task = asyncio.create_task(submit(n))  # an open-loop arrival, answered or not
        pending.add(task)
        task.add_done_callback(pending.discard)
        n += 1
        await asyncio.sleep(max(0.0, began + n / rate - time.monotonic()))
    await asyncio.gather(*pending)


async def cycle_totals(http: httpx.AsyncClient, headers: dict[str, str]) -> tuple[float, float]:
    """The server's scheduling-cycle time and count so far (NaN when it cannot say)."""
    try:
        text = (await http.get("/metrics", headers=headers, timeout=120)).text
    except httpx.HTTPError:
        return float("nan"), float("nan")
    values = {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name.startswith("colloc_scheduling_cycle_duration_seconds")
    }
    return (
        values.get("colloc_scheduling_cycle_duration_seconds_sum", 0.0),
        values.get("colloc_scheduling_cycle_duration_seconds_count", 0.0),
    )


def bench_client(url: str) -> httpx.AsyncClient:
    """The client both modes drive the server with: connections enough for every
    agent and submitter at once."""
    limits = httpx.Limits(max_connections=256, max_keepalive_connections=256)
    return httpx.AsyncClient(base_url=url, timeout=60, limits=limits)


async def run_steps(
    url: str, admin: dict[str, str], agents: list[Agent], args: argparse.Namespace
) -> list[tuple[Step, float]]:
    """Each step, then a pause for the backlog to drain before the next one starts."""
    results = []
    async with bench_client(url) as http:
        registered = Latencies()
        for agent in agents:
            started = time.perf_counter()
            response = await http.post(
                "/v1/nodes/register", json=agent.registration(), headers=agent.headers
            )
            registered.add(started, response.status_code)
            agent.node_id = response.json()["node_id"]
        print(
            f"registered {len(agents)} nodes ({4 * len(agents)} GPUs): "
            f"p50 {registered.quantile(0.5) * 1000:.0f} ms, errors {registered.errors}\n"
        )
        print(
            "| agents | offered hb/s | achieved hb/s | hb p50 ms | hb p99 ms | hb p99 ratio "
            "| submits/s | submit p50 ms | submit p99 ms | submit p99 ratio | placements "
            "| mean cycle ms | errors |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for count in args.steps:
            step = Step(count)
            rng = random.Random(count)
            before = await cycle_totals(http, admin)
            until = time.monotonic() + args.step_s
            await asyncio.gather(
                *(run_agent(http, agent, step, until, rng) for agent in agents[:count]),
                run_submitter(http, admin, step, args.submit_rate, until),
            )
            after = await cycle_totals(http, admin)
            cycles = after[1] - before[1]
            mean_cycle = (after[0] - before[0]) / cycles if cycles > 0 else float("nan")
            results.append((step, mean_cycle))
            report_step(step, mean_cycle, args, results[0][0])
            await asyncio.sleep(HEARTBEAT_S)
    return results


def report_step(step: Step, mean_cycle_s: float, args: argparse.Namespace, base: Step) -> None:
    offered = step.agents / HEARTBEAT_S
    achieved = len(step.heartbeats.seconds) / args.step_s
    hb99, sub99 = step.heartbeats.quantile(0.99), step.submissions.quantile(0.99)
    print(
        f"| {step.agents} | {offered:.0f} | {achieved:.1f} "
        f"| {step.heartbeats.quantile(0.5) * 1000:.0f} | {hb99 * 1000:.0f} "
        f"| {hb99 / base.heartbeats.quantile(0.99):.2f} "
        f"| {len(step.submissions.seconds) / args.step_s:.1f} "
        f"| {step.submissions.quantile(0.5) * 1000:.0f} | {sub99 * 1000:.0f} "
        f"| {sub99 / base.submissions.quantile(0.99):.2f} "
        f"| {step.placed} | {mean_cycle_s * 1000:.0f} "
        f"| {sum(step.heartbeats.errors.values()) + sum(step.submissions.errors.values())} |",
        flush=True,
    )


def start_server(database_url: str, port: int) -> subprocess.Popen[bytes]:
    """`colloc server` on `database_url`, answering /healthz (or SystemExit)."""
    env = {
        **os.environ,
        "COLLOC_HEARTBEAT_INTERVAL_S": str(HEARTBEAT_S),
        "COLLOC_NODE_LEASE_S": "3600",  # agents idle between steps are not lost
    }
    log = open(ROOT / "bench" / ".load-server.log", "wb")  # noqa: SIM115
    server = subprocess.Popen(
        [sys.executable, "-m", "service.cli", "server", "--port", str(port), "--db",
         database_url],
        env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                return server
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline or server.poll() is not None:
            stop_server(server)
            raise SystemExit("the server did not start; see bench/.load-server.log")
        time.sleep(0.3)


def stop_server(server: subprocess.Popen[bytes]) -> None:
    server.terminate()
    try:
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:  # still answering a backlog
        server.kill()
        server.wait()


def seed_nodes(database_url: str, count: int) -> tuple[str, list[Agent]]:
    """`count` ready nodes of 4 GPUs with their registration events, inserted in bulk,
    and an admin token; agents speak for their nodes with the admin token (an admin may
    call every endpoint)."""
    engine = make_engine(database_url)
    now = utcnow()
    with transaction(make_sessionmaker(engine)) as session:
        admin_token = tokens.create(session, role="admin", name="load")[1]
        agents = [Agent(f"load-{i:05d}", admin_token) for i in range(count)]
        node_ids = session.scalars(
            Node.__table__.insert().returning(Node.__table__.c.id),
            [
                {"name": a.name, "state": "ready", "agent_version": "load",
                 "registered_at": now, "last_heartbeat_at": now}
                for a in agents
            ],
        ).all()  # fmt: skip
        gpus = []
        for agent, node_id in zip(agents, node_ids, strict=True):
            agent.node_id = node_id
            for info in agent.registration()["gpus"]:
                gpus.append({**info, "node_id": node_id, "memory_used_mib": 0,
                             "memory_foreign_mib": 0, "utilization_pct": 0.0,
                             "healthy": True, "updated_at": now})  # fmt: skip
        session.execute(Gpu.__table__.insert(), gpus)
        session.execute(  # as registration records it
            Event.__table__.insert(),
            [
                {"at": now, "kind": REGISTERED, "node_id": agent.node_id,
                 "message": f"node {agent.name} registered with 4 GPU(s)", "data": {}}
                for agent in agents
            ],
        )  # fmt: skip
    engine.dispose()
    return admin_token, agents


@dataclass
class Phase:
    name: str
    latencies: Latencies = field(default_factory=Latencies)
    attempts_carried: int = 0
    placed: int = 0


async def heartbeat_clients(
    http: httpx.AsyncClient, agents: list[Agent], clients: int, phase: Phase, until: float
) -> None:
    """`clients` closed loops over the agents, each agent's heartbeats one at a time."""
    free: asyncio.Queue[Agent] = asyncio.Queue()
    for agent in agents:
        free.put_nowait(agent)

    async def loop() -> None:
        while time.monotonic() < until:
            agent = await free.get()
            now = time.monotonic()
            body = agent.heartbeat(now)
            phase.attempts_carried += len(body["attempts"])
            phase.placed += await send_heartbeat(http, agent, body, now, phase.latencies)
            free.put_nowait(agent)

    await asyncio.gather(*(loop() for _ in range(clients)))


async def submit_clients(
    http: httpx.AsyncClient, headers: dict[str, str], clients: int, phase: Phase, until: float
) -> None:
    rng = random.Random(clients)

    async def loop(client: int) -> None:
        n = 0
        while time.monotonic() < until:
            body = {
                "name": f"load-{client}-{n}",
                "command": ["true"],
                "memory_mib": rng.choice([1000, 2000, 4000, 8000]),
            }
            n += 1
            await timed_post(http, "/v1/jobs", body, headers, phase.latencies)

    await asyncio.gather(*(loop(client) for client in range(clients)))


async def run_phases(
    url: str, admin: dict[str, str], agents: list[Agent], args: argparse.Namespace
) -> list[tuple[Phase, float]]:
    results = []
    async with bench_client(url) as http:
        for name in ("idle heartbeats", "submits", "busy heartbeats"):
            phase = Phase(name)
            before = await cycle_totals(http, admin)
            until = time.monotonic() + args.phase_s
            if name == "submits":
                await submit_clients(http, admin, args.clients, phase, until)
            else:
                await heartbeat_clients(http, agents, args.clients, phase, until)
            after = await cycle_totals(http, admin)
            cycles = after[1] - before[1]
            results.append((phase, (after[0] - before[0]) / cycles if cycles else float("nan")))
    return results


def capacity(args: argparse.Namespace) -> None:
    """The closed-loop capacity at each cluster size, beside pgbench's INSERT rate."""
    with scratch_database(args.pg, "colloc_bench_pgbench") as scratch:
        inserts_s = insert_rate(scratch, args.clients, args.pgbench_s)
    print(
        f"pgbench single-row INSERT, {args.clients} clients, {args.pgbench_s} s: "
        f"{inserts_s:.0f}/s\n{args.clients} closed-loop clients, {args.phase_s:g} s a phase\n"
    )
    print(
        "| nodes (GPUs) | phase | needed/s | achieved/s | share of INSERT rate | p50 ms "
        "| p99 ms | attempts per hb | placements | mean cycle ms | errors |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for count in args.nodes:
        with scratch_database(args.pg, "colloc_load") as scratch:
            upgrade(scratch.url)
            admin_token, agents = seed_nodes(scratch.url, count)
            server = start_server(scratch.url, args.port)
            try:
                admin = {"Authorization": f"Bearer {admin_token}"}
                url = f"http://127.0.0.1:{args.port}"
                results = asyncio.run(run_phases(url, admin, agents, args))
            finally:
                stop_server(server)
        for phase, mean_cycle_s in results:
            rate = len(phase.latencies.seconds) / args.phase_s
            heartbeats = "heartbeats" in phase.name
            needed = f"{count / HEARTBEAT_S:.0f}" if heartbeats else "1000"
            carried = phase.attempts_carried / max(1, len(phase.latencies.seconds))
            print(
                f"| {count} ({4 * count}) | {phase.name} | {needed} | {rate:.1f} "
                f"| {rate / inserts_s:.1%} | {phase.latencies.quantile(0.5) * 1000:.0f} "
                f"| {phase.latencies.quantile(0.99) * 1000:.0f} "
                f"| {carried:.1f} | {phase.placed} | {mean_cycle_s * 1000:.0f} "
                f"| {phase.latencies.errors or 0} |",
                flush=True,
            )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--steps", default="100,250,500,1000")
    parser.add_argument("--step-s", type=float, default=30.0)
    parser.add_argument("--submit-rate", type=float, default=5.0)
    parser.add_argument("--port", type=int, default=18765)
    parser.add_argument("--nodes", help="capacity at these cluster sizes, e.g. 100,1000,10000")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--phase-s", type=float, default=20.0)
    parser.add_argument("--pgbench-s", type=int, default=10)
    args = parser.parse_args()
    args.steps = [int(n) for n in args.steps.split(",")]
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # still drop the database
    if args.nodes:
        args.nodes = [int(n) for n in args.nodes.split(",")]
        if max(args.nodes) > 10_000 or args.phase_s > 300 or not 1 <= args.clients <= 64:
            parser.error("bounded: at most 10,000 nodes, 300 s a phase, 1 to 64 clients")
        capacity(args)
        return
    if args.step_s > 300 or max(args.steps) > 2000:
        parser.error("bounded: at most 2,000 agents and 300 s a step")

    with scratch_database(args.pg, "colloc_load") as scratch:
        steps(args, scratch.url, scratch.name)


def steps(args: argparse.Namespace, database_url: str, name: str) -> None:
    """The open-loop steps on the database at `database_url`."""
    server = None
    try:
        upgrade(database_url)
        engine = make_engine(database_url)
        with transaction(make_sessionmaker(engine)) as session:
            admin_token = tokens.create(session, role="admin", name="load")[1]
            agents = [
                Agent(
                    f"load-{i:04d}", tokens.create(session, role="agent", name=f"load-{i:04d}")[1]
                )
                for i in range(max(args.steps))
            ]
        engine.dispose()
        url = f"http://127.0.0.1:{args.port}"
        server = start_server(database_url, args.port)
        admin = {"Authorization": f"Bearer {admin_token}"}
        print(
            f"PostgreSQL database {name}; heartbeat every {HEARTBEAT_S:g} s; "
            f"{args.submit_rate:g} submissions/s; {args.step_s:g} s per step\n"
        )
        results = asyncio.run(run_steps(url, admin, agents, args))
        saturated = next(
            (
                step.agents
                for step, _cycle in results
                if len(step.heartbeats.seconds) / args.step_s < 0.95 * step.agents / HEARTBEAT_S
                or step.heartbeats.quantile(0.99) > HEARTBEAT_S
            ),
            None,
        )
        print(
            f"\nsaturated at {saturated} agents"
            if saturated
            else f"\nnot saturated up to {max(args.steps)} agents"
        )
        for step, _cycle in results:
            errors = {**step.heartbeats.errors, **step.submissions.errors}
            if errors:
                print(f"errors at {step.agents} agents: {errors}")
    finally:
        if server is not None:
            stop_server(server)


if __name__ == "__main__":
    main()
