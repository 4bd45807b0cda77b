"""A simulation report for people: a Markdown table and PNG plots (matplotlib)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from service.simulator.scenario import Report

if TYPE_CHECKING:
    from matplotlib.figure import Figure

COLUMNS = (
    "policy",
    "OOMs",
    "GPU-h lost",
    "share lost",
    "makespan (h)",
    "vs exclusive",
    "vs oracle",
    "queue drained (h)",
    "mean JCT (s)",
    "p95 JCT (s)",
    "mean queue (s)",
    "p95 queue (s)",
    "reserved/true",
    "memory used",
    "SM busy",
    "done",
    "failed",
    "refused",
)


def _ratio(value: float, base: float | None) -> str:
    return f"{value / base:.3f}" if base else "-"


def table(report: Report) -> str:
    """One row per policy; makespans also as ratios to exclusive's and the oracle's; GPU
    time lost to OOMs also as a share of the workload's; reservations over true peaks."""
    results = report.results
    exclusive = results["exclusive"].makespan_s if "exclusive" in results else None
    oracle = results["oracle"].makespan_s if "oracle" in results else None
    lines = [
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
    ]
    for name, r in results.items():
        cells = [
            name,
            str(r.oom_events),
            f"{r.gpu_hours_lost_to_oom:.2f}",
            f"{r.oom_lost_share:.3%}",
            f"{r.makespan_s / 3600:.2f}",
            _ratio(r.makespan_s, exclusive),
            _ratio(r.makespan_s, oracle),
            f"{r.drained_s / 3600:.2f}",
            f"{r.mean_jct_s:.0f}",
            f"{r.p95_jct_s:.0f}",
            f"{r.mean_queue_s:.0f}",
            f"{r.p95_queue_s:.0f}",
            f"{r.mean_reserved_over_true():.2f}",
            f"{r.gpu_memory_utilization:.1%}",
            f"{r.sm_busy_share:.1%}",
            str(r.jobs_completed),
            str(r.jobs_failed),
            str(r.jobs_rejected),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


class PlotsUnavailableError(RuntimeError):
    pass


def plots(report: Report, directory: Path) -> list[Path]:
    """GPU memory in use, SM-busy share and jobs waiting over time, JCT distributions,
    and makespan with OOMs per policy, as PNG files in `directory`."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise PlotsUnavailableError("plots need matplotlib: pip install 'colloc[sim]'") from exc
    directory.mkdir(parents=True, exist_ok=True)
    title = f"{report.scenario.name}: {report.trace['jobs']} jobs, {report.trace['gpus']} GPUs"
    written = []

    fig, (memory, busy, queue) = plt.subplots(3, 1, figsize=(9, 8), sharex=True)
    for name, result in report.results.items():
        hours, used, busy_share, waiting = zip(*result.timeline, strict=True)
        memory.plot([t / 3600 for t in hours], used, label=name, linewidth=1)
        busy.plot([t / 3600 for t in hours], busy_share, label=name, linewidth=1)
        queue.plot([t / 3600 for t in hours], waiting, label=name, linewidth=1)
    memory.set_ylabel("GPU memory in use")
    busy.set_ylabel("SM-busy share")
    queue.set_ylabel("jobs waiting")
    queue.set_xlabel("hours")
    memory.set_title(title)
    memory.legend(fontsize=8)
    written.append(_save(fig, directory / "utilization.png"))

    fig, ax = plt.subplots(figsize=(9, 4))
    for name, result in report.results.items():
        count = len(result.jct_s)
        ax.plot(result.jct_s, [(i + 1) / count for i in range(count)], label=name, linewidth=1)
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (s)")
    ax.set_ylabel("share of jobs")
    ax.set_title(title)
    ax.legend(fontsize=8)
    written.append(_save(fig, directory / "jct_cdf.png"))

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    names = list(report.results)
    left.bar(names, [r.makespan_s / 3600 for r in report.results.values()])
    left.set_ylabel("makespan (h)")
    right.bar(names, [r.oom_events for r in report.results.values()], color="tab:red")
    right.set_ylabel("OOM events")
    for ax in (left, right):
        ax.tick_params(axis="x", rotation=30)
    fig.suptitle(title)
    written.append(_save(fig, directory / "summary.png"))
    return written


def _save(fig: Figure, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
