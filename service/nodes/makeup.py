"""The cluster's GPU make-up, as admission and the lifecycle's can-it-ever-fit check
read it: every distinct node make-up once, cached per database.

Submits read it, so reading every GPU row for each was a cost that grew with the
cluster. Only a registration changes what a node holds, and each one records a
`node.registered` event in the same transaction; how many there are and the newest
one's id and time are the cache's key (the count catches a registration that commits
after a later-numbered one; the time, a database emptied and refilled). Every replica
reads that key from the database on each call, so one replica's registration is seen
by all of them at their next call.
"""

from __future__ import annotations

import threading
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from service.events.models import Event
from service.nodes.models import Gpu
from service.scheduler.admission import distinct_nodes

REGISTERED = "node.registered"  # the event service.nodes.service.register records

_lock = threading.Lock()
_cache: dict[str, tuple[tuple[int, int, datetime], list[tuple[int, str, int]]]] = {}


def _read(session: Session) -> list[tuple[int, str, int]]:
    """(node id, model, memory total) of every GPU of one node per distinct node
    make-up: nodes alike answer alike whether a job could ever fit."""
    rows = session.execute(
        select(Gpu.node_id, Gpu.model, Gpu.memory_total_mib).order_by(Gpu.node_id, Gpu.id)
    )
    return distinct_nodes(rows.tuples())


def cluster_gpus(session: Session) -> list[tuple[int, str, int]]:
    """(node id, model, memory total) of the GPUs ever registered, one node of each
    distinct make-up; read again only after a registration."""
    count, newest, at = session.execute(
        select(func.count(Event.id), func.max(Event.id), func.max(Event.at)).where(
            Event.kind == REGISTERED
        )
    ).one()
    if not count:  # nothing registered: nothing to cache
        return _read(session)
    key, version = str(session.get_bind().engine.url), (count, newest, at)
    with _lock:
        cached = _cache.get(key)
    if cached is not None and cached[0] == version:
        return cached[1]
    makeup = _read(session)
    with _lock:
        _cache[key] = (version, makeup)
    return makeup
