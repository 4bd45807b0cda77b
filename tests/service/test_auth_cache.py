"""The in-process cache of authenticated tokens: a cached token is not read again,
a revocation through this server's API refuses the token at once, one made elsewhere
within the cache's time to live."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from fastapi.testclient import TestClient

from service.auth.tokens import PRINCIPAL_TTL_S, Principal, PrincipalCache, hash_of
from tests.conftest import bearer, make_token
from tests.service.test_heartbeat_cost import statements


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def frozen_cache(client: TestClient) -> Clock:
    """Give the client's app a token cache whose clock only the test moves."""
    clock = Clock()
    client.app.state.principals = PrincipalCache(clock=clock)  # type: ignore[attr-defined]
    return clock


@contextmanager
def token_reads() -> Iterator[list[str]]:
    """Statements that read the API tokens table while the block runs."""
    with statements() as seen:
        reads: list[str] = []
        yield reads
    reads.extend(sql for sql in seen if "api_tokens" in sql)


def test_a_cached_token_is_not_read_again(client: TestClient, database_url: str) -> None:
    clock = frozen_cache(client)
    user = bearer(make_token(database_url, "user", "carol"))
    with token_reads() as reads:
        assert client.get("/v1/jobs", headers=user).status_code == 200
    assert len(reads) == 1
    with token_reads() as reads:
        assert client.get("/v1/jobs", headers=user).status_code == 200
        job = {"name": "j", "command": ["true"]}
        assert client.post("/v1/jobs", json=job, headers=user).status_code == 201
    assert reads == []
    clock.now += PRINCIPAL_TTL_S  # expired: read again
    with token_reads() as reads:
        assert client.get("/v1/jobs", headers=user).status_code == 200
    assert len(reads) == 1


def test_unknown_tokens_are_read_each_time(client: TestClient) -> None:
    frozen_cache(client)
    for _ in range(2):
        with token_reads() as reads:
            response = client.get("/v1/jobs", headers=bearer("colloc_not-a-token"))
        assert response.status_code == 401 and len(reads) == 1


def test_revoking_through_the_api_refuses_at_once(client: TestClient) -> None:
    frozen_cache(client)  # a cached token never expires on its own here
    made = client.post("/v1/admin/tokens", json={"role": "user", "name": "carol"}).json()
    assert client.get("/v1/jobs", headers=bearer(made["token"])).status_code == 200
    assert client.delete(f"/v1/admin/tokens/{made['id']}").status_code == 200
    response = client.get("/v1/jobs", headers=bearer(made["token"]))
    assert response.status_code == 401 and response.json()["error"]["code"] == "invalid_token"


def test_another_replica_refuses_a_revoked_token_within_the_ttl(
    make_client: Callable[..., TestClient],
) -> None:
    here, elsewhere = make_client(), make_client()
    clock = frozen_cache(elsewhere)
    made = here.post("/v1/admin/tokens", json={"role": "user", "name": "carol"}).json()
    carol = bearer(made["token"])
    assert elsewhere.get("/v1/jobs", headers=carol).status_code == 200
    assert here.delete(f"/v1/admin/tokens/{made['id']}").status_code == 200
    assert here.get("/v1/jobs", headers=carol).status_code == 401
    clock.now += PRINCIPAL_TTL_S / 2
    assert elsewhere.get("/v1/jobs", headers=carol).status_code == 200  # still cached there
    clock.now += PRINCIPAL_TTL_S / 2
    assert elsewhere.get("/v1/jobs", headers=carol).status_code == 401


def test_the_cache_is_bounded_and_entries_expire() -> None:
    clock = Clock()
    cache = PrincipalCache(ttl_s=2.0, size=2, clock=clock)
    names = [Principal(name=n, role="user") for n in ("a", "b", "c")]
    for principal in names[:2]:
        cache.put(hash_of(principal.name), principal, cache.forgotten)
    cache.put(hash_of("a"), names[0], 0)  # seen again: now the newest
    cache.put(hash_of("c"), names[2], 0)  # full: the oldest, b, goes
    assert [cache.get(hash_of(n)) for n in "abc"] == [names[0], None, names[2]]
    clock.now += 1.0
    cache.put(hash_of("b"), names[1], 0)  # full, none expired: a, the oldest, goes
    assert [cache.get(hash_of(n)) for n in "abc"] == [None, names[1], names[2]]
    clock.now += 1.0  # c's two seconds are up, b has one left
    assert [cache.get(hash_of(n)) for n in "abc"] == [None, names[1], None]
    cache.forget(hash_of("b"))
    assert cache.get(hash_of("b")) is None


def test_a_token_read_before_a_revocation_is_not_remembered_after_it() -> None:
    cache = PrincipalCache()
    carol = Principal(name="carol", role="user")
    forgotten = cache.forgotten  # a request starts reading carol's token
    cache.forget(hash_of("colloc_carol"))  # meanwhile it is revoked through the API
    cache.put(hash_of("colloc_carol"), carol, forgotten)  # the read ends: valid then
    assert cache.get(hash_of("colloc_carol")) is None
    cache.put(hash_of("colloc_carol"), carol, cache.forgotten)
    assert cache.get(hash_of("colloc_carol")) == carol
