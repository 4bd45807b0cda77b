"""The fitted calibration: the learned correction and its calibrated upper quantile.

One tree ensemble predicts log(measured / analytical); a second predicts its upper
`coverage` quantile, which a conformal correction per model kind makes valid for new
architectures (conformalized quantile regression, Romano et al. 2019; the correction is
the finite-sample conformal quantile of grouped out-of-fold excesses, Vovk et al. 2005).
Only kinds with enough measured runs are calibrated; the estimator leaves others to
the analytical model. No conformal claim is made from fewer than
`min_conformal_points` (19 at 95%): `calibrated_margin` then states a wider margin.
Fitting lives in `train.py`, the one place needing scikit-learn.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from estimator.learned.trees import TreeEnsemble

# Below min_conformal_points no conformal claim is made. The margin is then the largest
# residual seen widened by log(1.25): repeated measurements of one configuration differ
# by up to 20-25% between runs and pipelines (cuDNN algorithm choice, data loaders,
# allocator history; `../shared/data/README.md`, general caveat 6), so the next run
# may lie that far beyond the worst one seen.
SMALL_SAMPLE_WIDENING = math.log(1.25)


def min_conformal_points(coverage: float) -> int:
    """The fewest calibration points for which the split-conformal quantile at
    `coverage` exists: ceil((n+1)*coverage) <= n, i.e. n >= coverage/(1-coverage)
    (19 at 95%). With fewer, even the largest residual bounds a new point with
    probability n/(n+1) < coverage only."""
    if not 0 < coverage < 1:
        raise ValueError(f"coverage must lie in (0, 1), not {coverage}")
    return math.ceil(coverage / (1 - coverage) - 1e-9)


def conformal_quantile(residuals: NDArray[np.float64], coverage: float) -> float:
    """The finite-sample conformal quantile: the ceil((n+1)*coverage)-th smallest
    (Vovk et al. 2005); ValueError below `min_conformal_points`."""
    n = len(residuals)
    if n < min_conformal_points(coverage):
        raise ValueError(
            f"{n} calibration points cannot support a conformal bound at {coverage:.0%} "
            f"(at least {min_conformal_points(coverage)} needed)"
        )
    rank = math.ceil((n + 1) * coverage)
    return float(np.sort(residuals)[rank - 1])


@dataclass(frozen=True)
class Margin:
    """A log-ratio margin and whether it carries the conformal guarantee."""

    log_ratio: float
    conformal: bool
    points: int


def calibrated_margin(residuals: NDArray[np.float64], coverage: float) -> Margin:
    """The conformal quantile where there are enough points; otherwise the stated,
    wider small-sample margin (the largest residual plus SMALL_SAMPLE_WIDENING), and
    without a residual at all just the widening."""
    n = len(residuals)
    if n >= min_conformal_points(coverage):
        return Margin(conformal_quantile(residuals, coverage), True, n)
    worst = float(np.max(residuals)) if n else 0.0
    return Margin(worst + SMALL_SAMPLE_WIDENING, False, n)


def coverage_by_group(
    measured: NDArray[np.float64], upper: NDArray[np.float64], groups: NDArray[Any]
) -> dict[str, tuple[int, float]]:
    """Per group (a held-out family, a source): runs and the share above `upper`, so
    that coverage is checked where it matters, not only on average."""
    return {
        str(group): (int(mask.sum()), float(np.mean(measured[mask] > upper[mask])))
        for group in sorted(set(groups.tolist()))
        for mask in [groups == group]
    }


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
