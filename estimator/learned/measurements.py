"""Measured peaks the learned part trains on, as a table of facts with provenance.

`extract()` turns the public measurements in `../shared/data/gpumemnet` into one row
per run: the TrainingSpec it describes, the GPU, the measured peak and, where the
source has them, other estimators' figures. Only these numbers are kept (see
`data/README.md`); the table is committed so training needs nothing outside the repo:

    colloc estimator extract ../shared/data

Rows that are physically implausible are flagged (`implausible_runs`, the rule below)
and left out of training; the flag is in the table so that anything reading it (the
simulator's true peaks included) can leave them out too.
"""

from __future__ import annotations

import ast
import csv
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields, replace
from itertools import combinations
from pathlib import Path
from typing import Any

from estimator.analytical.model import SpecError, breakdown
from estimator.spec import TrainingSpec

TABLE = Path(__file__).with_name("data") / "measurements.csv"
A100 = "NVIDIA A100-SXM4-40GB"
# Runs at or above this sat at the 40 GB card's limit: "needs at least", not a peak.
CENSORED_MIB = 39000

# The implausible-measurement rule. Every term of a training process's peak either
# does not depend on the batch (weights, gradients, optimizer state, CUDA context,
# library workspaces) or grows with it (saved activations), so one configuration's
# peak never falls as its batch grows. What can still move a peak down a little:
# cuDNN choosing another algorithm (and workspace) per shape, a 1-5 Hz sampler
# missing a transient such as the optimizer step's temporaries, the caching
# allocator's 20 MiB segment rounding: a few hundred MiB on runs of 2-40 GB, under
# FALL_TOLERANCE of the peak. A run more than that below a smaller batch's peak did
# not show its own peak (it failed first) or the smaller one is inflated.
FALL_TOLERANCE = 0.10
# Nor does a peak grow faster than the batch: the terms that grow are proportional to
# it, the rest constant, so a peak at batch b2 is at most b2/b1 times the peak at a
# smaller batch b1. A run more than FALL_TOLERANCE above that bound held memory its
# training did not allocate (a cuDNN benchmark's trial workspaces kept by the caching
# allocator, a stale reading) or the smaller run did not show its own peak.
# Identical peaks at batches SAME_PEAK_BATCH_RATIO or more apart are implausible when
# the batch difference adds more saved activations than one allocator segment
# (c10/cuda/CUDACachingAllocator.cpp kLargeBuffer, 20 MiB): the larger batch cannot
# have held them in the same memory (a capped or stale reading). Both runs are
# flagged: nothing tells which one is wrong.
SAME_PEAK_BATCH_RATIO = 4
ALLOCATOR_SEGMENT_MIB = 20.0
# Nor does a step hold many times its own tensors. Where the source traced them
# (FakeTensor: weights, gradients, optimizer state, saved activations and temporaries
# of one step), a process holds its stack's fixed cost (CUDA context, library handles:
# at most the campaign's smallest reading on that GPU) and the caching allocator's
# pool: the traced tensors plus the workspaces FakeTensor does not trace (cuDNN's
# convolution algorithms), all of which fragmentation can leave as much again cached
# and unusable (half a card: pytorch/pytorch#35901, #44742). With the workspaces
# allowed as much as the tensors (an allowance, not a bound physics gives: a cuDNN
# benchmark sizes its trial workspaces by the free memory), the pool is at most
# 2 x (1 + 1) = TENSOR_FACTOR times the tensors. A reading beyond that held memory
# sized by the free card rather than by the training (trial workspaces the caching
# allocator kept) or is stale: it is flagged whatever the configuration's other runs
# show. The data has no gap there (28 timm runs beyond 4x, 18 more beyond 3x).
TENSOR_FACTOR = 4.0
# Sets of runs are enumerated per configuration (2^n): the shared sheets have at most
# 5 batch sizes per configuration; a larger series is an error, not a slow extraction.
MAX_RUNS_JUDGED = 12


@dataclass(frozen=True)
class Measurement:
    source: str
    group: str  # the architecture: grouped folds keep all its runs together
    model: str  # JSON of the spec's `model`
    batch_size: int
    seq_len: int | None
    image_size: int | None
    precision: str
    optimizer: str
    gpu_model: str
    measured_mib: int
    censored: bool
    flash_attention: bool | None = None  # as TrainingSpec's (None: unset)
    horus_mib: float | None = None
    faketensor_mib: float | None = None
    gpumemnet_mib: float | None = None
    extra: str = "{}"  # JSON of the remaining TrainingSpec fields (parallelism, ...)
    implausible: str = ""  # the rule that flags the run ("" if none: see implausible_runs)

    def spec(self) -> TrainingSpec:
        return TrainingSpec.model_validate(
            {
                "model": json.loads(self.model),
                "batch_size": self.batch_size,
                "seq_len": self.seq_len,
                "image_size": self.image_size,
                "precision": self.precision,
                "optimizer": self.optimizer,
                "flash_attention": self.flash_attention,
                **json.loads(self.extra),
            }
        )


def observation(spec: TrainingSpec, gpu_model: str, peak_mib: int) -> Measurement:
    """A peak observed on the cluster, as a training row grouped by its model."""
    model = json.dumps(spec.model.model_dump(mode="json", exclude_none=True), sort_keys=True)
    extra = spec.model_dump(
        mode="json", include={"activation_checkpointing", "master_weights", "parallelism"}
    )
    return Measurement(
        "cluster",
        f"cluster:{model}",
        model,
        spec.batch_size,
        spec.seq_len,
        spec.image_size,
        spec.precision,
        spec.optimizer,
        gpu_model,
        peak_mib,
        False,
        spec.flash_attention,
        extra=json.dumps(extra, sort_keys=True),
    )


def _group(name: str) -> str:
    """Architecture family of a timm name: `beitv2_large_patch16_224` -> `beit`."""
    head = re.match(r"[a-z]+", name.lower())
    family = head.group(0) if head else name
    return re.sub(r"v\d*$", "", family) or family


def _mlp_rows(path: Path, source: str) -> list[Measurement]:
    rows = []
    for row in csv.DictReader(path.open(encoding="utf-8")):
        layers = ast.literal_eval(row["Activations-Params"])
        settings = dict(re.findall(r"(input|output|depth|arch|batch):([^_]+)", row["Filename"]))
        widths = [int(width) for _kind, width, _params in layers]
        summary = {
            "params": int(row["Total Parameters"]),
            "activations_per_sample": int(row["Total Activations"]) + int(settings["input"]),
            "largest_activation_per_sample": max([*widths, int(settings["input"])]),
            "layers": {"linear": sum(1 for kind, _w, _p in layers if kind == "linear")},
        }
        shape = "-".join(settings[key] for key in ("input", "output", "depth", "arch"))
        group = f"{source}:{shape}"
        rows.append(
            Measurement(
                source,
                group,
                json.dumps({"summary": summary}, sort_keys=True),
                int(row["Batch Size"]),
                None,
                None,
                "fp32",
                "adam",
                A100,
                int(row["Max GPU Memory (MiB)"]),
                False,
            )
        )
    return rows


def beyond_tensors(measured_mib: float, tensors_mib: float | None, stack_mib: float) -> bool:
    """Whether a reading held more than TENSOR_FACTOR times the step's traced tensors
    above its stack's fixed cost (never, where the tensors were not traced)."""
    return tensors_mib is not None and measured_mib - stack_mib > TENSOR_FACTOR * tensors_mib


def _could_exceed_card(batch: int, reached: Sequence[tuple[int, int]]) -> bool:
    """Whether a run at `batch` could have needed more than the 40 GB card, given the
    (batch, peak) of smaller runs that showed their peak: a peak grows at most linearly
    with the batch (GROWS, below), so a peak at the card must not grow faster than the
    batch from any of them."""
    at_card = Run(batch, CENSORED_MIB)
    return not any(_breaks(Run(smaller, peak), at_card) == GROWS for smaller, peak in reached)


def _timm_rows(path: Path) -> list[Measurement]:
    """timm runs. A run at the card's limit needed at least the card, and so did every
    larger batch: their readings are floors (censored). A run that needed less than a
    smaller batch did crashed before its peak was sampled (an OOM), and so did every
    larger batch, where its peak could have exceeded the card at all; where it could
    not, the reading is wrong in some other way, and the implausible-measurement rule
    judges it. A reading beyond its traced tensors (`beyond_tensors`) is no peak to fall
    from, nor a card the run filled."""
    by_model: dict[str, list[dict[str, str]]] = {}
    for row in csv.DictReader(path.open(encoding="utf-8")):
        by_model.setdefault(row["Filename"].rsplit("_", 1)[0], []).append(row)
    stack = min(_mib(row) for runs in by_model.values() for row in runs)
    rows = []
    for name, runs in by_model.items():
        highest, crashed = 0, False
        reached: list[tuple[int, int]] = []
        for row in sorted(runs, key=lambda r: int(r["Batch Size"])):
            batch, measured = int(row["Batch Size"]), _mib(row)
            tensors = float(row["Last Numeric Value"])
            beyond = beyond_tensors(measured, tensors, stack)
            fell = measured < (1 - FALL_TOLERANCE) * highest
            crashed = (
                crashed
                or (measured >= CENSORED_MIB and not beyond)
                or (fell and _could_exceed_card(batch, reached))
            )
            if not beyond:
                highest = max(highest, measured)
                if not crashed:
                    reached.append((batch, measured))
            rows.append(
                Measurement(
                    "timm",
                    f"timm:{_group(name)}",
                    json.dumps({"catalog": f"timm:{name}"}),
                    batch,
                    None,
                    None,
                    "fp32",
                    "adam",
                    A100,
                    measured,
                    crashed,
                    faketensor_mib=tensors,
                )
            )
    return rows


def _mib(row: dict[str, str]) -> int:
    return int(float(row["Max GPU Memory (MiB)"]))


CNN_NAMES = {
    "vgg": "torchvision:vgg16",
    "resnet": "torchvision:resnet50",
    "Xception": "timm:legacy_xception",
    "mobilenet": "torchvision:mobilenet_v2",
    "efficientnet": "torchvision:efficientnet_b0",
    "inception": "torchvision:inception_v3",
}
# real_models_estimates.csv names the same CNNs differently
CNN_ALIASES = {
    "vgg16": "vgg",
    "resnet50": "resnet",
    "Xception": "Xception",
    "mobilenetV2": "mobilenet",
    "efficientnet": "efficientnet",
    "inception": "inception",
}
# Hugging Face transformers runs BERT and GPT-2 on PyTorch's fused SDPA attention by
# default (no s^2 score tensors kept); XLNet's relative attention stays eager.
SDPA_MODELS = {"BERT_base", "BERT_large", "gpt2_large", "gpt2_xl"}
TRANSFORMER_NAMES = {
    "BERT_base": "hf:bert-base-uncased",
    "BERT_large": "hf:bert-large-uncased",
    "xlnet_base": "hf:xlnet-base-cased",
    "xlnet_large": "hf:xlnet-large-cased",
    "gpt2_large": "hf:gpt2-large",
    "gpt2_xl": "hf:gpt2-xl",
}


def _real_rows(cnns: Path, models: Path) -> list[Measurement]:
    horus: dict[tuple[str, int], float] = {}
    rows = []
    name = ""
    for row in csv.DictReader(models.open(encoding="utf-8")):
        name = row[""] or name
        batch = int(row["batch_size"])
        if name in TRANSFORMER_NAMES:
            rows.append(
                Measurement(
                    "transformers",
                    name,
                    json.dumps({"catalog": TRANSFORMER_NAMES[name]}),
                    batch,
                    512,
                    None,
                    "fp32",
                    "adam",
                    A100,
                    int(row["Actual GPU memory"]),
                    False,
                    flash_attention=name in SDPA_MODELS,
                    horus_mib=float(row["Horus"]),
                    gpumemnet_mib=float(row["GPUMemNet "]),
                )
            )
        else:
            horus[(CNN_ALIASES[name], batch)] = float(row["Horus"])
    for row in csv.DictReader(cnns.open(encoding="utf-8")):
        cnn, batch = row["model"], int(row["batch size "])
        rows.append(
            Measurement(
                "cnns",
                cnn,
                json.dumps({"catalog": CNN_NAMES[cnn]}),
                batch,
                None,
                299 if cnn == "inception" else 224,
                "fp32",
                "adam",
                A100,
                int(row["GPU memory requirement"]),
                False,
                horus_mib=horus.get((cnn, batch)),
                faketensor_mib=float(row["FakeTensor"]),
                gpumemnet_mib=float(row["GPUMemNet Estimate"]),
            )
        )
    return rows


RTX_3090 = "NVIDIA GeForce RTX 3090"
# Lucid's ImageNet workloads (workloads/imagenet/profile_imagenet.py @ 9b9ba89):
# torchvision models by name on 224x224 random inputs, plain SGD, autocast + GradScaler
# when `amp` is 1; the CIFAR, RL, LSTM, BERT and other workloads use the artifact's own
# model code or settings it does not record, so they have no spec here.
LUCID_MODELS = {"ResNet50": "torchvision:resnet50", "MobileNetV3": "torchvision:mobilenet_v3_small"}


def lucid_rows(shared: Path) -> list[Measurement]:
    """Lucid's solo ImageNet runs on one RTX 3090 (`lucid/single_data.csv`): a held-out
    environment (another GPU, stack, precision and optimizer), not training data.

    `gmem` is the mean `nvidia-smi` memory used, sampled every 0.2 s after ten warm-up
    iterations. The caching allocator keeps the segments it reserved in the first
    iterations, so after warm-up the reading is flat at the step's peak; the source's
    pair data confirms it (two jobs' peak = the sum of their solo means, median ratio
    1.003, data README). Like any sampled figure it can miss a shorter spike.
    """
    rows = []
    for row in csv.DictReader((shared / "lucid" / "single_data.csv").open(encoding="utf-8")):
        if row["model"] not in LUCID_MODELS or row["dataset"] != "ImageNet":
            continue
        name = LUCID_MODELS[row["model"]]
        rows.append(
            Measurement(
                "lucid",
                f"lucid:{row['model']}",
                json.dumps({"catalog": name}),
                int(row["batchsize"]),
                None,
                224,
                "amp_fp16" if row["amp"] == "1" else "fp32",
                "sgd",
                RTX_3090,
                round(float(row["gmem"])),
                False,
            )
        )
    return rows


@dataclass(frozen=True)
class Run:
    """One measured run of a configuration: its batch and measured peak."""

    batch_size: int
    peak_mib: float
    censored: bool = False  # at the card's limit, or crashed: a floor, not a peak
    beyond_tensors: bool = False  # held more than its traced tensors allow (TENSOR_FACTOR)


FALLS, GROWS, SAME_PEAK, BEYOND_TENSORS = (
    "falls-as-batch-grows",
    "grows-faster-than-batch",
    "same-peak-at-4x-batch",
    "beyond-its-tensors",
)


def _breaks(small: Run, large: Run) -> str:
    """The rule a pair of runs breaks (`small` at the smaller or equal batch), or ""."""
    if large.peak_mib < (1 - FALL_TOLERANCE) * small.peak_mib:
        return FALLS
    if large.peak_mib > (1 + FALL_TOLERANCE) * small.peak_mib * large.batch_size / small.batch_size:
        return GROWS
    return ""


def _pair_rule(a: Run, b: Run) -> str:
    """The rule a pair breaks, in either order (at one batch size, both ways round)."""
    if a.batch_size == b.batch_size:
        return _breaks(a, b) or _breaks(b, a)
    return _breaks(a, b) if a.batch_size < b.batch_size else _breaks(b, a)


def _kept(runs: Sequence[Run], candidates: list[int]) -> set[int]:
    """The runs in every largest set of `candidates` that breaks no pair rule. A
    configuration has a handful of batch sizes (5 in the timm sheet), so the sets are
    enumerated, up to MAX_RUNS_JUDGED of them."""
    if len(candidates) > MAX_RUNS_JUDGED:
        raise ValueError(
            f"{len(candidates)} runs of one configuration: the implausible-measurement "
            f"rule enumerates at most {MAX_RUNS_JUDGED}"
        )
    for size in range(len(candidates), 0, -1):
        largest = [
            set(subset)
            for subset in combinations(candidates, size)
            if not any(_pair_rule(runs[i], runs[j]) for i, j in combinations(subset, 2))
        ]
        if largest:
            return set.intersection(*largest)
    return set()


def implausible_runs(runs: Sequence[Run], activations_mib: Sequence[float] | None) -> list[str]:
    """The implausible-measurement rule for the runs of one configuration (same model,
    input, precision, optimizer, parallelism and GPU; only the batch differs): per run,
    the rule it breaks ("" if none). `activations_mib`: per run, the analytical model's
    batch-dependent term at its batch, if known (without it the same-peak rule cannot
    judge).

    A pair of runs breaks a rule where
    - FALLS: the larger batch's peak is more than FALL_TOLERANCE below the smaller's;
    - GROWS: the larger batch's peak is more than FALL_TOLERANCE above the smaller's
      scaled by the ratio of their batches.
    Such a pair holds one wrong reading; which one, the other runs tell: the runs kept
    are those in every largest set of the configuration's runs that breaks no rule (an
    inflated batch-8 reading above four batches that grow linearly is the one left out,
    not the four), and each run left out is flagged with a rule it breaks with the rest.
    Where the largest sets differ, a run outside any one of them is flagged: nothing tells
    whether it or its partner is wrong. Censored runs (at the card's limit, or crashed)
    are floors: they join no set and judge no run, and only FALLS below a kept smaller
    batch flags one (a crash's reading).

    BEYOND_TENSORS: the run held more than TENSOR_FACTOR times its traced tensors above
    its stack (`beyond_tensors`, judged by the caller); it joins no set and judges no
    pair (SAME_PEAK still compares it: a reading equal to another is stale either way).

    SAME_PEAK: the peak equals that of a batch SAME_PEAK_BATCH_RATIO or more times
    smaller or larger, where the batches differ by more than an allocator segment of
    activations; both runs are flagged. Two readings at the card's limit may be equal
    (both filled the card); a crashed run's reading equal to another is as capped or
    stale as any.
    """
    reached = [i for i, run in enumerate(runs) if not (run.censored or run.beyond_tensors)]
    kept = _kept(runs, reached)
    flags = [""] * len(runs)
    for i, run in enumerate(runs):
        if run.beyond_tensors:
            flags[i] = BEYOND_TENSORS
        elif run.censored:
            below = [_breaks(runs[j], run) for j in kept if runs[j].batch_size < run.batch_size]
            flags[i] = FALLS if FALLS in below else ""
        elif i not in kept:
            partners = sorted(reached, key=lambda j: j not in kept)
            flags[i] = next(rule for j in partners if (rule := _pair_rule(runs[j], run)))
    if activations_mib is None:
        return flags
    order = sorted(range(len(runs)), key=lambda i: runs[i].batch_size)
    for n, i in enumerate(order):
        for j in order[n + 1 :]:
            small, large = runs[i], runs[j]
            apart = large.batch_size >= SAME_PEAK_BATCH_RATIO * small.batch_size
            added = activations_mib[j] - activations_mib[i]
            same = small.peak_mib == large.peak_mib < CENSORED_MIB
            if apart and same and added > ALLOCATOR_SEGMENT_MIB:
                for k in (i, j):
                    flags[k] = flags[k] or SAME_PEAK
    return flags


def _activations_mib(rows: Sequence[Measurement]) -> list[float] | None:
    """The analytical batch-dependent term (the larger of the saved activations and the
    optimizer step's temporaries) at each row's own batch, None if the model cannot be
    resolved. Taken at the runs' batches, not as a slope at batch 1: where the step's
    temporaries outweigh the activations the term is flat there, and a slope read 0."""
    try:
        return [breakdown(row.spec(), None).activations for row in rows]
    except SpecError:
        return None


def flag_implausible(rows: list[Measurement]) -> list[Measurement]:
    """`rows` with `implausible` set by the rule, configuration by configuration (a
    run's stack for BEYOND_TENSORS: its campaign's smallest reading on its GPU, of any
    run, as in `_timm_rows`)."""
    configs: dict[tuple[Any, ...], list[int]] = {}
    for i, row in enumerate(rows):
        key: tuple[Any, ...] = (
            *(row.source, row.model, row.seq_len, row.image_size, row.precision),
            *(row.optimizer, row.gpu_model, row.flash_attention, row.extra),
        )
        configs.setdefault(key, []).append(i)
    stacks: dict[tuple[str, str], int] = {}  # a campaign's smallest reading on a GPU
    for row in rows:
        place = (row.source, row.gpu_model)
        stacks[place] = min(stacks.get(place, row.measured_mib), row.measured_mib)
    flagged = list(rows)
    for members in configs.values():
        runs = [
            Run(
                rows[i].batch_size,
                rows[i].measured_mib,
                rows[i].censored or rows[i].measured_mib >= CENSORED_MIB,
                beyond_tensors(
                    rows[i].measured_mib,
                    rows[i].faketensor_mib,
                    stacks[(rows[i].source, rows[i].gpu_model)],
                ),
            )
            for i in members
        ]
        # the same-peak rule compares pairs: a lone run needs no analytical terms
        activations = _activations_mib([rows[i] for i in members]) if len(members) > 1 else None
        for i, rule in zip(members, implausible_runs(runs, activations), strict=True):
            flagged[i] = replace(rows[i], implausible=rule)
    return flagged


def plausible(rows: Sequence[Measurement]) -> list[Measurement]:
    """The rows the implausible-measurement rule does not flag."""
    return [row for row in rows if not row.implausible]


def extract(shared: Path) -> list[Measurement]:
    base = shared / "gpumemnet"
    return flag_implausible(
        [
            *_timm_rows(base / "timm_measured_fake_tensor.csv"),
            *_mlp_rows(base / "mlp_data_step2.csv", "mlp_step2"),
            *_mlp_rows(base / "mlp_data_step1.csv", "mlp_step1"),
            *_real_rows(base / "real_cnns_estimates.csv", base / "real_models_estimates.csv"),
        ]
    )


def write(rows: list[Measurement], path: Path = TABLE) -> None:
    with path.open("w", encoding="utf-8", newline="") as out:
        writer = csv.DictWriter(out, [f.name for f in fields(Measurement)], lineterminator="\n")
        writer.writeheader()
        for row in rows:
            writer.writerow(asdict(row))


def _optional(value: str, kind: Callable[[str], Any]) -> Any:
    return None if value == "" else kind(value)


def read(path: Path = TABLE) -> list[Measurement]:
    rows = []
    for raw in csv.DictReader(path.open(encoding="utf-8")):
        rows.append(
            Measurement(
                raw["source"],
                raw["group"],
                raw["model"],
                int(raw["batch_size"]),
                _optional(raw["seq_len"], int),
                _optional(raw["image_size"], int),
                raw["precision"],
                raw["optimizer"],
                raw["gpu_model"],
                int(raw["measured_mib"]),
                raw["censored"] == "True",
                _optional(raw["flash_attention"], lambda text: text == "True"),
                _optional(raw["horus_mib"], float),
                _optional(raw["faketensor_mib"], float),
                _optional(raw["gpumemnet_mib"], float),
                raw["extra"],
                raw.get("implausible", ""),
            )
        )
    return rows
