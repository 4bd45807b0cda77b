"""The scheduler: queue order -> quota check -> filters -> scorers -> pick, per job.

Pure: `Scheduler.place(snapshot)` reads a Snapshot and returns a Plan, so the service,
the simulator and the tests run the same code. One constructor wires the pipeline
from configuration (Nomad's scheduler/stack.go is the model):

1. queue order (a QueueSort plugin); jobs backing off after an OOM wait;
2. quotas per user and per queue (GPUs, memory);
3. candidates: a per-model index of GPUs sorted by free memory yields, for each
   allowed model, the few GPUs with the least and the most room that can hold the
   job (the "limit" stage that keeps a cycle fast on thousands of GPUs); the filters
   that declare it (framework.py: GpuFilter, ModelIndex, MemoryIndex) are applied by
   the index, so the core knows no plugin by name;
4. filters (authoritative: every candidate passes all of them);
5. scorers, weighted; a gang job takes the best N GPUs of one node (several nodes
   only when it allows that);
6. the first job that cannot be placed has GPUs held for it, so that smaller jobs
   behind it (backfill) cannot starve it, or, with preemption on, lower-priority
   preemptible jobs are chosen to make room.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

from service.scheduler.framework import (
    Context,
    Filter,
    GpuFilter,
    MemoryIndex,
    ModelIndex,
    Prepares,
    Registry,
    SchedulerConfig,
    Scorer,
    is_idle,
)
from service.scheduler.plugins import BUILT_IN, gib
from service.scheduler.snapshot import (
    GpuView,
    PendingJob,
    Placement,
    Plan,
    RunningJob,
    Snapshot,
)


def _without(gpu: GpuView, mib: int, jobs: int) -> GpuView:
    """The GPU as it would be with `jobs` jobs holding `mib` gone."""
    return replace(
        gpu,
        reserved_mib=gpu.reserved_mib - mib,
        used_mib=max(0, gpu.used_mib - mib),
        jobs=gpu.jobs - jobs,
    )


def _shape(job: PendingJob) -> tuple[object, ...]:
    """All that `Scheduler._choose` reads of a job: one shape fits or fails alike."""
    demand = tuple(sorted(job.demand_mib.items()))
    return (job.gpus, job.exclusive, job.multi_node, job.gpu_models, job.default_demand_mib, demand)


class _Pipeline:
    """The plugins as they judge one cycle, each prepared for it, and sorted by what the
    candidate index does for them: the Kubernetes framework's PreFilter, which keeps a
    cycle over thousands of GPUs fast. The index applies a filter through the first
    capability it declares; a second filter declaring ModelIndex or MemoryIndex is
    checked like any other."""

    def __init__(
        self,
        ctx: Context,
        filters: list[tuple[str, Filter]],
        scorers: list[tuple[Scorer, float]],
    ) -> None:
        self.ctx = ctx
        self.filters = filters
        self.scorers = scorers
        self.gpu_filters: list[GpuFilter] = []  # the index holds only GPUs that pass these
        self.models: ModelIndex | None = None  # the index looks at these models only
        self.memory: MemoryIndex | None = None  # and, per model, from this bound up
        self.rest: list[Filter] = []  # what the index does not apply
        for _name, check in filters:
            if isinstance(check, GpuFilter):
                self.gpu_filters.append(check)
            elif self.models is None and isinstance(check, ModelIndex):
                self.models = check
            elif self.memory is None and isinstance(check, MemoryIndex):
                self.memory = check
            else:
                self.rest.append(check)

    def allowed_models(self, job: PendingJob) -> Collection[str] | None:
        """The GPU models worth looking at for `job` (None: all)."""
        return None if self.models is None else self.models.models(job)

    def passes(self, job: PendingJob, gpu: GpuView) -> bool:
        return all(f.check(job, gpu, self.ctx).ok for _name, f in self.filters)

    def passes_rest(self, job: PendingJob, gpu: GpuView) -> bool:
        """The filters a GPU from `_State.candidates` has not met by construction."""
        return all(f.check(job, gpu, self.ctx).ok for f in self.rest)

    def scores(self, job: PendingJob, pool: list[GpuView]) -> list[float]:
        """The weighted sum of every scorer's 0-100 answer, per GPU of `pool`."""
        totals = [0.0] * len(pool)
        for scorer, weight in self.scorers:
            for i, score in enumerate(scorer.scores(job, pool, self.ctx)):
                totals[i] += weight * score
        return totals


P = TypeVar("P")


def _prepared(plugin: P, snapshot: Snapshot, ctx: Context) -> P:
    return plugin.prepare(snapshot, ctx) if isinstance(plugin, Prepares) else plugin


@dataclass
class _Usage:
    gpus: int = 0
    memory_mib: int = 0


class _State:
    """The cluster as this cycle's placements change it."""

    def __init__(self, snapshot: Snapshot, pipeline: _Pipeline) -> None:
        self.pipeline = pipeline
        self.ctx = ctx = pipeline.ctx
        self.headroom = ctx.config.headroom_mib
        self.gpus = {gpu.id: gpu for gpu in snapshot.gpus}
        self.held: dict[int, int] = {}  # gpu id -> job it is held for
        self.left_out_held = False  # whether the last `candidates` call left held GPUs out
        self.index: dict[str, list[tuple[int, int]]] = {}
        self.idle: dict[str, list[tuple[int, int]]] = {}  # the index's idle GPUs
        for gpu in self.gpus.values():
            if self._indexable(gpu):
                entry = (gpu.free_mib(self.headroom), gpu.id)
                self.index.setdefault(gpu.model, []).append(entry)
                if is_idle(gpu):
                    self.idle.setdefault(gpu.model, []).append(entry)
        for entries in (*self.index.values(), *self.idle.values()):
            entries.sort()
        self.users: dict[str, _Usage] = {}
        self.queues: dict[str, _Usage] = {}
        for job in snapshot.running:
            self._count(job.owner, job.queue, len(job.gpu_ids), job.reserved_mib * len(job.gpu_ids))

    def _indexable(self, gpu: GpuView) -> bool:
        """Whether the GPU passes the configured filters that do not depend on the job."""
        return all(f.check_gpu(gpu, self.ctx).ok for f in self.pipeline.gpu_filters)

    def _count(self, owner: str, queue: str, gpus: int, memory_mib: int) -> None:
        for usage in (
            self.users.setdefault(owner, _Usage()),
            self.queues.setdefault(queue, _Usage()),
        ):
            usage.gpus += gpus
            usage.memory_mib += memory_mib

    def quota_problem(
        self, job: PendingJob, memory_mib: int, released: Sequence[RunningJob] = ()
    ) -> str | None:
        """Why placing `job` with `memory_mib` in all would break a quota, if it would
        (with the `released` jobs stopped first)."""
        quotas = self.ctx.config.quotas
        for scope, name, limit, usage in (
            ("user", job.owner, quotas.users.get(job.owner), self.users.get(job.owner)),
            ("queue", job.queue, quotas.queues.get(job.queue), self.queues.get(job.queue)),
        ):
            if limit is None:
                continue
            used = replace(usage or _Usage())
            for gone in released:
                if (gone.owner if scope == "user" else gone.queue) == name:
                    used.gpus -= len(gone.gpu_ids)
                    used.memory_mib -= gone.reserved_mib * len(gone.gpu_ids)
            if limit.gpus is not None and used.gpus + job.gpus > limit.gpus:
                return (
                    f"{scope} {name} quota: {used.gpus} of {limit.gpus} GPUs in use, "
                    f"job needs {job.gpus}"
                )
            if limit.memory_mib is not None and used.memory_mib + memory_mib > limit.memory_mib:
                return (
                    f"{scope} {name} quota: {gib(used.memory_mib)} of "
                    f"{gib(limit.memory_mib)} in use, job needs {gib(memory_mib)}"
                )
        return None

    def candidates(self, job: PendingJob, include_held: bool = False) -> list[GpuView]:
        """GPUs worth filtering for `job`, per allowed model: of those with room for it, the
        few with the least and the most room; for gang jobs, the GPUs of the first few
        nodes with enough of them (all that fit, for jobs that may span nodes)."""
        k = self.ctx.config.candidates_per_model
        memory_filter = self.pipeline.memory
        allowed = self.pipeline.allowed_models(job)
        models = self.index.keys() if allowed is None else allowed
        chosen: list[int] = []
        self.left_out_held = False
        for model in models:
            entries = self.index.get(model, [])
            if not entries or job.demand_for(model) is None:  # nothing to reserve there
                continue
            start = 0
            if memory_filter is not None:
                bound = memory_filter.bound(job, model, self.ctx)
                if bound is None:
                    continue
                entries = self.idle.get(model, []) if bound.idle else entries
                start = bisect.bisect_left(entries, (bound.free_mib, -1))
            if job.exclusive:  # it takes its GPUs whole: the most room first
                ids = [g for _f, g in reversed(entries[start:])]
                ids = ids if job.gpus > 1 else ids[: 2 * k]
            else:
                if job.gpus > 1:
                    ids = (
                        [g for _f, g in entries[start:]]
                        if job.multi_node
                        else (self._first_nodes(entries, start, job.gpus, k, include_held))
                    )
                else:
                    ends = entries[start : start + k] + entries[max(start + k, len(entries) - k) :]
                    ids = [gpu_id for _free, gpu_id in ends]
            chosen.extend(ids)
        kept = chosen if include_held else [g for g in chosen if g not in self.held]
        self.left_out_held = self.left_out_held or len(kept) < len(chosen)
        return [self.gpus[g] for g in kept]

    def _first_nodes(
        self, entries: list[tuple[int, int]], start: int, gpus: int, nodes: int, include_held: bool
    ) -> list[int]:
        """GPUs from `entries[start:]` of the first `nodes` nodes that have `gpus` of them
        (all of them when no node has enough, to say how close it came)."""
        per_node: dict[int, list[int]] = {}
        full: list[int] = []
        for _free, gpu_id in itertools.islice(entries, start, None):
            if not include_held and gpu_id in self.held:
                self.left_out_held = True
                continue
            node = self.gpus[gpu_id].node_id
            per_node.setdefault(node, []).append(gpu_id)
            if len(per_node[node]) == gpus:
                full.append(node)
                if len(full) >= nodes:
                    break
        if not full:
            return [g for ids in per_node.values() for g in ids]
        return [g for node in full for g in per_node[node]]

    def largest_free(self, job: PendingJob) -> int:
        models = job.gpu_models if job.gpu_models is not None else self.index.keys()
        return max((self.index[m][-1][0] for m in models if self.index.get(m)), default=0)

    def reserve(self, job: PendingJob, gpu_ids: tuple[int, ...], reserved: tuple[int, ...]) -> None:
        for gpu_id, mib in zip(gpu_ids, reserved, strict=True):
            old = self.gpus[gpu_id]
            if self._indexable(old):
                entry = (old.free_mib(self.headroom), old.id)
                entries = self.index[old.model]
                entries.pop(bisect.bisect_left(entries, entry))
                if is_idle(old):
                    idle = self.idle[old.model]
                    idle.pop(bisect.bisect_left(idle, entry))
            new = replace(old, reserved_mib=old.reserved_mib + mib, jobs=old.jobs + 1)
            self.gpus[gpu_id] = new
            if self._indexable(new):
                bisect.insort(self.index[new.model], (new.free_mib(self.headroom), new.id))
        self._count(job.owner, job.queue, len(gpu_ids), sum(reserved))


@dataclass(frozen=True)
class GpuVerdict:
    node: str
    gpu_id: int
    index: int
    model: str
    free_mib: int
    demand_mib: int | None
    fits: bool
    reasons: tuple[str, ...]
    score: float | None
    held_for: int | None


@dataclass(frozen=True)
class Explanation:
    job_id: int
    summary: str
    gpus: tuple[GpuVerdict, ...]


class Scheduler:
    """The configured pipeline; `place` and `explain` are pure functions of a snapshot."""

    def __init__(self, config: SchedulerConfig, registry: Registry = BUILT_IN) -> None:
        self.config = config
        self.queue_sort, self.filters, self.scorers = registry.build(config)

    def _pipeline(self, snapshot: Snapshot) -> _Pipeline:
        """The plugins, each prepared for the cycle on `snapshot`."""
        ctx = Context(self.config, {node.id: node for node in snapshot.nodes})
        return _Pipeline(
            ctx,
            [(name, _prepared(check, snapshot, ctx)) for name, check in self.filters],
            [(_prepared(scorer, snapshot, ctx), weight) for scorer, weight in self.scorers],
        )

    def _reserved(self, job: PendingJob, gpu: GpuView) -> int:
        if job.exclusive:
            return gpu.memory_total_mib
        demand = job.demand_for(gpu.model)
        assert demand is not None
        return demand

    def _choose(self, job: PendingJob, state: _State) -> Placement | str:
        pipeline = state.pipeline
        candidates = state.candidates(job)
        pool = [gpu for gpu in candidates if pipeline.passes_rest(job, gpu)]
        if job.gpus == 1 and pool:  # the common case, without grouping by node
            score, gpu = min(
                zip(pipeline.scores(job, pool), pool, strict=True),
                key=lambda pair: (-pair[0], pair[1].node_id, pair[1].id),
            )
            return Placement(
                job.id, gpu.node_id, (gpu.id,), (self._reserved(job, gpu),), round(score, 2)
            )
        scored = sorted(
            zip(pipeline.scores(job, pool), pool, strict=True),
            key=lambda pair: (-pair[0], pair[1].id),
        )
        by_node: dict[int, list[tuple[float, GpuView]]] = {}
        for score, gpu in scored:
            by_node.setdefault(gpu.node_id, []).append((score, gpu))
        best: tuple[float, int, list[tuple[float, GpuView]]] | None = None
        for node_id, ranked in by_node.items():
            if len(ranked) >= job.gpus:
                chosen = ranked[: job.gpus]
                mean = sum(score for score, _g in chosen) / job.gpus
                if best is None or (-mean, node_id) < (-best[0], best[1]):
                    best = (mean, node_id, chosen)
        if best is None and job.multi_node and len(scored) >= job.gpus:
            chosen = scored[: job.gpus]
            best = (sum(s for s, _g in chosen) / job.gpus, chosen[0][1].node_id, chosen)
        if best is None:
            return self._why_not(job, state, by_node, candidates)
        gpus = sorted((g for _s, g in best[2]), key=lambda g: (g.node_id, g.index))
        return Placement(
            job.id,
            best[1],
            tuple(g.id for g in gpus),
            tuple(self._reserved(job, g) for g in gpus),
            round(best[0], 2),
        )

    def _refusal(self, job: PendingJob, gpus: list[GpuView], pipeline: _Pipeline) -> str | None:
        """The first reason a filter the candidate index does not apply gave for refusing
        one of `gpus` (which have room for the job), if one did."""
        for gpu in gpus:
            for check in pipeline.rest:
                if not (status := check.check(job, gpu, pipeline.ctx)).ok:
                    return f"the GPUs with room for it refuse it: {status.reason}"
        return None

    def _why_not(
        self,
        job: PendingJob,
        state: _State,
        by_node: dict[int, list[tuple[float, GpuView]]],
        candidates: list[GpuView],
    ) -> str:
        """The first true cause of a job waiting: GPUs held for jobs ahead, too few GPUs
        on one node, GPUs that refuse it (kept for one-model jobs), then memory."""
        held: set[int] = set()
        if state.left_out_held:  # else no held GPU was in the way
            held = {
                state.held[g.id]
                for g in state.candidates(job, include_held=True)
                if g.id in state.held and state.pipeline.passes(job, g)
            }
        if held:
            return (
                f"the GPUs that would fit are held for job(s) "
                f"{', '.join(map(str, sorted(held)))} ahead of it in the queue"
            )
        refused = self._refusal(job, candidates, state.pipeline)
        if job.gpus > 1 and (by_node or refused):
            most = max((len(gpus) for gpus in by_node.values()), default=0)
            gang = f"needs {job.gpus} GPUs on one node; at most {most} fit on any node now"
            return f"{gang} ({refused})" if refused else gang
        if refused:
            return refused
        if job.exclusive:
            return "needs an idle GPU; none that matches is free"
        demands = sorted({d for d in job.demand_mib.values()}) or [job.default_demand_mib or 0]
        return (
            f"needs {gib(demands[0])} per GPU; the most free on an eligible GPU is "
            f"{gib(state.largest_free(job))}"
        )

    def _hold(self, job: PendingJob, state: _State) -> list[int]:
        """GPUs to keep for a blocked job: on the node where it fits once they empty,
        the ones with the most room now (the soonest to be free)."""
        room = state.headroom
        models = state.pipeline.allowed_models(job)
        by_room = sorted(
            (
                gpu
                for gpu in state.gpus.values()
                if gpu.id not in state.held and (models is None or gpu.model in models)
            ),
            key=lambda g: (-g.free_mib(room), g.id),
        )
        by_node: dict[int, list[GpuView]] = {}  # each node's GPUs, the most room first
        for gpu in by_room:
            if state.pipeline.passes(job, replace(gpu, reserved_mib=0, used_mib=0, jobs=0)):
                by_node.setdefault(gpu.node_id, []).append(gpu)
                if job.gpus == 1:  # the first that fits has the most room
                    break
        best: list[GpuView] = []
        best_free = -1
        for gpus in by_node.values():
            if len(gpus) < job.gpus:
                continue
            free = sum(g.free_mib(room) for g in gpus[: job.gpus])
            if free > best_free:
                best, best_free = gpus[: job.gpus], free
        for gpu in best:
            state.held[gpu.id] = job.id
        return [g.id for g in best]

    def _preempt(self, job: PendingJob, state: _State, snapshot: Snapshot) -> list[int]:
        """The fewest lower-priority preemptible jobs (lowest priority, newest first) whose
        removal lets `job` fit on one node within its user's and queue's quotas; their
        GPUs are held for it."""
        eligible = sorted(
            (r for r in snapshot.running if r.preemptible and r.priority < job.priority),
            key=lambda r: (r.priority, -r.id),
        )
        by_node: dict[int, list[RunningJob]] = {}
        for running in eligible:
            by_node.setdefault(state.gpus[running.gpu_ids[0]].node_id, []).append(running)
        best: tuple[list[int], list[int]] | None = None  # victims, GPUs to hold
        for node_id, victims in sorted(by_node.items()):
            freed: dict[int, tuple[int, int]] = {}  # gpu id -> (MiB, jobs) released
            chosen: list[RunningJob] = []
            for running in victims:
                chosen.append(running)
                for gpu_id in running.gpu_ids:
                    mib, count = freed.get(gpu_id, (0, 0))
                    freed[gpu_id] = (mib + running.reserved_mib, count + 1)
                fits = [
                    gpu.id
                    for gpu in state.gpus.values()
                    if gpu.node_id == node_id
                    and state.pipeline.passes(job, _without(gpu, *freed.get(gpu.id, (0, 0))))
                ]
                held = fits[: job.gpus]
                memory = sum(self._reserved(job, state.gpus[gpu_id]) for gpu_id in held)
                if len(held) == job.gpus and not state.quota_problem(job, memory, chosen):
                    if best is None or len(chosen) < len(best[0]):
                        best = ([victim.id for victim in chosen], held)
                    break
        if best is None:
            return []
        for gpu_id in best[1]:
            state.held[gpu_id] = job.id
        return best[0]

    def place(self, snapshot: Snapshot) -> Plan:
        """Place what can be placed now, in queue order."""
        state = _State(snapshot, self._pipeline(snapshot))
        plan = Plan()
        blocked_head = False
        # Why jobs of each shape failed since the state last changed: in a long queue many
        # jobs ask for the same (whole GPUs, rounded claims), and they fail alike.
        unplaceable: dict[tuple[object, ...], str] = {}
        for job in sorted(snapshot.pending, key=self.queue_sort.key):
            if job.not_before and snapshot.now and job.not_before > snapshot.now:
                plan.waiting[job.id] = (
                    f"backing off after an OOM until {job.not_before:%Y-%m-%d %H:%M:%S} UTC"
                )
                continue
            shape = _shape(job)
            choice = unplaceable.get(shape) or self._choose(job, state)
            problem = (
                state.quota_problem(job, sum(choice.reserved_mib))
                if isinstance(choice, Placement)
                else state.quota_problem(job, 0)
            )
            if problem:
                plan.waiting[job.id] = problem
                continue
            if isinstance(choice, str):
                plan.waiting[job.id] = unplaceable[shape] = choice
                if not blocked_head:
                    blocked_head = True
                    self._make_room(job, state, snapshot, plan)
                    unplaceable.clear()
                continue
            state.reserve(job, choice.gpu_ids, choice.reserved_mib)
            unplaceable.clear()
            plan.placements.append(choice)
        plan.held = state.held
        return plan

    def _make_room(self, job: PendingJob, state: _State, snapshot: Snapshot, plan: Plan) -> None:
        if self.config.preemption:
            victims = self._preempt(job, state, snapshot)
            if victims:
                for victim in victims:
                    plan.preemptions[victim] = job.id
                plan.waiting[job.id] += f"; preempting job(s) {', '.join(map(str, victims))}"
                return
        if self.config.backfill:
            held = self._hold(job, state)
            if held:
                plan.waiting[job.id] += "; GPUs are held for it while smaller jobs backfill"

    def explain(self, snapshot: Snapshot, job_id: int) -> Explanation:
        """Why a pending job waits (or where it would go now), GPU by GPU, with numbers
        (KeyError when it is not pending in `snapshot`)."""
        job = next((j for j in snapshot.pending if j.id == job_id), None)
        if job is None:
            raise KeyError(job_id)
        plan = self.place(snapshot)
        placed = next((p for p in plan.placements if p.job_id == job_id), None)
        pipeline = self._pipeline(snapshot)
        nodes = pipeline.ctx.nodes
        pool = [g for g in snapshot.gpus if pipeline.passes(job, g)]
        scores = dict(zip((g.id for g in pool), pipeline.scores(job, pool), strict=True))
        verdicts = []
        for gpu in sorted(snapshot.gpus, key=lambda g: (nodes[g.node_id].name, g.index)):
            reasons = tuple(
                f"{name}: {status.reason}"
                for name, check in pipeline.filters
                if not (status := check.check(job, gpu, pipeline.ctx)).ok
            )
            verdicts.append(
                GpuVerdict(
                    node=nodes[gpu.node_id].name,
                    gpu_id=gpu.id,
                    index=gpu.index,
                    model=gpu.model,
                    free_mib=gpu.free_mib(self.config.headroom_mib),
                    demand_mib=job.demand_for(gpu.model),
                    fits=not reasons,
                    reasons=reasons,
                    score=None if reasons else round(scores[gpu.id], 2),
                    held_for=plan.held.get(gpu.id),
                )
            )
        if placed is not None:
            where = ", ".join(
                f"{nodes[placed.node_id].name} GPU {gpu_id}" for gpu_id in placed.gpu_ids
            )
            summary = f"fits now: the next cycle places it on {where} (score {placed.score})"
        else:
            summary = plan.waiting.get(job_id, "waiting")
        return Explanation(job_id, summary, tuple(verdicts))
