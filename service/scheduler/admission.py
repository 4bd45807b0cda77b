"""Whether a job could ever run on a cluster: the check behind refusing it at submission."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence

from service.scheduler.snapshot import PendingJob

NO_FIGURE_MIB = 1 << 40  # the demand on a GPU model a waiting job has no figure for


def can_ever_fit(
    *,
    gpus: int,
    models: Collection[str] | None,
    cluster: Sequence[tuple[int, str, int]],
    demand: Callable[[str], int],
    headroom_mib: int,
) -> bool:
    """Whether some node of `cluster` ((node id, GPU model, memory MiB) per GPU) has
    `gpus` GPUs of an allowed model that, empty, hold `demand(model)` each."""
    per_node: dict[int, int] = {}
    for node, model, total in cluster:
        if (not models or model in models) and total - headroom_mib >= demand(model):
            per_node[node] = per_node.get(node, 0) + 1
    return any(count >= gpus for count in per_node.values())


def distinct_nodes(cluster: Iterable[tuple[int, str, int]]) -> list[tuple[int, str, int]]:
    """`cluster` ((node id, GPU model, memory MiB) per GPU) with one node of each make-up
    (its GPUs' models and memory): whether some node could hold a job depends on the
    make-ups alone, and a cluster of thousands of GPUs has a handful, so a check that
    runs for every waiting job costs the same at any size."""
    by_node: dict[int, list[tuple[str, int]]] = {}
    for node, model, total in cluster:
        by_node.setdefault(node, []).append((model, total))
    first: dict[tuple[tuple[str, int], ...], int] = {}
    for node, gpus in by_node.items():
        first.setdefault(tuple(sorted(gpus)), node)
    return [(node, model, total) for makeup, node in first.items() for model, total in makeup]


def could_run(job: PendingJob, cluster: Sequence[tuple[int, str, int]], headroom_mib: int) -> bool:
    """`can_ever_fit` for a waiting job as placement sees it: a GPU model it has no
    demand figure for can take it nowhere."""

    def demand(model: str) -> int:
        mib = job.demand_for(model)
        return NO_FIGURE_MIB if mib is None else mib

    return can_ever_fit(
        gpus=job.gpus,
        models=job.gpu_models,
        cluster=cluster,
        demand=demand,
        headroom_mib=headroom_mib,
    )
