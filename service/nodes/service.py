"""Agent registration and heartbeats: GPU state in; assignments and cancellations out.

Agents pull: a heartbeat carries what the agent knows of every attempt it holds, and
the reply carries what it should start or stop. Heartbeats from one agent are
sequential, so an attempt the server placed on a node and that the node does not
report is one the agent has not started (re-sent) or no longer runs (lost).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

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
from service.auth.accounts import account_for
from service.config import Settings
from service.db import lock_placements, utcnow
from service.errors import ApiError, not_found
from service.events.service import record
from service.jobs import lifecycle as jobs
from service.jobs.models import Allocation, Attempt, Job
from service.logs import service as logs
from service.nodes.makeup import REGISTERED
from service.nodes.models import Gpu, Node
from service.scheduler.states import ACTIVE_ATTEMPT_STATES, AttemptState


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
    node = session.get(Node, node_id)
    if node is None:
        raise not_found("node", node_id)
    return node


def expire_leases(*, session: Session, settings: Settings, up_since: datetime) -> list[Node]:
    """Mark lost every ready node whose agent has been silent for `node_lease_s`: its
    GPUs take nothing new, and its placed and running attempts end `lost` (requeued
    while their jobs' attempt budgets last). Its next heartbeat makes it ready again,
    and the agent is told to stop what it still runs of those attempts.

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
    return silent


def heartbeat(
    *, session: Session, node: Node, body: Heartbeat, settings: Settings
) -> HeartbeatReply:
    """Apply one agent report and tell the agent what to start and stop."""
    gpus = {gpu.uuid: gpu for gpu in node.gpus}
    _reject_duplicates([state.uuid for state in body.gpus])
    unknown = [state.uuid for state in body.gpus if state.uuid not in gpus]
    if unknown:
        raise ApiError(
            422, "unknown_gpu", f"GPU(s) not registered on node {node.name}: {', '.join(unknown)}"
        )
    lock_placements(session)  # reservations change here too
    now = utcnow()
    if node.state != "ready":
        record(
            session=session,
            kind="node.recovered",
            node_id=node.id,
            message=f"node {node.name} reports again",
        )
    node.state = "ready"
    node.last_heartbeat_at = now
    unassigned: dict[str, int | None] = {}  # jobs' use of GPUs they were not given: not free
    for report in body.attempts:
        for uuid, mib in report.unassigned_mib_by_gpu.items():
            unassigned[uuid] = sum_known(unassigned.get(uuid, 0), mib)
    for state in body.gpus:
        _update_gpu(session, node, gpus[state.uuid], state, unassigned.get(state.uuid, 0))

    reply = HeartbeatReply(
        assignments=[],
        cancellations=[],
        acknowledged=[],
        log_offsets=[],
        log_keep_bytes=settings.log_keep_bytes,
        heartbeat_interval_s=settings.heartbeat_interval_s,
    )
    active = _active_attempts(session, node.id)
    known = _attempts_of(session, node.id, [(r.job_id, r.attempt) for r in body.attempts])
    reported: set[tuple[int, int]] = set()
    for report in body.attempts:
        key = (report.job_id, report.attempt)
        reported.add(key)
        attempt = active.get(key)
        ref = AttemptRef(job_id=report.job_id, attempt=report.attempt)
        ours = known.get(key)
        if ours is not None:  # output and notices are kept even after the attempt ended
            _record_notices(session, ours, report.notices)
            held = logs.ingest(session, ours, report.logs, settings.log_keep_bytes)
            reply.log_offsets.append(LogOffsets(job_id=key[0], attempt=key[1], **held))
        if report.state == "exited":
            if attempt is not None:
                _apply_exit(session, attempt, report, settings)
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
            reply.assignments.append(_assignment(session, attempt))
    return reply


def _update_gpu(
    session: Session, node: Node, gpu: Gpu, state: GpuState, unassigned_mib: int | None
) -> None:
    """Take the agent's reading of a GPU; a change of health is an event. What jobs
    hold on it without being placed there counts as foreign use.

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
        gpu.memory_used_mib, gpu.memory_foreign_mib = None, gpu.memory_total_mib
    else:
        gpu.memory_used_mib = min(state.memory_used_mib, gpu.memory_total_mib)
        foreign = sum_known(state.memory_foreign_mib, unassigned_mib)
        gpu.memory_foreign_mib = min(
            gpu.memory_used_mib if foreign is None else foreign, gpu.memory_used_mib
        )
    gpu.utilization_pct = state.utilization_pct
    gpu.memory_utilization_pct = state.memory_utilization_pct
    gpu.temperature_c = state.temperature_c
    gpu.power_w = state.power_w
    gpu.mig_enabled = state.mig_enabled
    gpu.healthy = state.healthy
    gpu.health_reason = None if state.healthy else state.health_reason
    gpu.updated_at = utcnow()


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


def _active_attempts(session: Session, node_id: int) -> dict[tuple[int, int], Attempt]:
    query = (
        select(Attempt)
        .where(Attempt.node_id == node_id, Attempt.state.in_(ACTIVE_ATTEMPT_STATES))
        .options(
            selectinload(Attempt.job).selectinload(Job.attempts),
            selectinload(Attempt.allocations).selectinload(Allocation.gpu),
        )
    )
    return {(a.job_id, a.number): a for a in session.scalars(query)}


def _apply_exit(
    session: Session, attempt: Attempt, report: AttemptReport, settings: Settings
) -> None:
    if attempt.state == "placed":
        jobs.mark_running(session=session, attempt=attempt, started_at=report.started_at)
    exit_code = report.exit_code
    outcome = AttemptState(report.outcome or ("succeeded" if exit_code == 0 else "failed"))
    jobs.end_attempt(
        session=session,
        attempt=attempt,
        outcome=outcome,
        settings=settings,
        exit_code=exit_code,
        reason=report.reason,
        peak_mib_by_gpu=report.peak_mib_by_gpu,
        finished_at=report.finished_at,
    )


def _assignment(session: Session, attempt: Attempt) -> Assignment:
    spec = attempt.job.spec
    gpus = sorted((a.gpu for a in attempt.allocations), key=lambda gpu: gpu.index)
    return Assignment(
        job_id=attempt.job_id,
        attempt=attempt.number,
        command=spec["command"],
        env=spec.get("env") or {},
        workdir=spec.get("workdir"),
        gpu_uuids=[gpu.uuid for gpu in gpus],
        account=account_for(session, attempt.job.owner),
        reserved_mib=attempt.reserved_mib,
        reserved_mib_by_gpu={a.gpu.uuid: a.reserved_mib for a in attempt.allocations},
    )
