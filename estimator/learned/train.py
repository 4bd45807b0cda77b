"""Training the calibration from measured runs, and judging it on held-out architectures.

    colloc estimator train [--data TABLE] [--out DIR]

The calibration learns how the analytical *model-dependent* terms err. Each
measurement source ran its own software stack (those in `../shared/data` loaded CUDA
modules eagerly), so each (source, GPU model) is an environment with a fixed-cost
offset of its own, learned exactly as a cluster learns its own (`estimator/offsets.py`)
and taken off before the correction is fitted: no stack's fixed cost is baked into
the defaults or the correction.

`train()` is deterministic: the same table gives the same artifact, byte for byte.
"""

from __future__ import annotations

import hashlib
import platform
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import sklearn
from numpy.typing import NDArray
from sklearn.ensemble import HistGradientBoostingRegressor
from sklearn.model_selection import GroupKFold
from threadpoolctl import threadpool_limits

from estimator.analytical.model import Breakdown, SpecError, breakdown, resolve
from estimator.estimate import Estimator
from estimator.gpus import GpuDescription, describe
from estimator.learned.artifact import FORMAT, Artifact, model_bytes, version_of
from estimator.learned.calibration import Calibration, calibrated_margin, conformal_quantile
from estimator.learned.features import NAMES, RANGED, features, model_kind
from estimator.learned.measurements import Measurement
from estimator.learned.trees import TreeEnsemble
from estimator.offsets import FixedCostOffsets

FOLDS = 5
MIN_KIND_RUNS = 50
# Folds grouped by architecture family are not exchangeable (families differ in size
# and behaviour), so the conformal guarantee holds only roughly on a new family; the
# corrections aim one point above the stated coverage to keep the stated one.
COVERAGE_SLACK = 0.01
# The least share of its model-dependent terms a run is taken to have used once its
# environment's fixed cost is taken off (a run below it is noise in the offset).
MIN_MODEL_SHARE = 0.05


def environment_of(row: Measurement) -> str:
    """The environment a measured run's fixed cost belongs to: its source's stack on
    its GPU model (the key of its offset in `FixedCostOffsets`)."""
    return f"{row.source}|{describe(row.gpu_model).name}"


class CalibrationFitter:
    """Fits a Calibration; scikit-learn style (parameters in __init__, fitted attrs end _).

    Conformalized quantile regression (Romano et al. 2019): one ensemble predicts the
    log-ratio, another its `coverage` quantile; the quantile is then corrected by the
    conformal quantile of how far grouped out-of-fold runs exceeded it, per model kind.
    """

    def __init__(
        self,
        coverage: float = 0.95,
        max_iter: int = 300,
        learning_rate: float = 0.05,
        max_leaf_nodes: int = 15,
        random_state: int = 0,
    ) -> None:
        self.coverage = coverage
        self.max_iter = max_iter
        self.learning_rate = learning_rate
        self.max_leaf_nodes = max_leaf_nodes
        self.random_state = random_state

    @property
    def _target(self) -> float:
        return min(1.0, self.coverage + COVERAGE_SLACK)

    def _regressor(self, quantile: float | None = None) -> HistGradientBoostingRegressor:
        return HistGradientBoostingRegressor(
            loss="squared_error" if quantile is None else "quantile",
            quantile=quantile,
            max_iter=self.max_iter,
            learning_rate=self.learning_rate,
            max_leaf_nodes=self.max_leaf_nodes,
            min_samples_leaf=20,
            l2_regularization=1.0,
            early_stopping=False,
            random_state=self.random_state,
        )

    def fit(
        self,
        features: NDArray[np.float64],
        log_ratio: NDArray[np.float64],
        groups: NDArray[Any],
        kinds: NDArray[Any],
    ) -> CalibrationFitter:
        """Fit on all runs; corrections from grouped out-of-fold runs."""
        point_oof = np.empty_like(log_ratio)
        upper_oof = np.empty_like(log_ratio)
        folds = GroupKFold(n_splits=min(FOLDS, len(set(groups))))
        for train_idx, test_idx in folds.split(features, log_ratio, groups):
            x, y = features[train_idx], log_ratio[train_idx]
            point_oof[test_idx] = self._regressor().fit(x, y).predict(features[test_idx])
            upper_oof[test_idx] = (
                self._regressor(self.coverage).fit(x, y).predict(features[test_idx])
            )
        excess = log_ratio - upper_oof
        self.out_of_fold_ = point_oof
        self.calibration_ = Calibration(
            coverage=self.coverage,
            kind_corrections={
                str(kind): conformal_quantile(excess[kinds == kind], self._target)
                for kind in sorted(set(kinds))
                if (kinds == kind).sum() >= MIN_KIND_RUNS
            },
            point=TreeEnsemble.from_sklearn(self._regressor().fit(features, log_ratio)),
            upper=TreeEnsemble.from_sklearn(
                self._regressor(self.coverage).fit(features, log_ratio)
            ),
        )
        self.upper_out_of_fold_ = upper_oof
        return self

    def predict(self, features: NDArray[np.float64]) -> NDArray[np.float64]:
        if not hasattr(self, "calibration_"):
            raise RuntimeError("CalibrationFitter is not fitted")
        return self.calibration_.predict(features)


@dataclass
class Prepared:
    """Usable runs as arrays: uncensored, with a spec the estimator understands; the
    fixed cost (default + the environment's offset) apart from the model terms."""

    rows: list[Measurement]
    features: NDArray[np.float64]
    fixed_mib: NDArray[np.float64]  # default fixed cost + the environment's offset
    model_mib: NDArray[np.float64]  # the analytical model-dependent terms
    measured_mib: NDArray[np.float64]
    groups: NDArray[Any]
    kinds: NDArray[Any]
    censored: NDArray[np.bool_]
    skipped: dict[str, int]
    offsets: FixedCostOffsets

    @property
    def analytical_mib(self) -> NDArray[np.float64]:
        """The analytical estimate, with each environment's offset."""
        return self.fixed_mib + self.model_mib

    def peak_mib(self, log_ratio: NDArray[np.float64]) -> NDArray[np.float64]:
        """Peaks from predicted log-ratios of the model-dependent terms."""
        peak: NDArray[np.float64] = self.fixed_mib + self.model_mib * np.exp(log_ratio)
        return peak

    @property
    def log_ratio(self) -> NDArray[np.float64]:
        """log(measured model-dependent memory / analytical): the correction's target."""
        return self._log_ratio_over(self.fixed_mib)

    @property
    def bound_log_ratio(self) -> NDArray[np.float64]:
        """The analytical margin's nonconformity score: the log-ratio a run's model terms
        needed for the bound its environment gets to cover it. Where an environment's
        offset is not learned, that bound adds the largest training offset to the model
        terms' margin (`Estimator._modelled`), a constant of the calibration; a conformal
        margin holds for the score the bound is built from (Vovk et al. 2005), and the
        plain log-ratio would count such a stack's fixed cost (e.g. the CNN campaign's
        eager ~1 GiB) as model error, charging it twice. A learned offset's own margin
        is not credited: it is the spread of each environment's deciding runs (200 in
        training, as few as 5 in a new cluster), so it does not carry over; crediting it
        in the learned correction's scores left 14.5% of a held-out MLP campaign above
        its bound (bench/RESULTS.md, issue 15)."""
        unlearned = fixed_offset_spread(self.offsets)
        learned = {key for key in self.offsets.residuals if self.offsets.in_force(key)}
        allowance = np.array(
            [0.0 if environment_of(row) in learned else unlearned for row in self.rows]
        )
        return self._log_ratio_over(self.fixed_mib + allowance)

    def _log_ratio_over(self, fixed_mib: NDArray[np.float64]) -> NDArray[np.float64]:
        """log((measured - `fixed_mib`) / analytical model terms), the model terms taken
        to have used at least MIN_MODEL_SHARE of their estimate."""
        used = np.maximum(self.measured_mib - fixed_mib, MIN_MODEL_SHARE * self.model_mib)
        result: NDArray[np.float64] = np.log(used / self.model_mib)
        return result


def fixed_offset_spread(offsets: FixedCostOffsets) -> float:
    """The largest training environment's offset (at least 0): what a stack not learned
    yet may add over the defaults, the allowance its bounds carry."""
    return max([0.0, *offsets.offsets().values()])


def environment_offsets(
    rows: list[Measurement], fixed_mib: list[float], model_mib: list[float]
) -> FixedCostOffsets:
    """Each environment's offset from its uncensored runs' residuals over the
    analytical estimate made without one."""
    offsets = FixedCostOffsets()
    for row, fixed, model in zip(rows, fixed_mib, model_mib, strict=True):
        if not row.censored:
            offsets.observe(environment_of(row), row.measured_mib - fixed - model, model)
    return offsets


def beyond_the_card(terms: Breakdown, gpu: GpuDescription) -> bool:
    """Whether a run's analytical estimate reaches its card's memory. Such a run left a
    reading only where the analytical model overestimated it (any other ran out of
    memory, or was censored at the card's limit), so its ratio is a survivor's: the
    timm campaign's 64 such runs on its 40 GB cards measured 0.04-0.93 of their
    estimate (median 0.55), and trained on they taught the correction that every large
    job needs a third of its terms (0.39 of them for ResNet-50 at a batch of 512, on
    any card). Left out of training, they remain truths to judge by."""
    return terms.total >= gpu.memory_mib


def prepare(rows: list[Measurement], include_censored: bool = False) -> Prepared:
    """The usable runs with their features and analytical terms. Unless
    `include_censored`, runs censored by their card are left out: those that reached
    its memory, and those whose analytical estimate did (`beyond_the_card`)."""
    kept: list[Measurement] = []
    feats, fixed, model, kinds = [], [], [], []
    skipped: dict[str, int] = {}
    for row in rows:
        if row.censored and not include_censored:
            skipped["censored"] = skipped.get("censored", 0) + 1
            continue
        if row.implausible:  # no truth to learn from or judge by (measurements.py)
            reason = f"implausible: {row.implausible}"
            skipped[reason] = skipped.get(reason, 0) + 1
            continue
        try:
            spec = row.spec()
            shape = resolve(spec)
            gpu = describe(row.gpu_model)
            terms = breakdown(spec, gpu, shape)
        except SpecError as exc:
            reason = exc.problems[0].split(";")[0][:80]
            skipped[reason] = skipped.get(reason, 0) + 1
            continue
        if not include_censored and beyond_the_card(terms, gpu):
            skipped["analytical estimate beyond the card"] = (
                skipped.get("analytical estimate beyond the card", 0) + 1
            )
            continue
        kept.append(row)
        feats.append(features(spec, shape, terms))
        fixed.append(terms.fixed.total)
        model.append(terms.model_mib)
        kinds.append(model_kind(spec, shape))
    offsets = environment_offsets(kept, fixed, model)
    return Prepared(
        kept,
        np.array(feats, dtype=np.float64),
        np.array(fixed, dtype=np.float64)
        + np.array([offsets.offset_mib(environment_of(r)) for r in kept], dtype=np.float64),
        np.array(model, dtype=np.float64),
        np.array([r.measured_mib for r in kept], dtype=np.float64),
        np.array([r.group for r in kept]),
        np.array(kinds),
        np.array([r.censored for r in kept], dtype=bool),
        skipped,
        offsets,
    )


def _ranges(data: Prepared) -> dict[str, list[float]]:
    """The range of each sized feature over the training runs (the calibration's domain)."""
    return {
        name: [round(float(column.min()), 4), round(float(column.max()), 4)]
        for name in RANGED
        for column in [data.features[:, NAMES.index(name)]]
    }


def _analytical_margins(data: Prepared, coverage: float) -> dict[str, float]:
    """Per kind, the margin the analytical model needed over each run's bound-shaped
    score (`Prepared.bound_log_ratio`): conformal from enough runs, the stated
    small-sample margin below that (`calibrated_margin`)."""
    scores = data.bound_log_ratio
    return {
        str(kind): calibrated_margin(
            scores[data.kinds == kind], min(0.99, coverage + COVERAGE_SLACK)
        ).log_ratio
        for kind in sorted(set(data.kinds))
    }


def _git_revision() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            cwd=Path(__file__).parent,
            timeout=10,
        )
    except OSError:
        return "unknown"
    return out.stdout.strip() or "unknown"


def train(rows: list[Measurement], coverage: float = 0.95, data_sha256: str = "") -> Artifact:
    """Fit the calibration on every usable run and describe it in a manifest."""
    data = prepare(rows)
    # one thread: parallel histogram sums add in varying order, which would change
    # the trees from one machine to the next
    with threadpool_limits(limits=1):
        fitter = CalibrationFitter(coverage=coverage).fit(
            data.features, data.log_ratio, data.groups, data.kinds
        )
    calibration = fitter.calibration_
    core = {
        "format": FORMAT,
        "features": list(NAMES),
        "coverage": coverage,
        "domain": {
            "precisions": sorted({r.precision for r in data.rows}),
            "kinds": calibration.kinds,
            "ranges": _ranges(data),
        },
        "analytical_margins": _analytical_margins(data, coverage),
        # each training environment's fixed-cost offset over the current-stack defaults,
        # and the largest of them: what an environment not learned yet may add
        "fixed_offsets_mib": {k: round(v, 1) for k, v in data.offsets.offsets().items()},
        "fixed_offset_spread_mib": round(fixed_offset_spread(data.offsets), 1),
        "corrections": calibration.kind_corrections,
        "data": {"sha256": data_sha256, "runs_used": len(data.rows), "skipped": data.skipped},
        "libraries": {
            "python": platform.python_version(),
            "numpy": np.__version__,
            "scikit-learn": sklearn.__version__,
        },
        "validation": summarise(data, fitter.out_of_fold_, fitter.upper_out_of_fold_, calibration),
    }
    manifest = {
        **core,
        "version": version_of(model_bytes(calibration), core),
        "git_revision": _git_revision(),
    }
    return Artifact(calibration, manifest)


def table_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def summarise(
    data: Prepared,
    point_oof: NDArray[np.float64],
    upper_oof: NDArray[np.float64],
    calibration: Calibration,
) -> dict[str, dict[str, float]]:
    """Per source of a calibrated kind, on out-of-fold predictions: median and p90
    |error| of the peak, share above the upper bound, median upper/measured."""
    calibrated = np.isin(data.kinds, calibration.kinds)
    corrections = np.array([calibration.kind_corrections.get(str(k), 0.0) for k in data.kinds])
    peak = data.peak_mib(point_oof)
    upper = np.maximum(peak, data.peak_mib(upper_oof + corrections))
    sources = np.array([r.source for r in data.rows])
    return {
        source: scores(peak[mask], upper[mask], data.measured_mib[mask])
        for source in sorted(set(sources[calibrated]))
        for mask in [(sources == source) & calibrated]
    }


def scores(
    peak: NDArray[np.float64], upper: NDArray[np.float64], measured: NDArray[np.float64]
) -> dict[str, float]:
    error = np.abs(peak - measured) / measured
    return {
        "runs": float(len(measured)),
        "median_abs_pct_error": round(float(np.median(error)) * 100, 2),
        "p90_abs_pct_error": round(float(np.percentile(error, 90)) * 100, 2),
        "share_above_upper": round(float(np.mean(measured > upper)), 4),
        "median_upper_over_measured": round(float(np.median(upper / measured)), 3),
    }


def cross_validate(
    rows: list[Measurement], coverage: float = 0.95, folds: int = 5
) -> tuple[Prepared, NDArray[np.float64], NDArray[np.float64]]:
    """Held-out peaks and upper bounds for every run, its architecture never trained on.

    Each outer fold trains the whole estimator (calibration, inner-fold corrections,
    analytical margins, environments' offsets) on the other architectures' uncensored
    runs and estimates the held-out runs through `Estimator.estimate` in their
    environment, exactly as a user of that cluster would get them.
    """
    data = prepare(rows, include_censored=True)
    peak = np.empty_like(data.measured_mib)
    upper = np.empty_like(data.measured_mib)
    for train_idx, test_idx in GroupKFold(n_splits=folds).split(data.features, groups=data.groups):
        trained = [data.rows[i] for i in train_idx]
        estimator = Estimator(train(trained, coverage), offsets=prepare(trained).offsets)
        for i in test_idx:
            row = data.rows[i]
            estimate = estimator.estimate(row.spec(), row.gpu_model, environment_of(row))
            peak[i], upper[i] = estimate.peak_mib, estimate.upper_mib
    return data, peak, upper


def refit(estimator: Estimator, base: list[Measurement]) -> Estimator:
    """A new estimator calibrated on `base` plus everything `estimator` observed (its
    history, offsets and GPUs kept); the old one is left as it was, so keeping it
    undoes the refit."""
    artifact = train([*base, *estimator.observations])
    return estimator.with_artifact(artifact)
