"""The vectorised tree ensemble predicts exactly what walking each tree does."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from estimator.learned import artifact, measurements
from estimator.learned.train import prepare
from estimator.learned.trees import CHUNK_ROWS, Tree, TreeEnsemble


def walked(ensemble: TreeEnsemble, rows: NDArray[np.float64]) -> NDArray[np.float64]:
    """The plain definition: each tree walked from its root (left when the feature is
    <= the threshold), the baseline plus the leaf values summed in tree order."""

    def leaf_value(tree: Tree, row: list[float]) -> float:
        node = 0
        while not tree.leaf[node]:
            go_left = row[tree.feature[node]] <= tree.threshold[node]
            node = tree.left[node] if go_left else tree.right[node]
        return tree.value[node]

    return np.array(
        [
            ensemble.baseline + sum(leaf_value(t, row) for t in ensemble.trees)
            for row in rows.tolist()
        ]
    )


def test_predictions_are_bit_identical_to_walking_the_trees() -> None:
    calibration = artifact.load().calibration
    measured = prepare([r for r in measurements.read() if r.source in ("cnns", "mlp_step1")])
    rng = np.random.default_rng(19)
    low, high = measured.features.min(axis=0), measured.features.max(axis=0)
    spread = rng.uniform(low - 1, high + 1, size=(3 * CHUNK_ROWS + 7, len(low)))
    # rows lying exactly on split thresholds (ties go left)
    on_split = measured.features[: len(calibration.point.trees)].copy()
    for i, tree in enumerate(calibration.point.trees):
        on_split[i, tree.feature[0]] = tree.threshold[0]
    rows = np.vstack([measured.features, spread, on_split])
    assert len(rows) > 1000
    for ensemble in (calibration.point, calibration.upper):
        fast = ensemble.predict(rows)
        assert np.array_equal(fast, walked(ensemble, rows))
        single = [ensemble.predict(rows[i : i + 1])[0] for i in range(0, len(rows), 97)]
        assert np.array_equal(single, fast[::97])


def test_a_lone_leaf_and_no_trees() -> None:
    leaf = Tree((0,), (0.0,), (0,), (0,), (0.25,), (True,))
    split = Tree(
        (1, 0, 0), (2.0, 0.0, 0.0), (1, 0, 0), (2, 0, 0), (0.0, -1.0, 3.0), (False, True, True)
    )
    rows = np.array([[0.0, 1.0], [0.0, 2.0], [5.0, 2.5]])
    for ensemble in (TreeEnsemble(0.5, ()), TreeEnsemble(0.5, (leaf, split, leaf))):
        assert np.array_equal(ensemble.predict(rows), walked(ensemble, rows))
    assert TreeEnsemble(0.5, (leaf, split)).predict(rows).tolist() == [-0.25, -0.25, 3.75]
