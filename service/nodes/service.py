"""Agent registration and heartbeats: GPU state in; assignments and cancellations out.

Agents pull: a heartbeat carries what the agent knows of every attempt it holds, and
the reply carries what it should start or stop. Heartbeats from one agent are
sequential, so an attempt the server placed on a node and that the node does not
report is one the agent has not started (re-sent) or no longer runs (lost).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import bindparam, select, update
from sqlalchemy.orm import Session, joinedload, selectinload
from sqlalchemy.orm.attributes import set_committed_value

from agent.protocol import (
    Assignment,
    AttemptRef,
    AttemptReport,
    GpuState,
    Heartbeat,
    HeartbeatReply,
    LogOffsets,
    NodeRegister,
    Notice,
    sum_known,
)
from service.auth.accounts import accounts_for
from service.config import Settings
from service.db import lock_placements, utcnow
from service.errors import ApiError, not_found
from service.events.service import record
from service.jobs import lifecycle as jobs
from service.jobs.models import Allocation, Attempt, Job
from service.logs import service as logs
from service.nodes.makeup import REGISTERED
from service.nodes.models import Gpu, Node
from service.scheduler.lifecycle import followed_reservation
from service.scheduler.states import ACTIVE_ATTEMPT_STATES, AttemptState

# a heartbeat's writes of its node's row and (executemany) its GPUs' rows, run on the
# session's connection as core statements
_NODE_SEEN = update(Node).where(Node.id == bindparam("node_id"))
_GPU_READING = update(Gpu).where(Gpu.id == bindparam("gpu_id"))


def _reject_duplicates(uuids: list[str]) -> None:
    duplicates = sorted({uuid for uuid in uuids if uuids.count(uuid) > 1})
    if duplicates:
        raise ApiError(422, "duplicate_gpu", f"GPU(s) listed twice: {', '.join(duplicates)}")


def register(*, session: Session, body: NodeRegister) -> Node:
    """Create or refresh a node and its GPUs (agents re-register after restarts)."""
    _reject_duplicates([gpu.uuid for gpu in body.gpus])
    now = utcnow()
    node = session.scalar(select(Node).where(Node.name == body.name))
    if node is None:
        node = Node(name=body.name, registered_at=now)
        session.add(node)
    node.state = "ready"
    node.agent_version = body.agent_version
    node.last_heartbeat_at = now
    session.flush()
    known = {
        gpu.uuid: gpu
        for gpu in session.scalars(select(Gpu).where(Gpu.uuid.in_([g.uuid for g in body.gpus])))
    }
    for info in body.gpus:
        gpu = known.get(info.uuid)
        if gpu is not None and gpu.node_id != node.id:
            raise ApiError(409, "gpu_conflict", f"GPU {info.uuid} is registered to another node")
        if gpu is None:
            gpu = Gpu(node_id=node.id, uuid=info.uuid)
            session.add(gpu)
        gpu.index = info.index
        gpu.model = info.model
        gpu.memory_total_mib = info.memory_total_mib
        gpu.compute_capability = info.compute_capability
        gpu.driver_version = info.driver_version
        gpu.cuda_driver_version = info.cuda_driver_version
        gpu.context_mib = info.context_mib
        gpu.healthy = True
        gpu.updated_at = now
    reported = {info.uuid for info in body.gpus}
    for gpu in session.scalars(select(Gpu).where(Gpu.node_id == node.id)):
        if gpu.uuid not in reported:
            gpu.healthy = False
    record(
        session=session,
        kind=REGISTERED,
        node_id=node.id,
        message=f"node {node.name} registered with {len(body.gpus)} GPU(s)",
    )
    return node


def get(*, session: Session, node_id: int) -> Node:
    """The node with its GPUs, in one statement (a heartbeat reads them all)."""
    node = session.get(Node, node_id, options=[joinedload(Node.gpus)])
    if node is None:
        raise not_found("node", node_id)
    return node


def expire_leases(*, session: Session, settings: Settings, up_since: datetime) -> list[Node]:
    """Mark lost every ready node whose agent has been silent for `node_lease_s`: its
    GPUs take nothing new, and its placed and running attempts end `lost` (requeued
    while their jobs' attempt budgets last), not placed again before the agent has
    surely stopped them itself (self-fencing). Its next heartbeat makes it ready again:
    an attempt it reports succeeded meanwhile is taken late, and the agent is told to
    stop what it still runs of the others.

    Silence counts only while this server was up (`up_since`) to hear the agent: after
    an outage of the server, agents get a whole lease to reconnect."""
    deadline = utcnow() - timedelta(seconds=settings.node_lease_s)
    if up_since > deadline:
        return []
    lock_placements(session)  # reservations are released here
    silent = list(
        session.scalars(
            select(Node).where(Node.state == "ready", Node.last_heartbeat_at < deadline)
        )
    )
    for node in silent:
        node.state = "lost"
        reason = f"node {node.name} silent for more than {settings.node_lease_s:g} s"
        record(session=session, kind="node.lost", node_id=node.id, message=reason)
        for attempt in _active_attempts(session, node.id).values():
            jobs.end_attempt(
                session=session,
                attempt=attempt,
                outcome=AttemptState.LOST,
                settings=settings,
                reason=reason,
            )
            # its agent stops it by now (self-fencing) unless it is frozen or fencing is off
            jobs.hold_off_rerun(job=attempt.job, settings=settings, now=utcnow())
    return silent


@dataclass(frozen=True)
class Seen:
    """One heartbeat as read before anything is written (`read`): its node's GPUs, the
    attempts it reports (merged), the node's active attempts and the reported ones the
    server knows, the late successes among them, and whether applying it takes the
    placement lock."""

    node: Node
    body: Heartbeat
    gpus: dict[str, Gpu]
    reports: list[AttemptReport]
    active: dict[tuple[int, int], Attempt]
    known: dict[tuple[int, int], Attempt]
    late: set[tuple[int, int]]
    locks: bool


def read(*, session: Session, node: Node, body: Heartbeat, settings: Settings) -> Seen:
    """Everything an agent's report (`apply` then takes it and tells the agent what to
    start and stop) needs read before it writes, and whether it takes the placement
    lock: only when this report changes a reservation or an attempt's state or the reply
    sends an attempt. Nothing is written here (an ApiError leaves the transaction as it
    was), so the lock is never waited for while holding a row a scheduling cycle or
    lease expiry may write. Rows are read one statement per kind, whatever the number of
    attempts reported."""
    gpus = {gpu.uuid: gpu for gpu in node.gpus}
    _reject_duplicates([state.uuid for state in body.gpus])
    unknown = [state.uuid for state in body.gpus if state.uuid not in gpus]
    if unknown:
        raise ApiError(
            422, "unknown_gpu", f"GPU(s) not registered on node {node.name}: {', '.join(unknown)}"
        )
    reports = _merged(body.attempts)
    active = _active_attempts(session, node.id)
    known = _attempts_of(session, node.id, [(r.job_id, r.attempt) for r in reports])
    late = {key for r in reports if _late_success(known.get(key := (r.job_id, r.attempt)), r)}
    locks = (
        bool(late) or _changes_reservations(active, reports, settings) or _sends(active, reports)
    )
    return Seen(node, body, gpus, reports, active, known, late, locks)


def apply(*, session: Session, seen: Seen, settings: Settings) -> HeartbeatReply:
    """Write what `read` found, under the placement lock if it takes it; rows are
    written one statement per kind, whatever the number of attempts reported."""
    node, body, gpus, reports = seen.node, seen.body, seen.gpus, seen.reports
    known, late, active = seen.known, seen.late, seen.active
    if seen.locks:
        lock_placements(session)
        active = _active_attempts(session, node.id, fresh=True)  # as the lock holder sees it
    now = utcnow()
    if node.state != "ready":
        record(
            session=session,
            kind="node.recovered",
            node_id=node.id,
            message=f"node {node.name} reports again",
        )
    # the node's and its GPUs' rows as core statements: the ORM's unit of work and bulk
    # update were a fifth of an idle heartbeat's CPU in the server (py-spy, bench/load.py)
    seen_at = {"node_id": node.id, "state": "ready", "last_heartbeat_at": now}
    session.connection().execute(_NODE_SEEN, seen_at)
    set_committed_value(node, "state", "ready")
    set_committed_value(node, "last_heartbeat_at", now)
    unassigned: dict[str, int | None] = {}  # jobs' use of GPUs they were not given: not free
    for report in reports:
        for uuid, mib in report.unassigned_mib_by_gpu.items():
            unassigned[uuid] = sum_known(unassigned.get(uuid, 0), mib)
    readings = [
        _update_gpu(session, node, gpus[state.uuid], state, unassigned.get(state.uuid, 0))
        for state in body.gpus
    ]
    if readings:
        session.connection().execute(_GPU_READING, readings)

    reply = HeartbeatReply(
        assignments=[],
        cancellations=[],
        acknowledged=[],
        log_offsets=[],
        log_keep_bytes=settings.log_keep_bytes,
        heartbeat_interval_s=settings.heartbeat_interval_s,
        lease_s=settings.node_lease_s,
    )
    # output and notices are kept even after the attempt ended
    held = logs.ingest(
        session,
        {known[key].id: r.logs for r in reports if (key := (r.job_id, r.attempt)) in known},
        settings.log_keep_bytes,
    )
    reported: set[tuple[int, int]] = set()
    for report in reports:
        key = (report.job_id, report.attempt)
        reported.add(key)
        attempt = active.get(key)
        ref = AttemptRef(job_id=report.job_id, attempt=report.attempt)
        ours = known.get(key)
        if ours is not None:
            _record_notices(session, ours, report.notices)
            ends = held[ours.id]
            reply.log_offsets.append(LogOffsets(job_id=key[0], attempt=key[1], **ends))
        if report.state == "exited":
            if attempt is not None:
                _apply_exit(session, attempt, report, settings)
            elif ours is not None and key in late:
                jobs.accept_late_success(
                    session=session,
                    attempt=ours,
                    exit_code=report.exit_code,
                    finished_at=report.finished_at,
                    peak_mib_by_gpu=report.peak_mib_by_gpu,
                )
            reply.acknowledged.append(ref)
        elif attempt is None:
            reply.cancellations.append(ref)  # ended or moved on the server: stop it
        else:
            jobs.mark_running(session=session, attempt=attempt, started_at=report.started_at)
            jobs.track_usage(
                session=session,
                attempt=attempt,
                peak_mib_by_gpu=report.peak_mib_by_gpu,
                current_mib_by_gpu=report.current_mib_by_gpu,
                settings=settings,
            )
            if attempt.job.cancel_requested or attempt.job.preempt_requested:
                reply.cancellations.append(ref)

    to_start = []
    for key, attempt in active.items():
        if key in reported:
            continue
        if attempt.state == "running":
            jobs.end_attempt(
                session=session,
                attempt=attempt,
                outcome=AttemptState.LOST,
                settings=settings,
                reason=f"node {node.name} no longer reports it",
            )
        elif attempt.job.cancel_requested or attempt.job.preempt_requested:
            jobs.end_attempt(
                session=session,
                attempt=attempt,
                outcome=AttemptState.CANCELLED,
                settings=settings,
                reason="stopped before it started",
            )
        else:
            to_start.append(attempt)
    if to_start:
        accounts = accounts_for(session, {attempt.job.owner for attempt in to_start})
        reply.assignments = [_assignment(attempt, accounts) for attempt in to_start]
    return reply


def _merged(reports: list[AttemptReport]) -> list[AttemptReport]:
    """One report per attempt, in the order first listed: an attempt listed twice is
    taken as its last listing says (an exit over a running report), with the notices
    and output of every listing."""
    merged: dict[tuple[int, int], AttemptReport] = {}
    for report in reports:
        key = (report.job_id, report.attempt)
        before = merged.get(key)
        if before is None:
            merged[key] = report
            continue
        last = before if before.state == "exited" and report.state != "exited" else report
        merged[key] = last.model_copy(
            update={"notices": before.notices + report.notices, "logs": before.logs + report.logs}
        )
    return list(merged.values())


def _changes_reservations(
    active: dict[tuple[int, int], Attempt], reports: list[AttemptReport], settings: Settings
) -> bool:
    """Whether applying `reports` may change a reservation or an active attempt's state
    (the writes a scheduling cycle must not interleave with): an active attempt ends,
    starts, goes missing, or uses more, or less, than its reservation follows."""
    by_key = {(r.job_id, r.attempt): r for r in reports}
    for key, attempt in active.items():
        stopped = attempt.job.cancel_requested or attempt.job.preempt_requested
        if key not in by_key and (attempt.state == AttemptState.RUNNING or stopped):
            return True  # lost, or cancelled before it started (placed ones are re-sent)
    rules = settings.reservation_rules()
    for key, report in by_key.items():
        held = active.get(key)
        if held is None:
            continue
        if report.state == "exited" or held.state != AttemptState.RUNNING:
            return True
        for allocation in held.allocations:
            used = report.peak_mib_by_gpu.get(allocation.gpu.uuid)
            if (
                used is not None
                and followed_reservation(
                    rules, used_mib=used, reserved_mib=allocation.reserved_mib, steady_s=math.inf
                )
                is not None
            ):
                return True
    return False


def _sends(active: dict[tuple[int, int], Attempt], reports: list[AttemptReport]) -> bool:
    """Whether the reply may send an attempt to the agent (a placed one it does not
    report and nobody asked to stop). It is then read again under the placement lock: a
    transaction holding it may have just ended it (withdrawn by a late success, taken
    back unstarted), and an agent must never be sent an ended attempt."""
    reported = {(r.job_id, r.attempt) for r in reports}
    return any(
        key not in reported
        and attempt.state == AttemptState.PLACED
        and not (attempt.job.cancel_requested or attempt.job.preempt_requested)
        for key, attempt in active.items()
    )


def _update_gpu(
    session: Session, node: Node, gpu: Gpu, state: GpuState, unassigned_mib: int | None
) -> dict[str, object]:
    """Take the agent's reading of a GPU, returned as the row's new values for one
    `_GPU_READING` of the node's GPUs (and set on `gpu` as they will be stored, for what later
    reads it in this transaction); a change of health is an event. What jobs hold on
    it without being placed there counts as foreign use.

    Foreign use is what the scheduler takes off the GPU's free memory, so a figure the
    agent could not read counts against the GPU, never for it: use nobody can
    attribute is all foreign, and a GPU whose use is unknown is taken whole (nothing
    new is placed on it until it reads again)."""
    if state.healthy != gpu.healthy:
        kind = "gpu.healthy" if state.healthy else "gpu.unhealthy"
        why = f": {state.health_reason}" if state.health_reason else ""
        record(
            session=session,
            kind=kind,
            node_id=node.id,
            message=f"GPU {gpu.index} ({gpu.uuid}) of node {node.name} "
            + ("is healthy again" if state.healthy else f"is unhealthy{why}"),
            data={"gpu": gpu.uuid, "reason": state.health_reason},
        )
    # readings are taken apart in time: kept within what the GPU can hold
    if state.memory_used_mib is None:
        used, foreign = None, gpu.memory_total_mib
    else:
        used = min(state.memory_used_mib, gpu.memory_total_mib)
        unattributed = sum_known(state.memory_foreign_mib, unassigned_mib)
        foreign = min(used if unattributed is None else unattributed, used)
    values: dict[str, object] = {
        "memory_used_mib": used,
        "memory_foreign_mib": foreign,
        "utilization_pct": state.utilization_pct,
        "memory_utilization_pct": state.memory_utilization_pct,
        "temperature_c": state.temperature_c,
        "power_w": state.power_w,
        "mig_enabled": state.mig_enabled,
        "healthy": state.healthy,
        "health_reason": None if state.healthy else state.health_reason,
        "updated_at": utcnow(),
    }
    for name, value in values.items():
        set_committed_value(gpu, name, value)
    return {"gpu_id": gpu.id, **values}


def _record_notices(session: Session, attempt: Attempt, notices: list[Notice]) -> None:
    """Each notice once, however often the agent had to send it."""
    for notice in sorted(notices, key=lambda n: n.seq):
        if notice.seq <= attempt.notice_seq:
            continue
        attempt.notice_seq = notice.seq
        record(
            session=session,
            kind=f"job.{notice.kind}",
            job_id=attempt.job_id,
            node_id=attempt.node_id,
            message=f"attempt {attempt.number} {notice.message}",
            data=notice.model_dump(mode="json"),
        )


def _attempts_of(
    session: Session, node_id: int, keys: list[tuple[int, int]]
) -> dict[tuple[int, int], Attempt]:
    """The attempts, in any state, that were placed on this node, by (job, number)."""
    if not keys:
        return {}
    query = select(Attempt).where(
        Attempt.node_id == node_id, Attempt.job_id.in_({job_id for job_id, _n in keys})
    )
    wanted = set(keys)
    return {
        (a.job_id, a.number): a for a in session.scalars(query) if (a.job_id, a.number) in wanted
    }


def _active_attempts(
    session: Session, node_id: int, fresh: bool = False
) -> dict[tuple[int, int], Attempt]:
    """The node's placed and running attempts, by (job, number), with their jobs and
    allocations; `fresh`: attempts loaded before are read again (after the lock)."""
    query = (
        select(Attempt)
        .where(Attempt.node_id == node_id, Attempt.state.in_(ACTIVE_ATTEMPT_STATES))
        .options(
            selectinload(Attempt.job).selectinload(Job.attempts),
            selectinload(Attempt.allocations).selectinload(Allocation.gpu),
        )
        .execution_options(populate_existing=fresh)
    )
    return {(a.job_id, a.number): a for a in session.scalars(query)}


def _outcome(report: AttemptReport) -> AttemptState:
    """How an exited attempt ended, as its agent reports it."""
    return AttemptState(report.outcome or ("succeeded" if report.exit_code == 0 else "failed"))


def _late_success(attempt: Attempt | None, report: AttemptReport) -> bool:
    """Whether `report` says an attempt the server ended `lost` (its node went silent)
    had succeeded: the late success is taken (lifecycle.accept_late_success)."""
    return (
        attempt is not None
        and attempt.state == AttemptState.LOST
        and report.state == "exited"
        and _outcome(report) == AttemptState.SUCCEEDED
    )


def _apply_exit(
    session: Session, attempt: Attempt, report: AttemptReport, settings: Settings
) -> None:
    if attempt.state == "placed":
        jobs.mark_running(session=session, attempt=attempt, started_at=report.started_at)
    exit_code = report.exit_code
    jobs.end_attempt(
        session=session,
        attempt=attempt,
        outcome=_outcome(report),
        settings=settings,
        exit_code=exit_code,
        reason=report.reason,
        peak_mib_by_gpu=report.peak_mib_by_gpu,
        finished_at=report.finished_at,
    )


def _assignment(attempt: Attempt, accounts: dict[str, str]) -> Assignment:
    spec = attempt.job.spec
    gpus = sorted((a.gpu for a in attempt.allocations), key=lambda gpu: gpu.index)
    return Assignment(
        job_id=attempt.job_id,
        attempt=attempt.number,
        command=spec["command"],
        env=spec.get("env") or {},
        workdir=spec.get("workdir"),
        gpu_uuids=[gpu.uuid for gpu in gpus],
        account=accounts[attempt.job.owner],
        reserved_mib=attempt.reserved_mib,
        reserved_mib_by_gpu={a.gpu.uuid: a.reserved_mib for a in attempt.allocations},
    )
