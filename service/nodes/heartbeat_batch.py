"""Group commit of heartbeats: those that change no reservation share one transaction.

A heartbeat that changes no reservation is plain writes (GPU readings, the node's last
heartbeat, output, notices, usage), and its cost is mostly the commit's: PostgreSQL's
WAL flush and the round trips around it. So the first heartbeat to arrive leads a
batch: it waits `heartbeat_batch_window_ms` (or until `heartbeat_batch_max` heartbeats
are in), then reads and writes each of them, node by node, in its own session, and
commits once. Every request is answered only after its batch commits, so a reply still
means the report is stored. No thread or connection is added: the leader is a request,
using its request's session, and a follower holds no transaction while it waits (on
SQLite that would be the write lock its leader needs).

What a heartbeat's own report gets wrong is found while it is read, before it writes
anything (service.nodes.service.read), and is its answer alone. One that takes the
placement lock is applied on its own, as it would be unbatched. Any other failure (a
database error, a bad write) rolls the whole batch back, and each of its heartbeats is
then applied on its own by its own request: one node's fault costs the others their
batching, never their report.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from sqlalchemy.orm import Session

from agent.protocol import Heartbeat, HeartbeatReply
from service.config import Settings
from service.errors import ApiError
from service.nodes import service
from service.nodes.models import Node

log = logging.getLogger(__name__)


@dataclass(eq=False)
class _Entry:
    """One request's heartbeat, and its outcome once its batch is done: a reply (stored),
    its own error, or neither (apply it alone)."""

    node_id: int
    body: Heartbeat
    check: Callable[[Node], None]  # may the caller speak for this node (else ApiError)
    done: threading.Event = field(default_factory=threading.Event)
    reply: HeartbeatReply | None = None
    error: ApiError | None = None


class HeartbeatBatcher:
    """The heartbeats of one server process waiting to be committed together."""

    def __init__(self, settings: Settings) -> None:
        self.window_s = settings.heartbeat_batch_window_ms / 1000
        # no more heartbeats than the agents' request slots can be in at once: a batch
        # holding that many closes without waiting out the window
        self.max_batch = min(settings.heartbeat_batch_max, settings.max_requests_in_flight)
        self._open: list[_Entry] | None = None  # the batch a new heartbeat joins
        self._changed = threading.Condition()

    def beat(
        self,
        *,
        session: Session,
        node_id: int,
        body: Heartbeat,
        settings: Settings,
        check: Callable[[Node], None],
    ) -> HeartbeatReply:
        """Apply one heartbeat and answer it once it is committed. `session` must hold no
        transaction: a leader runs its batch in it."""
        entry = _Entry(node_id, body, check)
        with self._changed:
            batch = self._open
            leads = batch is None
            if batch is None:
                batch = self._open = []
            batch.append(entry)
            self._changed.notify_all()
        if leads:
            try:  # whatever happens, the batch closes and its followers are let go
                with self._changed:
                    try:
                        self._changed.wait_for(lambda: len(batch) >= self.max_batch, self.window_s)
                    finally:
                        self._open = None
                self._commit(session, batch, settings)
            finally:
                for each in batch:
                    each.done.set()
        entry.done.wait()
        if entry.error is not None:
            raise entry.error
        if entry.reply is not None:
            return entry.reply
        return _alone(session, entry, settings)

    def _commit(self, session: Session, batch: list[_Entry], settings: Settings) -> None:
        """Read and write every heartbeat in `batch` in one transaction, in node order
        (rows are locked in one order whoever writes them), and commit; on any failure
        but a report's own, roll back and leave each to be applied alone."""
        applied: list[tuple[_Entry, HeartbeatReply]] = []
        try:
            for entry in sorted(batch, key=lambda each: each.node_id):
                try:
                    seen = _read(session, entry, settings)
                except ApiError as exc:  # raised before it wrote: the batch is intact
                    entry.error = exc
                    continue
                if not seen.locks:
                    applied.append(
                        (entry, service.apply(session=session, seen=seen, settings=settings))
                    )
            session.commit()
        except Exception:
            log.warning(
                "%d heartbeats' batch failed: each is applied alone", len(batch), exc_info=True
            )
            session.rollback()
            return
        for entry, reply in applied:
            entry.reply = reply


def _read(session: Session, entry: _Entry, settings: Settings) -> service.Seen:
    node = service.get(session=session, node_id=entry.node_id)
    entry.check(node)
    return service.read(session=session, node=node, body=entry.body, settings=settings)


def _alone(session: Session, entry: _Entry, settings: Settings) -> HeartbeatReply:
    """Apply one heartbeat in a transaction of its own, taking the placement lock if it
    changes a reservation. What a leader's batch loaded is read afresh."""
    session.expire_all()
    seen = _read(session, entry, settings)
    reply = service.apply(session=session, seen=seen, settings=settings)
    session.commit()
    return reply
