"""A fitted gradient-boosted tree ensemble as plain numbers.

Exported from scikit-learn's HistGradientBoostingRegressor so that an artifact is JSON
(nothing is unpickled, so loading runs no code) and the same fit gives the same bytes.
Prediction follows scikit-learn's numerical splits: a sample goes left when its
feature value is <= the node's threshold (sklearn/ensemble/_hist_gradient_boosting/
_predictor.pyx); the features here are never missing. It is vectorised over every
node of every tree (a simulation asks for hundreds of thousands of single-row
predictions of 300-tree ensembles) and adds the trees' leaf values one after the
other, as a plain loop would, so that the result is the same to the last bit.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
from numpy.typing import NDArray


@dataclass(frozen=True)
class Tree:
    feature: tuple[int, ...]
    threshold: tuple[float, ...]
    left: tuple[int, ...]
    right: tuple[int, ...]
    value: tuple[float, ...]
    leaf: tuple[bool, ...]

    def depth(self) -> int:
        """The most splits from the root to a leaf."""
        deepest, stack = 0, [(0, 0)]
        while stack:
            node, depth = stack.pop()
            deepest = max(deepest, depth)
            if not self.leaf[node]:
                stack += [(self.left[node], depth + 1), (self.right[node], depth + 1)]
        return deepest


# Rows evaluated at once: every node of a 300-tree ensemble (~9,000) per row is
# compared at once, so a chunk of 256 rows holds ~2.3M comparisons (~11 MB with the
# next-node table), whatever the number of rows predicted.
CHUNK_ROWS = 256


@dataclass(frozen=True)
class _Flat:
    """Every tree's nodes end to end; a leaf is its own left and right child, so that
    walking `depth` steps from each root ends on each tree's leaf."""

    feature: NDArray[np.intp]
    threshold: NDArray[np.float64]
    right: NDArray[np.intp]
    left_minus_right: NDArray[np.intp]
    value: NDArray[np.float64]
    roots: NDArray[np.intp]
    depth: int

    @classmethod
    def of(cls, trees: tuple[Tree, ...]) -> _Flat:
        starts = np.cumsum([0] + [len(t.leaf) for t in trees[:-1]], dtype=np.intp)
        leaf = np.array([v for t in trees for v in t.leaf], dtype=bool)
        itself = np.arange(len(leaf), dtype=np.intp)

        def children(side: str) -> NDArray[np.intp]:
            local = [np.asarray(getattr(t, side), dtype=np.intp) for t in trees]
            moved = np.concatenate([c + s for c, s in zip(local, starts, strict=True)])
            return np.where(leaf, itself, moved)

        right = children("right")
        return cls(
            feature=np.where(leaf, 0, [v for t in trees for v in t.feature]).astype(np.intp),
            threshold=np.array([v for t in trees for v in t.threshold], dtype=np.float64),
            right=right,
            left_minus_right=children("left") - right,
            value=np.array([v for t in trees for v in t.value], dtype=np.float64),
            roots=starts,
            depth=max(t.depth() for t in trees),
        )

    def leaf_values(self, rows: NDArray[np.float64]) -> NDArray[np.float64]:
        """(rows, trees): the value of the leaf each row reaches in each tree."""
        size = len(self.feature)
        # each row's node i is node i + row * size of one flat table of all rows
        shift = np.arange(len(rows), dtype=np.intp)[:, None] * size
        goes_left = rows[:, self.feature] <= self.threshold
        following = (self.right + goes_left * self.left_minus_right + shift).ravel()
        nodes = self.roots + shift
        for _ in range(self.depth):
            nodes = following.take(nodes)
        values: NDArray[np.float64] = self.value.take(nodes - shift)
        return values


@dataclass(frozen=True)
class TreeEnsemble:
    baseline: float
    trees: tuple[Tree, ...]

    @classmethod
    def from_sklearn(cls, model: Any) -> TreeEnsemble:
        """From a fitted HistGradientBoostingRegressor."""
        trees = []
        for (predictor,) in model._predictors:
            nodes = predictor.nodes
            if nodes["is_categorical"].any():
                raise ValueError("categorical splits are not supported")
            trees.append(
                Tree(
                    feature=tuple(int(v) for v in nodes["feature_idx"]),
                    threshold=tuple(float(v) for v in nodes["num_threshold"]),
                    left=tuple(int(v) for v in nodes["left"]),
                    right=tuple(int(v) for v in nodes["right"]),
                    value=tuple(float(v) for v in nodes["value"]),
                    leaf=tuple(bool(v) for v in nodes["is_leaf"]),
                )
            )
        return cls(float(np.ravel(model._baseline_prediction)[0]), tuple(trees))

    @cached_property
    def _flat(self) -> _Flat:
        return _Flat.of(self.trees)

    def predict(self, rows: NDArray[np.float64]) -> NDArray[np.float64]:
        """The baseline plus every tree's leaf value, added tree by tree (cumsum is a
        running sum, unlike sum's pairwise one: the same rounding as a plain loop)."""
        rows = np.asarray(rows, dtype=np.float64)
        out = np.full(len(rows), self.baseline)
        if not self.trees:
            return out
        for start in range(0, len(rows), CHUNK_ROWS):
            values = self._flat.leaf_values(rows[start : start + CHUNK_ROWS])
            out[start : start + CHUNK_ROWS] += np.cumsum(values, axis=1)[:, -1]
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "baseline": self.baseline,
            "trees": [
                {
                    "feature": t.feature,
                    "threshold": t.threshold,
                    "left": t.left,
                    "right": t.right,
                    "value": t.value,
                    "leaf": t.leaf,
                }
                for t in self.trees
            ],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TreeEnsemble:
        return cls(
            float(data["baseline"]),
            tuple(
                Tree(
                    tuple(t["feature"]),
                    tuple(t["threshold"]),
                    tuple(t["left"]),
                    tuple(t["right"]),
                    tuple(t["value"]),
                    tuple(t["leaf"]),
                )
                for t in data["trees"]
            ),
        )
