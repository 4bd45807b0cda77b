"""`colloc estimate` and `colloc estimator` as argparse sees them, with each handler named
as "module:function" (in estimator.cli), imported only when its command runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def add_commands(commands: Any) -> None:
    estimate = commands.add_parser("estimate", help="offline peak-memory estimate")
    estimate.add_argument(
        "file", type=Path, nargs="?", help="one TrainingSpec or a list (YAML/JSON)"
    )
    estimate.add_argument(
        "--trace",
        metavar="PKG.MODULE:FACTORY",
        help="measure your own model on the meta device (needs torch) and print its "
        "summary form for a job file's training.model",
    )
    estimate.add_argument(
        "--input-shape", help="with --trace: one sample's input shape, e.g. 3,224,224"
    )
    estimate.add_argument("--out", type=Path, help="with --trace: write the summary here")
    estimate.add_argument(
        "--gpu", help="one GPU model, any NVML name or alias (default: every catalogued model)"
    )
    estimate.add_argument(
        "--gpu-memory-mib", type=int, help="its memory as NVML reports it (an uncatalogued GPU)"
    )
    estimate.add_argument(
        "--compute-capability", help="its compute capability, e.g. 9.0 (an uncatalogued GPU)"
    )
    estimate.add_argument("--json", action="store_true", help="one Estimate object per line")
    estimate.set_defaults(run="estimator.cli:run_estimate")

    # the default paths are the packaged table and artifact, which the handlers name: the
    # modules defining them load pydantic and numpy, which `colloc --help` does without
    estimator = commands.add_parser("estimator", help="estimator maintenance")
    actions = estimator.add_subparsers(dest="estimator_command", required=True, metavar="ACTION")
    trainer = actions.add_parser("train", help="retrain the calibration from measured runs")
    trainer.add_argument(
        "--data", type=Path, help="measurement table (CSV; default: the packaged one)"
    )
    trainer.add_argument(
        "--out", type=Path, help="directory for the artifact (default: the packaged one)"
    )
    trainer.set_defaults(run="estimator.cli:run_train")
    extract = actions.add_parser("extract", help="rebuild the measurement table from the data")
    extract.add_argument("shared", type=Path, help="the shared data folder (../shared/data)")
    extract.add_argument(
        "--out", type=Path, help="the table to write (CSV; default: the packaged one)"
    )
    extract.set_defaults(run="estimator.cli:run_extract")
