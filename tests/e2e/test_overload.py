"""Overload: 500 clients at once against a real `colloc server`. Every request ends,
served or refused at once with 503 and Retry-After, and the server serves normally
afterwards (before load shedding it deadlocked and never answered again)."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.e2e.harness import LocalColloc

CLIENTS = 500
# a bound on ending at all, not a latency target: 500 answers take seconds
ANSWER_WITHIN_S = 60


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes


@pytest.fixture
def colloc(tmp_path: Path, database_url: str) -> Iterator[LocalColloc]:
    local = LocalColloc(tmp_path, database_url)
    local.start_server()
    try:
        yield local
    finally:
        local.stop()


async def _exchange(colloc: LocalColloc, method: str, path: str, body: bytes) -> Answer:
    """One request on a connection of its own, in plain HTTP/1.1: 500 at once from one
    process, httpx's connection pool would be slower than the server under test."""
    reader, writer = await asyncio.open_connection("127.0.0.1", colloc.port)
    head = (
        f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
        f"Authorization: Bearer {colloc.admin_token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    writer.write(head.encode() + body)
    try:
        data = await reader.read()  # to the end: the server closes after answering
    finally:
        writer.close()
    head_bytes, _, payload = data.partition(b"\r\n\r\n")
    status_line, *header_lines = head_bytes.decode("latin-1").split("\r\n")
    headers = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return Answer(int(status_line.split()[1]), headers, payload)


async def _client(colloc: LocalColloc, n: int) -> Answer | str:
    """A quarter of the clients submit a job, the others list jobs."""
    if n % 4 == 0:
        body = json.dumps({"name": f"load-{n}", "command": ["true"]}).encode()
        request = _exchange(colloc, "POST", "/v1/jobs", body)
    else:
        request = _exchange(colloc, "GET", "/v1/jobs?limit=10", b"")
    try:
        return await asyncio.wait_for(request, ANSWER_WITHIN_S)
    except TimeoutError:
        return f"no answer within {ANSWER_WITHIN_S} s"
    except OSError as exc:
        return f"connection failed: {exc!r}"


async def _all_at_once(colloc: LocalColloc) -> list[Answer | str]:
    return await asyncio.gather(*(_client(colloc, n) for n in range(CLIENTS)))


def test_every_request_ends_and_the_server_serves_afterwards(colloc: LocalColloc) -> None:
    answers = asyncio.run(_all_at_once(colloc))

    unanswered = Counter(a for a in answers if isinstance(a, str))
    assert not unanswered, f"{unanswered}\n{colloc.log('server')}"
    served = [a for a in answers if isinstance(a, Answer) and a.status in (200, 201)]
    refused = [a for a in answers if isinstance(a, Answer) and a.status == 503]
    assert len(served) + len(refused) == CLIENTS, Counter(
        a.status for a in answers if isinstance(a, Answer)
    )
    assert served, "nothing was served"
    for answer in refused:  # shed at once, not a database that timed out
        assert answer.headers.get("retry-after") == "1", answer
        assert json.loads(answer.body)["error"]["code"] == "overloaded", answer

    submitted = colloc.http.post("/v1/jobs", json={"name": "after", "command": ["true"]})
    assert submitted.status_code == 201, submitted.text
    listed = colloc.http.get("/v1/jobs", params={"limit": 1000})
    assert listed.status_code == 200, listed.text
    # a refused submission left nothing behind: the jobs are the served ones and "after"
    names = sorted(job["name"] for job in listed.json()["jobs"])
    created = sum(1 for a in served if a.status == 201)
    assert len(names) == created + 1 and "after" in names, names
