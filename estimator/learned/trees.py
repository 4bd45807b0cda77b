"""A fitted gradient-boosted tree ensemble as plain numbers.

Exported from scikit-learn's HistGradientBoostingRegressor so that an artifact is JSON
(nothing is unpickled, so loading runs no code) and the same fit gives the same bytes.
Prediction follows scikit-learn's numerical splits: a sample goes left when its
feature value is <= the node's threshold (sklearn/ensemble/_hist_gradient_boosting/
_predictor.pyx); the features here are never missing.
"""

from __future__ import annotations

from dataclasses import dataclass
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

    def predict_one(self, row: list[float]) -> float:
        node = 0
        while not self.leaf[node]:
            node = (
                self.left[node]
                if row[self.feature[node]] <= self.threshold[node]
                else (self.right[node])
            )
        return self.value[node]


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

    def predict(self, rows: NDArray[np.float64]) -> NDArray[np.float64]:
        out = np.empty(len(rows))
        for i, row in enumerate(rows.tolist()):
            out[i] = self.baseline + sum(tree.predict_one(row) for tree in self.trees)
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
