"""The public trace data the simulator runs on, as small derived tables with provenance.

`extract()` reads the public files in `../shared/data` and keeps only what the
simulator needs (see `data/README.md`): the Alibaba 2023 cluster's node shapes and its
GPU pods' arrivals, GPU counts and run times; Muri's jobs; Gavel's measured speed of
P100 and K80 against V100; Lucid's co-location slow-downs by sharing class. The tables
are committed, so a simulation needs nothing outside the package:

    colloc simulate extract ../shared/data
"""

from __future__ import annotations

import csv
import statistics
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

DATA = Path(__file__).with_name("data")
TABLES = ("alibaba_nodes.csv", "alibaba_jobs.csv", "muri_jobs.csv", "speeds.csv", "sharing.csv")
# Pods still running at the trace's end have no run time; pending ones never ran.
ENDED_PHASES = ("Succeeded", "Failed")


@dataclass(frozen=True)
class TraceJob:
    """One job of a public trace: when it came, how many GPUs, how long it ran alone."""

    arrival_s: float
    gpus: int
    duration_s: float


@dataclass(frozen=True)
class NodeShape:
    model: str  # as the trace names it (see cluster.TRACE_GPU_MODELS)
    gpus: int
    nodes: int


@dataclass(frozen=True)
class Sharing:
    """Lucid's sharing classes: how often each occurs, how busy it keeps a GPU, and the
    median normalised speed of a job of one class beside a job of another."""

    share: dict[int, float]
    gpu_util_pct: dict[int, float]
    speed: dict[tuple[int, int], float]


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f))


def _write(path: Path, header: list[str], rows: Sequence[Sequence[object]]) -> None:
    with path.open("w", encoding="utf-8", newline="") as out:
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(header)
        writer.writerows(rows)


def _alibaba(shared: Path, out: Path) -> None:
    base = shared / "alibaba_v2023"
    shapes = Counter(
        (row["model"], int(row["gpu"])) for row in _rows(base / "openb_node_list_gpu_node.csv")
    )
    _write(
        out / "alibaba_nodes.csv",
        ["model", "gpus", "nodes"],
        [[model, gpus, count] for (model, gpus), count in sorted(shapes.items())],
    )
    jobs: list[tuple[float, int, float]] = []
    for row in _rows(base / "openb_pod_list_default.csv"):
        if int(row["num_gpu"]) == 0 or row["pod_phase"] not in ENDED_PHASES:
            continue
        duration = float(row["deletion_time"]) - float(row["scheduled_time"])
        if duration > 0:
            jobs.append((float(row["creation_time"]), int(row["num_gpu"]), duration))
    _write(out / "alibaba_jobs.csv", ["arrival_s", "gpus", "duration_s"], sorted(jobs))


def _muri(shared: Path, out: Path) -> None:
    jobs = [
        (float(row["submit_time"]) / 1000, int(row["num_gpu"]), float(row["duration"]) / 1000)
        for row in _rows(shared / "muri" / "trace1.csv")
    ]
    _write(out / "muri_jobs.csv", ["arrival_s", "gpus", "duration_s"], sorted(jobs))


def _speeds(shared: Path, out: Path) -> None:
    """Median over Gavel's job types of each GPU's solo throughput over V100's."""
    solo = {
        (row["worker_type"], row["job_type"]): float(row["throughput"])
        for row in _rows(shared / "gavel" / "simulation_throughputs_flat.csv")
        if row["scale_factor"] == "1" and not row["colocated_job_type"]
    }
    rows: list[list[object]] = []
    for worker in ("k80", "p100"):
        ratios = [
            solo[(w, job)] / solo[("v100", job)]
            for (w, job) in solo
            if w == worker and solo.get(("v100", job), 0) > 0
        ]
        rows.append([worker, round(statistics.median(ratios), 4), len(ratios)])
    _write(out / "speeds.csv", ["gavel_worker", "speed_vs_v100", "job_types"], rows)


def _sharing(shared: Path, out: Path) -> None:
    base = shared / "lucid"
    solo = _rows(base / "single_data.csv")
    label = {(r["model"], r["dataset"], r["batchsize"], r["amp"]): int(r["label"]) for r in solo}
    speeds: dict[tuple[int, int], list[float]] = defaultdict(list)
    for row in _rows(base / "colocate_info.csv"):
        first = label[(row["model1"], row["dataset1"], row["batchsize1"], row["amp1"])]
        second = label[(row["model2"], row["dataset2"], row["batchsize2"], row["amp2"])]
        speeds[(first, second)].append(float(row["speed1"]))
        speeds[(second, first)].append(float(row["speed2"]))
    rows: list[list[object]] = []
    for cls in sorted(set(label.values())):
        members = [r for r in solo if int(r["label"]) == cls]
        util = statistics.mean(float(r["gpu_util"]) for r in members)
        rows.append(["share", cls, "", round(len(members) / len(solo), 4)])
        rows.append(["gpu_util_pct", cls, "", round(util, 2)])
    for (cls, other), values in sorted(speeds.items()):
        rows.append(["speed", cls, other, round(statistics.median(values), 4)])
    _write(out / "sharing.csv", ["figure", "class", "beside_class", "value"], rows)


def extract(shared: Path, out: Path = DATA) -> list[Path]:
    """Rebuild every derived table from the shared data folder; the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    _alibaba(shared, out)
    _muri(shared, out)
    _speeds(shared, out)
    _sharing(shared, out)
    return [out / name for name in TABLES]


def read_jobs(name: str, data: Path = DATA) -> list[TraceJob]:
    """The jobs of trace `name` (alibaba or muri), in arrival order."""
    return [
        TraceJob(float(r["arrival_s"]), int(r["gpus"]), float(r["duration_s"]))
        for r in _rows(data / f"{name}_jobs.csv")
    ]


def read_node_shapes(data: Path = DATA) -> list[NodeShape]:
    return [
        NodeShape(r["model"], int(r["gpus"]), int(r["nodes"]))
        for r in _rows(data / "alibaba_nodes.csv")
    ]


def read_gavel_speeds(data: Path = DATA) -> dict[str, float]:
    """Gavel worker type -> measured speed against V100."""
    return {r["gavel_worker"]: float(r["speed_vs_v100"]) for r in _rows(data / "speeds.csv")}


def read_sharing(data: Path = DATA) -> Sharing:
    share: dict[int, float] = {}
    util: dict[int, float] = {}
    speed: dict[tuple[int, int], float] = {}
    for r in _rows(data / "sharing.csv"):
        cls, value = int(r["class"]), float(r["value"])
        if r["figure"] == "share":
            share[cls] = value
        elif r["figure"] == "gpu_util_pct":
            util[cls] = value
        else:
            speed[(cls, int(r["beside_class"]))] = value
    return Sharing(share, util, speed)
