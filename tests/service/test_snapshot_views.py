"""The snapshot reader keeps a GPU's view between reads while its row and holdings are
unchanged: a change to either (a heartbeat's memory, health, a placement) is seen by
the next read, and a kept view equals one made afresh."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update

from service.db import transaction
from service.nodes.models import Gpu
from service.scheduler.snapshot import GpuView
from service.scheduling import snapshot_reader
from tests.conftest import register_node, submit
from tests.service.test_lifecycle import cycle

T4 = "Tesla T4"


def _views(client: TestClient) -> dict[str, GpuView]:
    """Every GPU's view by uuid, as a cycle's snapshot reads it."""
    with transaction(client.app.state.sessions) as session:  # type: ignore[attr-defined]
        gpus = snapshot_reader.read_snapshot(session, 0).gpus
    return {view.uuid: view for view in gpus.values()}


def _fresh(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> dict[str, GpuView]:
    """The views made anew, none kept from an earlier read."""
    monkeypatch.setattr(snapshot_reader, "_last_views", {})
    return _views(client)


def test_a_changed_row_is_seen_by_the_next_read(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    node_id = register_node(client, "n1", [(T4, 15360), (T4, 15360)])
    first = _views(client)
    again = _views(client)
    assert again["GPU-n1-0"] is first["GPU-n1-0"]  # unchanged: kept
    assert again["GPU-n1-1"] is first["GPU-n1-1"]

    beat = {"gpus": [{"uuid": "GPU-n1-0", "memory_used_mib": 5000}], "attempts": []}
    assert client.post(f"/v1/nodes/{node_id}/heartbeat", json=beat).status_code == 200
    seen = _views(client)
    assert seen["GPU-n1-0"].used_mib == 5000
    assert seen["GPU-n1-1"] is first["GPU-n1-1"]
    assert seen == _fresh(client, monkeypatch)

    with transaction(client.app.state.sessions) as session:  # type: ignore[attr-defined]
        session.execute(update(Gpu).where(Gpu.uuid == "GPU-n1-1").values(healthy=False))
    seen = _views(client)
    assert not seen["GPU-n1-1"].healthy
    assert seen == _fresh(client, monkeypatch)

    submit(client, memory_mib=4000)
    cycle(client)  # a reservation: the GPU's row is as it was, its holdings are not
    seen = _views(client)
    placed = seen["GPU-n1-0"]
    assert (placed.reserved_mib, placed.jobs) == (4000, 1)
    assert seen == _fresh(client, monkeypatch)
