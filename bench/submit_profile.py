"""Where one job submit's server CPU and database round trips go (issue 19).

    .venv/bin/python bench/submit_profile.py [--nodes 100,1000] [--submits 500]
    .venv/bin/py-spy record -r 250 -f raw -o submit.txt -- .venv/bin/python bench/submit_profile.py

In process, with no HTTP socket: the app on a scratch PostgreSQL database seeded as
bench/load.py seeds it, called through a TestClient with bench/load.py's submit body.
It prints, per cluster size, the statements one submit sends (counted by a SQLAlchemy
`before_cursor_execute` listener, the connection pool's pre-ping included, BEGIN and
COMMIT not: psycopg sends those without a cursor) and the process CPU per submit, which
includes the TestClient's side. CPU time is less noisy than throughput on a machine
others share, so compare versions by it. The server runs on the TestClient's event
loop thread and worker threads, which cProfile does not see: sample it with py-spy.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from typing import Any

from fastapi.testclient import TestClient
from load import seed_nodes
from pg_baseline import scratch_database
from sqlalchemy import Engine, event

from service.app import create_app
from service.config import Settings
from service.db import upgrade


def _kind(statement: str) -> str:
    """The statement's verb and first table named."""
    words = statement.replace("(", " ").split()
    after = {"SELECT": "FROM", "INSERT": "INTO", "UPDATE": "UPDATE", "DELETE": "FROM"}
    verb = words[0].upper() if words else "?"
    key = after.get(verb)
    upper = [w.upper() for w in words]
    table = words[upper.index(key) + 1] if key in upper[1:] else ""
    return f"{verb} {table}".strip()


def measure(url: str, count: int, submits: int) -> None:
    upgrade(url)
    token = seed_nodes(url, count)[0]
    settings = Settings(database_url=url, scheduler_enabled=False)
    app = create_app(settings)
    statements: Counter[str] = Counter()

    def counted(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        statements[_kind(statement)] += 1

    headers = {"Authorization": f"Bearer {token}"}
    with TestClient(app, headers=headers) as client:

        def submit(i: int) -> None:
            body = {"name": f"p-{i}", "command": ["true"], "memory_mib": 1000 * (1 + i % 8)}
            response = client.post("/v1/jobs", json=body)
            assert response.status_code == 201, response.text

        for i in range(50):  # warm: caches filled, pool connections made
            submit(i)
        event.listen(Engine, "before_cursor_execute", counted)
        submit(50)
        event.remove(Engine, "before_cursor_execute", counted)
        cpu, wall = time.process_time(), time.perf_counter()
        for i in range(submits):
            submit(100 + i)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    print(
        f"{count} nodes: {sum(statements.values())} statements a submit "
        f"({', '.join(f'{k} x{n}' for k, n in sorted(statements.items()))}); "
        f"{cpu / submits * 1000:.2f} ms CPU and {wall / submits * 1000:.2f} ms wall a submit"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--nodes", default="100,1000")
    parser.add_argument("--submits", type=int, default=500)
    args = parser.parse_args()
    for count in (int(n) for n in args.nodes.split(",")):
        with scratch_database(args.pg, "colloc_submit_profile") as scratch:
            measure(scratch.url, count, args.submits)


if __name__ == "__main__":
    main()
