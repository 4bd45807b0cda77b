"""The scheduling benchmark: every policy on the standard scenario, and the simulator's
speed at 10,000 jobs on 1,000 GPUs.

    .venv/bin/python bench/scheduling.py [--seeds N] [--skip-large]

Prints the standard scenario's table (makespans also as ratios to exclusive placement
and to the oracle, both run in the same process on the same jobs), writes its plots to
bench/plots/, repeats the main policies on the standard scenario with seeds 1 to N-1
(a makespan is decided by the last few long jobs, so one seed can mislead), and times
each policy on the `large` scenario against the exclusive policy's time in the same
run. `colloc simulate --scenario standard` prints the same table.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from service.simulator.policies import POLICIES
from service.simulator.report import plots, table
from service.simulator.scenario import SCENARIOS, Report, adjusted, run

PLOTS = Path(__file__).with_name("plots")
# the policies repeated over seeds: the baselines and Colloc
SEEDED = ("exclusive", "request", "analytical", "colloc", "oracle")


def seed_table(reports: list[Report]) -> str:
    """Per policy and seed: OOMs, makespan over the oracle's, queue drained over the
    oracle's, memory used; then the mean over the seeds."""
    lines = [
        "| policy | seed | OOMs | makespan vs oracle | drained vs oracle | memory used |",
        "|---|---|---|---|---|---|",
    ]
    for name in SEEDED:
        rows = []
        for report in reports:
            r, oracle = report.results[name], report.results["oracle"]
            rows.append(
                (
                    r.oom_events,
                    r.makespan_s / oracle.makespan_s,
                    r.drained_s / oracle.drained_s,
                    r.gpu_memory_utilization,
                )
            )
            seed = report.scenario.workload.seed
            lines.append(
                f"| {name} | {seed} | {rows[-1][0]} | {rows[-1][1]:.3f} | {rows[-1][2]:.3f} "
                f"| {rows[-1][3]:.1%} |"
            )
        mean = [sum(column) / len(rows) for column in zip(*rows, strict=True)]
        lines.append(
            f"| {name} | mean | {mean[0]:.1f} | {mean[1]:.3f} | {mean[2]:.3f} | {mean[3]:.1%} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--skip-large", action="store_true")
    args = parser.parse_args()

    started = time.perf_counter()
    report = run(SCENARIOS["standard"], list(POLICIES))
    trace = report.trace
    print(
        f"standard: {trace['jobs']:,} jobs, {trace['gpus']} GPUs {trace['gpu_models']}, "
        f"{trace['gang_jobs']} gang jobs, arrivals over {trace['arrival_span_s'] / 3600:.2f} h, "
        f"{trace['gpu_seconds_offered'] / 3600:.0f} V100 GPU-hours offered"
    )
    print(table(report))
    print(f"wall time per policy (s): {report.wall_s}; total {time.perf_counter() - started:.0f} s")
    for path in plots(report, PLOTS):
        print(f"wrote {path}")

    reports = [report] + [
        run(adjusted(SCENARIOS["standard"], seed=seed), SEEDED) for seed in range(1, args.seeds)
    ]
    print(f"\nstandard, seeds 0 to {args.seeds - 1}:")
    print(seed_table(reports))

    if not args.skip_large:
        large = run(SCENARIOS["large"], ["exclusive", "colloc", "oracle"])
        base = large.wall_s["exclusive"]
        print(
            f"\nlarge: {large.trace['jobs']:,} jobs on {large.trace['gpus']} GPUs, wall time "
            "per policy (s, and against exclusive's): "
            + ", ".join(f"{k} {v:.1f} ({v / base:.2f}x)" for k, v in large.wall_s.items())
        )


if __name__ == "__main__":
    main()
