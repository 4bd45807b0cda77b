"""Estimator accuracy on held-out architectures and held-out environments.

    .venv/bin/python bench/estimator_accuracy.py [--shared ../shared/data] [--first-runs 10]

1. Held-out architectures: five folds grouped by architecture family over
   `estimator/learned/data/measurements.csv`; per source, Colloc beside the analytical
   model alone and the published estimators (Horus, FakeTensor, GPUMemNet) where the
   source lists their figures.
2. Held-out environments (leave-one-environment-out): each measurement campaign in
   turn is left out of training entirely and judged, (a) as a new cluster first sees it,
   without a learned fixed-cost offset, (b) with the per-environment offset
   (`estimator/offsets.py`) learned from its first `--first-runs` runs (half the runs of
   a smaller campaign), and (c) with the offset learned from the first `--first-runs`
   runs that may decide one (model terms small enough, `offsets.decides`), wherever they
   come in the campaign: what the cluster reaches once such runs have finished (an
   offset needs 5 of them). All variants are scored on the same runs: neither the first
   few nor those deciding runs. Lucid's RTX 3090 runs are a campaign that is never
   trained on. Per environment and per architecture family within it: median and p90
   |error| of `peak_mib`, share above `upper_mib`, median `upper_mib`/measured.
3. LLM pre-training at scale: torchtitan's published Llama 3.1 runs (`bench/data`)
   against the model-dependent part of the estimate (torchtitan reports reserved
   memory, which leaves out the CUDA context).
4. History at other batch sizes: each measured run whose configuration (the spec but
   for its batch, on one GPU model, in one campaign) also ran at other batch sizes is
   estimated from those runs alone by `estimator.history.batch_line` (method
   `history-batch`, bound: the line plus `HISTORY_MARGIN`), beside lines the estimator
   does not follow: the chord alone, and lines extrapolated beyond the batches seen.
5. History beyond the batch sizes seen: five folds grouped by model; each held-out run
   is estimated after its configuration's runs at the other batch sizes (same GPU
   model and campaign) were observed, with the campaign's offset learned from the
   training runs. Where the estimator bounds it by those runs' model terms over the
   analytical terms (method `history-ratio`), the bound is compared on the same
   runs with the one it replaces: the calibration's, raised as far as the model's runs
   went above their estimates.
6. The in-process time of one estimate, beside the analytical model's in the same run.
7. Published runs of other teams (`bench/data/published_runs.csv`: BERT-large on a V100,
   ViT-L/16 in four precisions, DeiT and Swin under AMP on an RTX 3090), on stacks and
   GPUs no campaign here comes from, each against the shipped estimator.
8. The catalog's traces against the FakeTensor campaign's own: per timm model, the
   growth per added sample of the tensors PyTorch's FakeTensor traced on that campaign's
   stack (listed beside each reading) over the catalog's saved bytes per sample, taken
   relative to the median model (the two tools count by different rules). FakeTensor
   grows exactly linearly with the batch; a model whose growth differs by more than 5%
   between its batch sizes has a broken trace and is left out.

Implausible rows (`measurements.py`) are counted and left out of every truth.
"""

from __future__ import annotations

import argparse
import csv
import json
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray
from sklearn.model_selection import GroupKFold

from estimator.analytical.model import breakdown, resolve
from estimator.estimate import HISTORY_RATIO, Estimate, Estimator, default_estimator
from estimator.history import (
    HISTORY_MARGIN,
    ObservationHistory,
    batch_line,
    bracket,
    configuration,
    line_through,
)
from estimator.learned import measurements
from estimator.learned.artifact import Artifact
from estimator.learned.calibration import coverage_by_group
from estimator.learned.measurements import Measurement
from estimator.learned.train import cross_validate, scores, train
from estimator.offsets import decides
from estimator.spec import TrainingSpec

THEIRS = {"horus_mib": "Horus", "faketensor_mib": "FakeTensor", "gpumemnet_mib": "GPUMemNet"}
TARGET_ABOVE = 0.05  # the coverage target: at most 5% of runs above upper_mib
ROOT = Path(__file__).resolve().parent
TORCHTITAN = ROOT / "data" / "torchtitan_llama31.csv"
PUBLISHED = ROOT / "data" / "published_runs.csv"
# Llama 3.1 configs (meta-llama/Llama-3.1-{8B,70B,405B} config.json)
LLAMA31 = {
    "llama3.1-8b": {"layers": 32, "hidden": 4096, "heads": 32, "ffn_hidden": 14336},
    "llama3.1-70b": {"layers": 80, "hidden": 8192, "heads": 64, "ffn_hidden": 28672},
    "llama3.1-405b": {"layers": 126, "hidden": 16384, "heads": 128, "ffn_hidden": 53248},
}
LLAMA_COMMON = {"kv_heads": 8, "vocab": 128256, "gated_mlp": True}
LLAMA_COMMON |= {"tied_embeddings": False, "dropout": False}


def row(name: str, figures: dict[str, float]) -> str:
    cells = [
        f"{int(figures['runs'])}",
        f"{figures['median_abs_pct_error']:.1f}%",
        f"{figures['p90_abs_pct_error']:.1f}%",
        f"{figures['share_above_upper']:.1%}",
        f"{figures['median_upper_over_measured']:.2f}",
    ]
    return f"| {name} | " + " | ".join(cells) + " |"


HEADER = "| runs | median abs err | p90 abs err | above bound | median bound/measured |"


def held_out_architectures(rows: list[Measurement]) -> None:
    started = time.perf_counter()
    data, peak, upper = cross_validate(rows)
    fit_s = time.perf_counter() - started
    sources = np.array([r.source for r in data.rows])
    ok = ~data.censored
    print("\n### Held-out architectures (grouped 5-fold)\n")
    print("| source / estimator " + HEADER)
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
    groups = np.array([r.group for r in data.rows])
    families = coverage_by_group(data.measured_mib[ok], upper[ok], groups[ok])
    count, failing, runs, named = failing_families(families)
    print(
        f"\n- held-out families: {count}; with more than {TARGET_ABOVE:.0%} of their runs "
        f"above the bound: {failing} ({runs} runs); worst: {named}"
    )
    at_limit = data.measured_mib >= measurements.CENSORED_MIB
    let_in = int(np.sum(upper[at_limit] < measurements.CENSORED_MIB))
    print(
        f"\n- runs at the 40 GB card's limit (>= {measurements.CENSORED_MIB} MiB): "
        f"{int(at_limit.sum())}; Colloc's bound said they fit below it on {let_in}"
    )
    print(f"- cross-validation wall time: {fit_s:.1f} s")


def failing_families(by_family: dict[str, tuple[int, float]]) -> tuple[int, int, int, str]:
    """Families, those above the coverage target, their runs, the worst five named."""
    failing = {g: v for g, v in by_family.items() if v[1] > TARGET_ABOVE}
    worst = sorted(failing.items(), key=lambda kv: -kv[1][1] * kv[1][0])[:5]
    named = ", ".join(f"{g} {share:.0%} of {n}" for g, (n, share) in worst) or "-"
    return len(by_family), len(failing), sum(n for n, _share in failing.values()), named


@dataclass
class Judged:
    """One held-out environment's runs and the estimates of one variant."""

    rows: list[Measurement]
    peak: NDArray[np.float64]
    upper: NDArray[np.float64]

    @property
    def measured(self) -> NDArray[np.float64]:
        return np.array([r.measured_mib for r in self.rows], dtype=np.float64)


def judge(rows: Sequence[Measurement], estimate: Callable[[Measurement], Estimate]) -> Judged:
    answers = [estimate(r) for r in rows]
    return Judged(
        list(rows),
        np.array([a.peak_mib for a in answers], dtype=np.float64),
        np.array([a.upper_mib for a in answers], dtype=np.float64),
    )


def with_offset(
    artifact: Artifact, environment: str, first: Sequence[Measurement]
) -> Callable[[Measurement], Estimate]:
    """Estimates of a cluster that has seen `first` runs of the environment finish: its
    learned fixed-cost offset (estimator/offsets.py) is in every later estimate."""
    estimator = Estimator(artifact)
    for run in first:
        estimator.learn_fixed_cost(run.spec(), run.gpu_model, run.measured_mib, environment)
    return lambda r: estimator.estimate(r.spec(), r.gpu_model, environment)


def without_offset(artifact: Artifact, environment: str) -> Callable[[Measurement], Estimate]:
    """Estimates of a cluster that has seen no run of the environment yet."""
    estimator = Estimator(artifact)
    return lambda r: estimator.estimate(r.spec(), r.gpu_model, environment)


def first_deciding(
    artifact: Artifact, environment: str, rows: Sequence[Measurement], count: int
) -> list[Measurement]:
    """The first `count` of `rows` whose model-dependent terms may decide an offset."""
    probe = Estimator(artifact)
    found: list[Measurement] = []
    for r in rows:
        if len(found) == count:
            break
        residual = probe.fixed_cost_residual(r.spec(), r.gpu_model, r.measured_mib, environment)
        if decides(residual.residual_mib, residual.model_mib):
            found.append(r)
    return found


def usable(rows: Sequence[Measurement]) -> list[Measurement]:
    """Runs that are truth: a reached peak (not censored) the rule finds plausible."""
    return [r for r in rows if not r.censored and not r.implausible]


def tightest_bound(judged: Judged) -> float:
    """The median bound/measured of the tightest bound that still meets the coverage
    target with one factor on every peak: what the point estimates' own spread allows
    a bound, whatever its margin is calibrated from."""
    factor = float(np.quantile(judged.measured / judged.peak, 1 - TARGET_ABOVE))
    return float(np.median(judged.peak * factor / judged.measured))


def held_out_environments(
    table: list[Measurement], lucid: list[Measurement], first_runs: int
) -> None:
    environments = [*sorted({r.source for r in table}), "lucid"]
    print(f"\n### Held-out environments (leave one out; offset from the first {first_runs} runs)\n")
    print("| environment / offset " + HEADER)
    print("|---|---|---|---|---|---|")
    families: list[tuple[str, dict[str, tuple[int, float]]]] = []
    shipped: Artifact | None = None
    seconds: list[str] = []
    tightest: list[str] = []
    for environment in environments:
        started = time.perf_counter()
        if environment == "lucid":  # never trained on: the shipped calibration
            shipped = shipped or default_estimator().artifact
            artifact, held = shipped, usable(lucid)
        else:
            artifact = train([r for r in table if r.source != environment])
            held = usable([r for r in table if r.source == environment])
        assert artifact is not None
        # a small campaign gives at most half its runs to the offset, half to the score
        count = min(first_runs, len(held) // 2)
        first = held[:count]
        deciding = first_deciding(artifact, environment, held[count:], count)
        rest = [r for r in held[count:] if all(r is not d for d in deciding)]
        for label, estimate in (
            ("none", without_offset(artifact, environment)),
            (f"first {len(first)} runs", with_offset(artifact, environment, first)),
            (
                f"first {len(deciding)} deciding runs",
                with_offset(artifact, environment, deciding),
            ),
        ):
            judged = judge(rest, estimate)
            print(
                row(f"{environment} / {label}", scores(judged.peak, judged.upper, judged.measured))
            )
        groups = np.array([r.group for r in judged.rows])
        families.append((environment, coverage_by_group(judged.measured, judged.upper, groups)))
        tightest.append(f"{environment} {tightest_bound(judged):.2f}")
        seconds.append(f"{environment} {time.perf_counter() - started:.0f} s")
    print(
        "\n- the tightest bound the point estimates allow (one factor on every peak that "
        f"leaves {TARGET_ABOVE:.0%} of the runs above it; offset from the deciding runs), "
        f"median bound/measured: {', '.join(tightest)}"
    )
    print(f"\n- trained and judged in: {', '.join(seconds)}")
    print("\n#### Coverage per held-out architecture family (with the offset)\n")
    print("| environment | families | families above 5% | runs in them | worst families |")
    print("|---|---|---|---|---|")
    for environment, by_family in families:
        count, failing, runs, named = failing_families(by_family)
        print(f"| {environment} | {count} | {failing} | {runs} | {named} |")


def torchtitan_spec(raw: dict[str, str]) -> TrainingSpec:
    parallelism: dict[str, Any] = {
        "dp": int(raw["dp"]),
        "tp": int(raw["tp"]),
        "pp": int(raw["pp"]),
        "cp": int(raw["cp"]),
        "zero_stage": 3,
        "sequence_parallel": int(raw["tp"]) > 1,
    }
    if raw["microbatches"]:
        parallelism |= {"microbatches": int(raw["microbatches"]), "pp_schedule": raw["pp_schedule"]}
    return TrainingSpec.model_validate(
        {
            "model": {"transformer": LLAMA31[raw["model"]] | LLAMA_COMMON},
            "batch_size": int(raw["batch_size"]),
            "seq_len": int(raw["seq_len"]),
            "precision": raw["precision"],
            "optimizer": "adamw",
            "activation_checkpointing": raw["activation_checkpointing"],
            "flash_attention": True,
            "parallelism": parallelism,
        }
    )


def llm_pretraining() -> None:
    """Reserved memory has no CUDA context: the estimate's and bound's fixed cost is
    taken off before comparing."""
    print("\n### LLM pre-training (torchtitan, Llama 3.1, H100 96GB; reserved memory)\n")
    print(
        "| table | model | setup | GPUs | seq | measured GiB | estimated GiB | ratio | bound GiB |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    ratios: dict[bool, list[float]] = {False: [], True: []}
    above = 0
    estimator = default_estimator()
    for raw in csv.DictReader(TORCHTITAN.open(encoding="utf-8")):
        answer = estimator.estimate(torchtitan_spec(raw), "H100")
        estimated = (answer.peak_mib - answer.fixed_mib) / 1024
        bound = (answer.upper_mib - answer.fixed_mib) / 1024
        measured = float(raw["reserved_gib"])
        ratios[raw["compiled"] == "True"].append(estimated / measured)
        above += measured > bound
        print(
            f"| {raw['table']} | {raw['model']} | {raw['setup']} | {raw['gpus']} | "
            f"{raw['seq_len']} | {measured:.1f} | {estimated:.1f} | {estimated / measured:.2f} "
            f"| {bound:.1f} |"
        )
    print(f"\n- runs above the bound: {above} of {sum(len(v) for v in ratios.values())}")
    for compiled, values in ratios.items():
        if values:
            error = np.abs(np.array(values) - 1) * 100
            print(
                f"\n- {'torch.compile' if compiled else 'eager'} runs: {len(values)}, median "
                f"|error| {np.median(error):.1f}%, worst {error.max():.1f}%, "
                f"estimate/measured {min(values):.2f}-{max(values):.2f}"
            )


def published_runs() -> None:
    """nvidia-smi's reading holds the CUDA context; the allocator's reserved and
    allocated peaks do not, so the estimate's fixed cost is taken off before those are
    compared, and an allocated peak leaves out the allocator's cache too, so its
    `allocator` term as well."""
    print("\n### Published runs of other teams (bench/data/published_runs.csv)\n")
    print("| run | setup | reading | measured MiB | estimated | ratio | bound | method |")
    print("|---|---|---|---|---|---|---|---|")
    ratios: dict[str, list[float]] = {}
    above = 0
    estimator = default_estimator()
    for raw in csv.DictReader(PUBLISHED.open(encoding="utf-8")):
        spec = TrainingSpec.model_validate(json.loads(raw["spec"]))
        answer = estimator.estimate(spec, raw["gpu"])
        fixed = 0 if raw["measure"] == "nvidia-smi" else answer.fixed_mib
        if raw["measure"] == "allocated":
            fixed += answer.breakdown_mib["allocator"]
        estimated, bound = answer.peak_mib - fixed, answer.upper_mib - fixed
        measured = int(raw["measured_mib"])
        ratios.setdefault(raw["id"].rstrip("0123456789"), []).append(estimated / measured)
        above += measured > bound
        print(
            f"| {raw['id']} | {raw['setup']} | {raw['measure']} | {measured} | {estimated} "
            f"| {estimated / measured:.2f} | {bound} | {answer.method} |"
        )
    runs = sum(len(v) for v in ratios.values())
    print(f"\n- runs above the bound: {above} of {runs}")
    for source, values in ratios.items():
        print(f"- {source}: estimate/measured {min(values):.2f}-{max(values):.2f}")


def against_campaign_traces(table: list[Measurement]) -> None:
    traced: dict[str, dict[int, float]] = {}
    catalog: dict[str, float] = {}
    for r in table:
        if r.source == "timm" and r.faketensor_mib:
            traced.setdefault(r.model, {})[r.batch_size] = r.faketensor_mib
            if r.model not in catalog:  # fp32 MiB per sample
                catalog[r.model] = resolve(r.spec()).activations_per_sample * 4 / 2**20
    ratios = []
    for model, peaks in traced.items():
        batches = sorted(peaks)
        growth = [(peaks[b] - peaks[a]) / (b - a) for a, b in pairwise(batches)]
        if growth and min(growth) > 0 and max(growth) <= 1.05 * min(growth):
            ratios.append(float(np.median(growth)) / catalog[model])
    relative = np.array(ratios) / np.median(ratios)
    quantiles = (0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99)
    print("\n### The catalog's traces against the FakeTensor campaign's own\n")
    print("| models | " + " | ".join(f"q{q:g}" for q in quantiles) + " | outside 0.9-1.1 |")
    print("|---" * (len(quantiles) + 2) + "|")
    cells = " | ".join(f"{v:.3f}" for v in np.quantile(relative, quantiles))
    outside = int(np.sum((relative < 0.9) | (relative > 1.1)))
    print(f"| {len(relative)} | {cells} | {outside} |")


def implausible_counts(table: list[Measurement]) -> None:
    counts = Counter((r.source, r.implausible) for r in table if r.implausible)
    print("\n### Implausible rows (left out of training and of every truth here)\n")
    print("| source | rule | rows |")
    print("|---|---|---|")
    for (source, rule), n in sorted(counts.items()):
        print(f"| {source} | {rule} | {n} |")


Line = Callable[[dict[int, float], int], float | None]


def chord_only(peaks: dict[int, float], batch: int) -> float | None:
    """The line between the nearest batches on either side alone (`bracket`)."""
    pair = bracket(peaks, batch)
    return None if pair is None else line_through(peaks, *pair, batch)


def extrapolated_up(peaks: dict[int, float], batch: int) -> float | None:
    """The line through the two nearest batches below, followed beyond the largest."""
    below = sorted(b for b in peaks if b < batch)
    if len(below) < 2 or any(b > batch for b in peaks):
        return None
    return line_through(peaks, below[-2], below[-1], batch)


def extrapolated_down(peaks: dict[int, float], batch: int) -> float | None:
    """The line through the two nearest batches above, followed below the smallest."""
    above = sorted(b for b in peaks if b > batch)
    if len(above) < 2 or any(b < batch for b in peaks):
        return None
    return line_through(peaks, above[0], above[1], batch)


def batch_lines(table: list[Measurement]) -> None:
    runs = usable(table)
    groups: dict[tuple[str, str, str], list[Measurement]] = {}
    for r in runs:
        groups.setdefault((r.source, configuration(r.spec()), r.gpu_model), []).append(r)
    rules: list[tuple[str, Line]] = [
        ("history-batch (shipped)", batch_line),
        ("chord alone", chord_only),
        ("extrapolated up (not followed)", extrapolated_up),
        ("extrapolated down (not followed)", extrapolated_down),
    ]
    print(
        "\n### History at other batch sizes: runs estimated from their configuration's "
        f"other runs (bound: line + {HISTORY_MARGIN:.0%})\n"
    )
    print("| source / line " + HEADER)
    print("|---|---|---|---|---|---|")
    for source in sorted({r.source for r in runs}):
        for name, line in rules:
            found: list[tuple[float, float]] = []  # (line, measured)
            for (group_source, _, _), members in groups.items():
                if group_source != source:
                    continue
                for held in members:
                    peaks: dict[int, float] = {}
                    for other in members:
                        if other.batch_size != held.batch_size:
                            size = other.batch_size
                            peaks[size] = max(peaks.get(size, 0.0), other.measured_mib)
                    value = line(peaks, held.batch_size)
                    if value is not None:
                        found.append((value, held.measured_mib))
            if not found:
                continue
            peak = np.array([f[0] for f in found])
            measured = np.array([f[1] for f in found], dtype=np.float64)
            print(row(f"{source} / {name}", scores(peak, peak * (1 + HISTORY_MARGIN), measured)))


def batch_ratio_bounds(table: list[Measurement]) -> None:
    runs = usable(table)
    found: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
    folds = GroupKFold(n_splits=5).split(runs, groups=[r.model for r in runs])
    for train_idx, test_idx in folds:
        artifact = train([runs[i] for i in train_idx])
        held: dict[tuple[str, str, str], list[Measurement]] = {}
        for i in test_idx:
            held.setdefault((runs[i].source, runs[i].model, runs[i].gpu_model), []).append(runs[i])
        for source in sorted({source for source, _, _ in held}):
            estimator = Estimator(artifact)  # the campaign's offset, from training runs
            for i in train_idx:
                if runs[i].source == source:
                    r = runs[i]
                    estimator.learn_fixed_cost(r.spec(), r.gpu_model, r.measured_mib)
            for (group_source, _, _), members in held.items():
                if group_source != source:
                    continue
                for h in members:
                    estimator.history = ObservationHistory()
                    calibrated = estimator.estimate(h.spec(), h.gpu_model)
                    for other in members:
                        if other.batch_size != h.batch_size:
                            estimator.observe(other.spec(), other.gpu_model, other.measured_mib)
                    estimate = estimator.estimate(h.spec(), h.gpu_model)
                    if not estimate.method.startswith(HISTORY_RATIO):
                        continue
                    # before: the calibration's bound, raised as far as the model's runs
                    # went above its estimates (MODEL_HISTORY)
                    above = estimator.history.model_ratio(h.spec()) or 0.0
                    raised = calibrated.peak_mib * above * (1 + HISTORY_MARGIN)
                    bounds = {
                        "calibration, raised by the model's runs": max(
                            calibrated.upper_mib, raised
                        ),
                        "history-ratio (shipped)": estimate.upper_mib,
                    }
                    for name, bound in bounds.items():
                        found.setdefault((source, name), []).append(
                            (estimate.peak_mib, bound, h.measured_mib)
                        )
    print(
        "\n### History beyond the batch sizes seen: runs bounded by their "
        "configuration's runs at other batch sizes (held out by model)\n"
    )
    print("| source / bound " + HEADER)
    print("|---|---|---|---|---|---|")
    for (source, name), values in sorted(found.items()):
        peak, upper, measured = np.array(values, dtype=np.float64).T
        print(row(f"{source} / {name}", scores(peak, upper, measured)))


def timing() -> None:
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
        breakdown(spec, None)
    analytical_ms = (time.perf_counter() - started) / count * 1000
    print(
        f"\n- one estimate in-process: {per_call_ms:.2f} ms; the analytical breakdown alone "
        f"{analytical_ms:.2f} ms; ratio {per_call_ms / analytical_ms:.1f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shared", type=Path, default=ROOT.parent.parent / "shared" / "data")
    parser.add_argument("--first-runs", type=int, default=10)
    parser.add_argument("--skip-folds", action="store_true", help="leave out section 1")
    args = parser.parse_args()
    table = measurements.read()
    implausible_counts(table)
    if not args.skip_folds:
        held_out_architectures(table)
    held_out_environments(table, measurements.lucid_rows(args.shared), args.first_runs)
    llm_pretraining()
    batch_lines(table)
    batch_ratio_bounds(table)
    timing()
    published_runs()
    against_campaign_traces(table)


if __name__ == "__main__":
    main()
