"""Whether a job could ever run: one node of each make-up answers for the cluster."""

from __future__ import annotations

import random

import pytest

from service.scheduler.admission import can_ever_fit, distinct_nodes

# GPU models, each with the memory sizes it comes in
MODELS = {"Tesla T4": [15360], "NVIDIA A100": [40960, 81920], "NVIDIA H100 80GB HBM3": [81559]}


def test_one_node_of_each_makeup_is_kept() -> None:
    t4, a100 = ("Tesla T4", 15360), ("NVIDIA A100-SXM4-40GB", 40960)
    cluster = [
        (1, *t4), (1, *a100),
        (2, *a100), (2, *t4),  # node 1's make-up, listed in another order
        (3, *t4), (3, *t4),
        (4, *t4),
    ]  # fmt: skip
    assert sorted(distinct_nodes(cluster)) == sorted([c for c in cluster if c[0] in (1, 3, 4)])


@pytest.mark.parametrize("seed", range(20))
def test_the_kept_nodes_answer_as_the_whole_cluster(seed: int) -> None:
    rng = random.Random(seed)
    cluster: list[tuple[int, str, int]] = []
    for node in range(rng.randint(1, 40)):
        gpus = rng.choice([1, 2, 4, 8])
        models = rng.sample(sorted(MODELS), rng.randint(1, 2))
        sizes = {m: rng.choice(MODELS[m]) for m in models}  # one node: one size of a model
        cluster += [(node, m, sizes[m]) for m in (rng.choice(models) for _ in range(gpus))]
    kept = distinct_nodes(cluster)
    for _ in range(50):
        need = {m: rng.randint(1000, 90_000) for m in MODELS}
        allowed: set[str] | None = rng.choice([None, {rng.choice(sorted(MODELS))}])
        gpus = rng.choice([1, 2, 3, 4, 8])
        answers = {
            can_ever_fit(
                gpus=gpus, models=allowed, cluster=on, demand=need.__getitem__, headroom_mib=256
            )
            for on in (kept, cluster)
        }
        assert len(answers) == 1
