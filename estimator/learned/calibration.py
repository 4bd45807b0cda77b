"""The fitted calibration: the learned correction and its calibrated upper quantile.

One tree ensemble predicts log(measured / analytical); a second predicts its upper
`coverage` quantile, which a conformal correction per model kind makes valid for new
architectures (conformalized quantile regression, Romano et al. 2019; the correction is
the finite-sample conformal quantile of grouped out-of-fold excesses, Vovk et al. 2005).
Only kinds with enough measured runs are calibrated; the estimator leaves others to
the analytical model. Fitting lives in `train.py`, the one place needing scikit-learn.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from estimator.learned.trees import TreeEnsemble


def conformal_quantile(residuals: NDArray[np.float64], coverage: float) -> float:
    """The finite-sample conformal quantile: the ceil((n+1)*coverage)-th smallest."""
    n = len(residuals)
    if n == 0:
        raise ValueError("no residuals to calibrate on")
    rank = min(n, math.ceil((n + 1) * coverage))
    return float(np.sort(residuals)[rank - 1])


@dataclass(frozen=True)
class Calibration:
    coverage: float
    kind_corrections: dict[str, float]  # calibrated kinds -> conformal correction
    point: TreeEnsemble
    upper: TreeEnsemble

    @property
    def kinds(self) -> list[str]:
        return sorted(self.kind_corrections)

    def predict(self, features: NDArray[np.float64]) -> NDArray[np.float64]:
        """Predicted log(measured / analytical)."""
        return self.point.predict(features)

    def predict_upper(self, features: NDArray[np.float64], kind: str) -> NDArray[np.float64]:
        """The log-ratio that a run of this kind stays under with `coverage` probability."""
        return self.upper.predict(features) + self.kind_corrections[kind]

    def to_json(self) -> dict[str, Any]:
        return {
            "coverage": self.coverage,
            "kind_corrections": self.kind_corrections,
            "point": self.point.to_json(),
            "upper": self.upper.to_json(),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Calibration:
        return cls(
            coverage=float(data["coverage"]),
            kind_corrections={str(k): float(v) for k, v in data["kind_corrections"].items()},
            point=TreeEnsemble.from_json(data["point"]),
            upper=TreeEnsemble.from_json(data["upper"]),
        )
