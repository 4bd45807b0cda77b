"""Estimator accuracy on held-out architectures, beside published estimators.

    .venv/bin/python bench/estimator_accuracy.py

Five folds grouped by architecture (every run of a held-out architecture, at every
batch size, is unseen in training). Per source of `estimator/learned/data/measurements.csv`:
median and p90 |error| of `peak_mib`, share of runs above `upper_mib`, median
`upper_mib`/measured; the analytical model alone; and Horus, FakeTensor and GPUMemNet
on the runs where the source lists their estimates. Runs censored at the 40 GB card's
limit count only for safety: how many of them Colloc's bound would have let start on
a 40 GB GPU as if they fitted. Last, the in-process time of one estimate.
"""

from __future__ import annotations

import time

import numpy as np

from estimator.estimate import default_estimator
from estimator.learned import measurements
from estimator.learned.train import cross_validate, scores
from estimator.spec import TrainingSpec

THEIRS = {"horus_mib": "Horus", "faketensor_mib": "FakeTensor", "gpumemnet_mib": "GPUMemNet"}


def row(name: str, figures: dict[str, float]) -> str:
    cells = [
        f"{int(figures['runs'])}",
        f"{figures['median_abs_pct_error']:.1f}%",
        f"{figures['p90_abs_pct_error']:.1f}%",
        f"{figures['share_above_upper']:.1%}",
        f"{figures['median_upper_over_measured']:.2f}",
    ]
    return f"| {name} | " + " | ".join(cells) + " |"


def main() -> None:
    started = time.perf_counter()
    data, peak, upper = cross_validate(measurements.read())
    fit_s = time.perf_counter() - started
    sources = np.array([r.source for r in data.rows])
    ok = ~data.censored
    print(
        "| source / estimator | runs | median abs err | p90 abs err | above bound | "
        "median bound/measured |"
    )
    print("|---|---|---|---|---|---|")
    for source in sorted(set(sources)):
        mask = (sources == source) & ok
        measured = data.measured_mib[mask]
        print(row(f"{source} / Colloc", scores(peak[mask], upper[mask], measured)))
        analytical = data.analytical_mib[mask]
        print(row(f"{source} / analytical only", scores(analytical, analytical, measured)))
        for label in THEIRS:
            theirs = np.array(
                [getattr(r, label) for r, m in zip(data.rows, mask, strict=True) if m], dtype=object
            )
            present = theirs != None  # noqa: E711 (element-wise on an object array)
            if present.any():
                values = theirs[present].astype(float)
                print(row(f"{source} / {THEIRS[label]}", scores(values, values, measured[present])))
    at_limit = data.measured_mib >= measurements.CENSORED_MIB
    let_in = int(np.sum(upper[at_limit] < measurements.CENSORED_MIB))
    crashed = data.censored & ~at_limit
    print(
        f"\nruns at the 40 GB card's limit (>= {measurements.CENSORED_MIB} MiB): "
        f"{int(at_limit.sum())}; Colloc's bound said they fit below it on {let_in}"
    )
    print(f"runs that crashed before their peak (excluded): {int(crashed.sum())}")
    print(f"cross-validation wall time: {fit_s:.1f} s")

    estimator = default_estimator()
    spec = TrainingSpec.model_validate({"model": {"catalog": "timm:resnet50"}, "batch_size": 64})
    estimator.estimate(spec, "A100-40GB")
    count = 500
    started = time.perf_counter()
    for _ in range(count):
        estimator.estimate(spec, "A100-40GB")
    per_call_ms = (time.perf_counter() - started) / count * 1000
    started = time.perf_counter()
    for _ in range(count):
        estimator.estimate(spec.model_copy(update={"precision": "bf16"}), "A100-40GB")
    analytical_ms = (time.perf_counter() - started) / count * 1000
    print(
        f"one estimate in-process: {per_call_ms:.2f} ms (analytical+learned); "
        f"{analytical_ms:.2f} ms analytical only; ratio {per_call_ms / analytical_ms:.2f}"
    )


if __name__ == "__main__":
    main()
