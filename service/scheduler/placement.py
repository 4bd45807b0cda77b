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
   preemptible jobs are chosen to make room. A job that states its memory, while it
   waits for memory, holds only that much of each GPU: smaller jobs may take what is
   free above it there, as long as the GPU would still take it (job cap, utilisation,
   every other filter), so a gang job waiting for one full GPU of a node does not idle
   the node's others; once its memory is free everywhere it holds the GPUs whole.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Collection, Hashable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import TypeVar

from service.scheduler.framework import (
    Context,
    Filter,
    GpuFilter,
    MemoryBound,
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
    Parked,
    PendingJob,
    Placement,
    Plan,
    RunningJob,
    Snapshot,
)


def _as(gpu: GpuView, reserved_mib: int, used_mib: int, jobs: int) -> GpuView:
    """The GPU with these reservations, usage and jobs: `dataclasses.replace` without
    its per-field introspection, which the core's hot paths cannot afford."""
    return GpuView(
        gpu.id,
        gpu.node_id,
        gpu.index,
        gpu.model,
        gpu.memory_total_mib,
        reserved_mib,
        used_mib,
        gpu.foreign_mib,
        gpu.utilization_pct,
        gpu.healthy,
        jobs,
        gpu.uuid,
    )


def _without(gpu: GpuView, mib: int, jobs: int) -> GpuView:
    """The GPU as it would be with `jobs` jobs holding `mib` gone."""
    return _as(gpu, gpu.reserved_mib - mib, max(0, gpu.used_mib - mib), gpu.jobs - jobs)


_HELD = "the GPUs that would fit are held for job(s)"
_REFUSED = "the GPUs with room for it refuse it"


def _parks(reason: str) -> bool:
    """Whether a job refused for `reason` waits for room alone, not for GPUs held for
    others or refused by a filter that reads the whole cycle: only room frees it."""
    return not reason.startswith(_HELD) and _REFUSED not in reason


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
        ctx = self.ctx
        return all(check.check(job, gpu, ctx).ok for _name, check in self.filters)

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


@dataclass(slots=True)
class _Search:
    """What `_State.search` found for a job: the GPUs it may take (none scored yet), the
    jobs that GPUs it could take are held for, and the first reason a filter refused
    one with room for it."""

    pool: list[GpuView] = field(default_factory=list)
    held_for: set[int] = field(default_factory=set)
    refusal: str | None = None
    above_kept_mib: int | None = None  # the most free above a held job's memory
    # The memory filter's bound per model searched: a GPU that does not meet it fails
    # that filter (`MemoryIndex`), so no filter need be asked about it.
    bounds: dict[str, MemoryBound] = field(default_factory=dict)


@dataclass
class _Usage:
    gpus: int = 0
    memory_mib: int = 0


class _State:
    """The cluster as this cycle's placements change it."""

    def __init__(self, snapshot: Snapshot, pipeline: _Pipeline) -> None:
        self.pipeline = pipeline
        self.ctx = ctx = pipeline.ctx
        self.rest = pipeline.rest
        self.headroom = ctx.config.headroom_mib
        self.gpus = {gpu.id: gpu for gpu in snapshot.gpus}
        self.held: dict[int, int] = {}  # gpu id -> job it is held for
        # Of the held GPUs, those held for part of their memory: the MiB kept for the job
        # (its demand there); the others are held whole.
        self.kept_mib: dict[int, int] = {}
        # `beside_held`'s answer per GPU, with the view it was for: a GPU's kept MiB is
        # set once, when it is held, and a placement there replaces its view.
        self.besides: dict[int, tuple[GpuView, GpuView | None]] = {}
        self.index: dict[str, list[tuple[int, int]]] = {}
        self.idle: dict[str, list[tuple[int, int]]] = {}  # the index's idle GPUs
        # Whether each GPU passes the job-blind filters, as placements leave it.
        self.indexable = {gpu.id: self._indexable(gpu) for gpu in self.gpus.values()}
        for gpu in self.gpus.values():
            if self.indexable[gpu.id]:
                entry = (gpu.free_mib(self.headroom), gpu.id)
                self.index.setdefault(gpu.model, []).append(entry)
                if is_idle(gpu):
                    self.idle.setdefault(gpu.model, []).append(entry)
        for entries in (*self.index.values(), *self.idle.values()):
            entries.sort()
        # Usage per user and queue, counted only where a quota reads it.
        self.counting = bool(ctx.config.quotas.users or ctx.config.quotas.queues)
        self.users: dict[str, _Usage] = {}
        self.queues: dict[str, _Usage] = {}
        for job in snapshot.running if self.counting else ():
            self._count(job.owner, job.queue, len(job.gpu_ids), job.reserved_mib * len(job.gpu_ids))

    def _indexable(self, gpu: GpuView) -> bool:
        """Whether the GPU passes the configured filters that do not depend on the job."""
        ctx = self.ctx
        return all(check.check_gpu(gpu, ctx).ok for check in self.pipeline.gpu_filters)

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
        if not self.counting:
            return None
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

    def search(self, job: PendingJob) -> _Search:
        """The GPUs `job` may take now, each through every filter before any is scored,
        per allowed model from the index (GPUs with room for it): for one GPU, of the few
        with the least room and the few with the most; for a gang, those of the first few
        nodes with enough GPUs that pass (all, for jobs that may span nodes or take GPUs
        whole). A GPU held for a job ahead, or refused by a filter, is left out and noted."""
        ctx = self.ctx
        k = ctx.config.candidates_per_model
        memory_filter = self.pipeline.memory
        allowed = self.pipeline.allowed_models(job)
        found = _Search()
        walks: list[Iterable[int]] = []
        index = self.index
        for model in index.keys() if allowed is None else allowed:
            entries = index.get(model)
            if not entries or job.demand_for(model) is None:  # nothing to reserve there
                continue
            start = 0
            if memory_filter is not None:
                bound = memory_filter.bound(job, model, ctx)
                if bound is None:
                    continue
                found.bounds[model] = bound
                entries = self.idle.get(model, []) if bound.idle else entries
                start = bisect.bisect_left(entries, (bound.free_mib, -1))
                if start == len(entries):  # no GPU of the model has the room
                    continue
            if job.gpus == 1:
                found.pool.extend(self._ends(job, entries, start, k, found))
            elif job.exclusive:  # it takes its GPUs whole: the most room first
                walks.append(gpu_id for _free, gpu_id in reversed(entries[start:]))
            else:
                walks.append(gpu_id for _free, gpu_id in itertools.islice(entries, start, None))
        if job.gpus > 1:
            nodes = None if job.multi_node or job.exclusive else k
            found.pool = self._first_nodes(job, itertools.chain(*walks), nodes, found)
        return found

    def _feasible(self, job: PendingJob, gpu_id: int, found: _Search) -> GpuView | None:
        """The GPU if `job` may take it (it has room by the index's construction); else
        None, noting a hold or the first refusal."""
        gpu = self.gpus[gpu_id]
        if gpu_id in self.held:
            beside = self.beside_held(gpu)
            bound = found.bounds.get(gpu.model)
            if (
                beside is not None
                and (bound is None or bound.admits(beside, self.headroom))
                and self.pipeline.passes(job, beside)
            ):
                return beside
            if self._refused(job, gpu, found):  # a refusal, not the hold, keeps it off
                return None
            found.held_for.add(self.held[gpu_id])
            above = None if beside is None else beside.free_mib(self.headroom)
            if above is not None and above < (job.demand_for(gpu.model) or 0):
                was = found.above_kept_mib
                found.above_kept_mib = above if was is None else max(was, above)
            return None
        return None if self._refused(job, gpu, found) else gpu

    def _refused(self, job: PendingJob, gpu: GpuView, found: _Search) -> bool:
        """Whether a filter the index does not apply refuses `gpu`, noting the first
        refusal: a job refused by one does not wait for room alone, so it is not parked
        (what such a filter refuses can change with no GPU gaining room)."""
        ctx = self.ctx
        for check in self.rest:
            if not (status := check.check(job, gpu, ctx)).ok:
                found.refusal = found.refusal or status.reason
                return True
        return False

    def _ends(
        self, job: PendingJob, entries: list[tuple[int, int]], start: int, k: int, found: _Search
    ) -> list[GpuView]:
        """Of `entries[start:]`, the `k` GPUs with the least room and the `k` with the most
        (a job that takes a GPU whole: the `2k` with the most), those `job` may take."""
        if job.exclusive:
            ends = entries[max(start, len(entries) - 2 * k) :][::-1]
        else:
            ends = entries[start : start + k] + entries[max(start + k, len(entries) - k) :]
        return [gpu for _free, gpu_id in ends if (gpu := self._feasible(job, gpu_id, found))]

    def _first_nodes(
        self, job: PendingJob, ids: Iterable[int], nodes: int | None, found: _Search
    ) -> list[GpuView]:
        """The GPUs of `ids` that `job` may take on the first `nodes` nodes with `job.gpus`
        of them (all nodes: None); when no node has enough, all of them found, for how
        close it came."""
        per_node: dict[int, list[GpuView]] = {}
        full: list[int] = []
        for gpu_id in ids:
            if (gpu := self._feasible(job, gpu_id, found)) is None:
                continue
            per_node.setdefault(gpu.node_id, []).append(gpu)
            if len(per_node[gpu.node_id]) == job.gpus:
                full.append(gpu.node_id)
                if nodes is not None and len(full) >= nodes:
                    break
        if not full or nodes is None:
            return [g for gpus in per_node.values() for g in gpus]
        return [g for node in full for g in per_node[node]]

    def beside_held(self, gpu: GpuView) -> GpuView | None:
        """A GPU held for part of its memory as it would be with its job placed, which is
        what another job may take (None: it is held whole)."""
        known = self.besides.get(gpu.id)
        if known is not None and known[0] is gpu:
            return known[1]
        kept = self.kept_mib.get(gpu.id)
        beside = None
        if kept is not None:
            taken = max(gpu.reserved_mib, gpu.used_mib) + kept
            beside = _as(gpu, taken, taken, gpu.jobs + 1)
        self.besides[gpu.id] = (gpu, beside)
        return beside

    def room(self, gpu: GpuView) -> tuple[int, int, bool]:
        """What `Parked` records of a GPU: free MiB, jobs, whether it is indexable."""
        return gpu.free_mib(self.headroom), gpu.jobs, self.indexable[gpu.id]

    def largest_free(self, job: PendingJob) -> int:
        """The most free on a GPU the job may run on: of a model it allows and has a
        demand for (a job left without estimates on a model runs elsewhere)."""
        models = job.gpu_models if job.gpu_models is not None else self.index.keys()
        return max(
            (
                entries[-1][0]
                for m in models
                if job.demand_for(m) is not None and (entries := self.index.get(m))
            ),
            default=0,
        )

    def reserve(self, job: PendingJob, gpu_ids: tuple[int, ...], reserved: tuple[int, ...]) -> None:
        for gpu_id, mib in zip(gpu_ids, reserved, strict=True):
            old = self.gpus[gpu_id]
            if self.indexable[gpu_id]:
                entry = (old.free_mib(self.headroom), old.id)
                entries = self.index[old.model]
                entries.pop(bisect.bisect_left(entries, entry))
                if is_idle(old):
                    idle = self.idle[old.model]
                    idle.pop(bisect.bisect_left(idle, entry))
            new = _as(old, old.reserved_mib + mib, old.used_mib, old.jobs + 1)
            self.gpus[gpu_id] = new
            self.indexable[gpu_id] = self._indexable(new)
            if self.indexable[gpu_id]:
                bisect.insort(self.index[new.model], (new.free_mib(self.headroom), new.id))
        if self.counting:
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
        found = state.search(job)
        pool = found.pool
        if job.gpus == 1:
            if not pool:
                return self._why_not(job, state, found, 0)
            score, gpu = min(
                zip(pipeline.scores(job, pool), pool, strict=True),
                key=lambda pair: (-pair[0], pair[1].node_id, pair[1].id),
            )
            return Placement(
                job.id, gpu.node_id, (gpu.id,), (self._reserved(job, gpu),), round(score, 2)
            )
        per_node: dict[int, int] = {}
        for gpu in pool:
            per_node[gpu.node_id] = per_node.get(gpu.node_id, 0) + 1
        most = max(per_node.values(), default=0)
        if most < job.gpus and not (job.multi_node and len(pool) >= job.gpus):
            return self._why_not(job, state, found, most)  # nothing scored in vain
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
        if best is None:  # a job that may span nodes, with no node enough alone
            chosen = scored[: job.gpus]
            best = (sum(s for s, _g in chosen) / job.gpus, chosen[0][1].node_id, chosen)
        gpus = sorted((g for _s, g in best[2]), key=lambda g: (g.node_id, g.index))
        return Placement(
            job.id,
            best[1],
            tuple(g.id for g in gpus),
            tuple(self._reserved(job, g) for g in gpus),
            round(best[0], 2),
        )

    def _why_not(self, job: PendingJob, state: _State, found: _Search, most: int) -> str:
        """The first true cause of a job waiting: GPUs held for jobs ahead, too few GPUs
        on one node (`most`: the most it may take on any), GPUs that refuse it (kept for
        one-model jobs), then memory."""
        if found.held_for:
            jobs = ", ".join(map(str, sorted(found.held_for)))
            reason = f"{_HELD} {jobs} ahead of it in the queue"
            if found.above_kept_mib is None:
                return reason
            above = gib(max(0, found.above_kept_mib))
            return f"{reason} (at most {above} free above the memory kept for them)"
        refused = found.refusal and f"{_REFUSED}: {found.refusal}"
        if job.gpus > 1 and (most or refused):
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
        the ones with the most room now (the soonest to be free), the node that lacks
        the least of the job's demand (room above it does not bring the job closer, and
        jobs placed there must not move the hold). A job that states its memory keeps
        only that much of each (`_State.kept_mib`) while it waits for memory; one that
        takes GPUs whole, or waits for something else, all."""
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
            if len(by_node.get(gpu.node_id, ())) == job.gpus:
                continue  # the node has all the GPUs the job would hold there
            if state.pipeline.passes(job, _as(gpu, 0, 0, 0)):
                by_node.setdefault(gpu.node_id, []).append(gpu)
                if job.gpus == 1:  # the first that fits has the most room
                    break
        best: list[GpuView] = []
        best_had = -1
        for _node, gpus in sorted(by_node.items()):
            if len(gpus) < job.gpus:
                continue
            had = sum(min(g.free_mib(room), self._reserved(job, g)) for g in gpus[: job.gpus])
            if had > best_had:
                best, best_had = gpus[: job.gpus], had
        # Once its memory is free on every GPU it keeps, the job waits only for what
        # memory does not measure (a job slot, utilisation), which only jobs ending free:
        # from then on no other job may take them, or jobs placed above its memory as
        # others end could keep a gang waiting for ever.
        waits_for_memory = any(g.free_mib(room) < self._reserved(job, g) for g in best)
        for gpu in best:
            state.held[gpu.id] = job.id
            if waits_for_memory and not job.exclusive:
                state.kept_mib[gpu.id] = self._reserved(job, gpu)
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

    def place(self, snapshot: Snapshot, parked: Parked | None = None) -> Plan:
        """Place what can be placed now, in queue order. `parked` is the last cycle's
        `Plan.parked`: its jobs are answered with their reason again, unsearched, while
        no GPU they may use has gained room enough for them since (their shape unchanged)."""
        state = _State(snapshot, self._pipeline(snapshot))
        plan = Plan()
        blocked_head = False
        parked = parked or Parked()
        grown = self._grown(state, parked) if parked.jobs else {}
        wakes: dict[Hashable, bool] = {}  # per shape of a parked job: `_wakes`' answer
        limit = self.config.max_attempts_per_cycle
        attempts = 0
        still_parked: dict[int, tuple[Hashable, str]] = {}
        # Why jobs of each shape failed this cycle. Placements only take room and holds
        # only grow, so a shape that found no GPU it may take cannot find one later in
        # the cycle: in a long queue many jobs ask alike (whole GPUs, rounded claims)
        # and are answered at once (the reasons' figures are the first failure's). But a
        # one-GPU search looks only at the ends of each model's GPUs by room: when those
        # were held or refused, a placement that moves them may bring one that passes,
        # so such answers last until the next placement.
        unplaceable: dict[Hashable, str] = {}
        until_placed: dict[Hashable, str] = {}
        for job in sorted(snapshot.pending, key=self.queue_sort.key):
            if job.not_before and snapshot.now and job.not_before > snapshot.now:
                plan.waiting[job.id] = (
                    f"backing off after an OOM until {job.not_before:%Y-%m-%d %H:%M:%S} UTC"
                )
                continue
            shape = job.shape
            choice: Placement | str | None = unplaceable.get(shape) or until_placed.get(shape)
            fresh = choice is None  # not an answer this cycle gave the shape already
            if choice is None and (was := parked.jobs.get(job.id)) and was[0] == shape:
                if (woken := wakes.get(shape)) is None:
                    woken = wakes[shape] = self._wakes(job, state.pipeline, grown)
                if not woken:
                    choice = was[1]
            if choice is None and limit is not None and attempts >= limit:
                plan.waiting[job.id] = (
                    f"not looked at this cycle: its {limit} placement attempts went to "
                    "jobs ahead of it in the queue"
                )
                continue
            if choice is None:
                attempts += 1
                choice = self._choose(job, state)
                if isinstance(choice, str) and _parks(choice):
                    still_parked[job.id] = (shape, choice)
            elif isinstance(choice, str) and job.id in parked.jobs:
                still_parked[job.id] = (shape, choice)
            problem = (
                state.quota_problem(job, sum(choice.reserved_mib))
                if isinstance(choice, Placement)
                else state.quota_problem(job, 0)
            )
            if problem:
                plan.waiting[job.id] = problem
                continue
            if isinstance(choice, str):
                plan.waiting[job.id] = choice
                if fresh:
                    exact = job.gpus > 1 or _parks(choice)
                    (unplaceable if exact else until_placed)[shape] = choice
                if not blocked_head:
                    blocked_head = True
                    if self._make_room(job, state, snapshot, plan):
                        unplaceable.clear()  # held GPUs change what the others are told
                        until_placed.clear()
                continue
            state.reserve(job, choice.gpu_ids, choice.reserved_mib)
            until_placed.clear()
            plan.placements.append(choice)
        plan.held = state.held
        plan.parked = Parked(still_parked, {g.id: state.room(g) for g in state.gpus.values()})
        return plan

    @staticmethod
    def _grown(state: _State, parked: Parked) -> dict[str, tuple[int, int]]:
        """Per GPU model, of its GPUs that pass the job-blind filters and have more room
        now than `parked` recorded (more free memory, fewer jobs, newly passing, or new):
        the most free memory on one, and on an idle one (-1: none)."""
        grown: dict[str, tuple[int, int]] = {}
        for gpu in state.gpus.values():
            free, jobs, passes = state.room(gpu)
            was = parked.gpus.get(gpu.id)
            if not passes or (was is not None and free <= was[0] and jobs >= was[1] and was[2]):
                continue
            most, most_idle = grown.get(gpu.model, (-1, -1))
            grown[gpu.model] = (
                max(most, free),
                max(most_idle, free) if is_idle(gpu) else most_idle,
            )
        return grown

    @staticmethod
    def _wakes(job: PendingJob, pipeline: _Pipeline, grown: dict[str, tuple[int, int]]) -> bool:
        """Whether a GPU that gained room since `job` was parked could take it now, as far
        as the memory filter can tell (with none, any such GPU of a model it may use):
        kube-scheduler's queueing hints, which wake a job only for events that may help it."""
        models = pipeline.allowed_models(job)
        memory = pipeline.memory
        for model in grown if models is None else grown.keys() & set(models):
            if memory is None:
                return True
            bound = memory.bound(job, model, pipeline.ctx)
            if bound is None:
                continue
            most, most_idle = grown[model]
            if (most_idle if bound.idle else most) >= bound.free_mib:
                return True
        return False

    def _make_room(self, job: PendingJob, state: _State, snapshot: Snapshot, plan: Plan) -> bool:
        """Preempt for, or hold GPUs for, the first blocked job; whether GPUs were held."""
        if self.config.preemption:
            victims = self._preempt(job, state, snapshot)
            if victims:
                for victim in victims:
                    plan.preemptions[victim] = job.id
                plan.waiting[job.id] += f"; preempting job(s) {', '.join(map(str, victims))}"
                return True
        if self.config.backfill and self._hold(job, state):
            plan.waiting[job.id] += "; GPUs are held for it while smaller jobs backfill"
            return True
        return False

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
