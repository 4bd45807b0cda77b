"""The scheduling benchmark: every policy on the standard scenario, and the simulator's
speed at 10,000 jobs on 1,000 GPUs.

    .venv/bin/python bench/scheduling.py [--skip-large]

Prints the standard scenario's table (makespans also as ratios to exclusive placement
and to the oracle, both run in the same process on the same jobs), writes its plots to
bench/plots/, and times each policy on the `large` scenario against the exclusive
policy's time in the same run. `colloc simulate --scenario standard` prints the same
table.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from service.simulator.policies import POLICIES
from service.simulator.report import plots, table
from service.simulator.scenario import SCENARIOS, run

PLOTS = Path(__file__).with_name("plots")


def main() -> None:
    parser = argparse.ArgumentParser()
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
