"""`colloc estimate` and `colloc estimator train`."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from estimator.analytical.model import SpecError
from estimator.estimate import default_estimator
from estimator.files import read_yaml
from estimator.gpus import GPU_MODELS, GpuDescription, describe, parse_compute_capability
from estimator.learned import artifact, measurements
from estimator.spec import TrainingSpec, validation_problems


def _fail(message: str) -> int:
    print(f"colloc: error: {message}", file=sys.stderr)
    return 2


def load_specs(path: Path) -> list[TrainingSpec]:
    """One TrainingSpec or a list (a job spec's `training:` is taken too); ValueError."""
    data = read_yaml(path)
    items: list[Any] = data if isinstance(data, list) else [data]
    if not items:
        raise ValueError(f"{path} holds an empty list: no training spec to estimate")
    specs: list[TrainingSpec] = []
    problems: list[str] = []
    for number, item in enumerate(items, 1):
        if isinstance(item, dict) and "training" in item:
            item = item["training"]
        try:
            specs.append(TrainingSpec.model_validate(item))
        except ValidationError as exc:
            where = f"spec {number}: " if len(items) > 1 else ""
            problems.extend(f"{where}{p}" for p in validation_problems(exc))
    if problems:
        raise ValueError("invalid training spec:\n  " + "\n  ".join(problems))
    return specs


def _gpus(args: argparse.Namespace) -> list[GpuDescription]:
    """The GPU asked for (any name; its figures as given, catalogued or assumed, with a
    one-line note when assumed), else every catalogued model; ValueError if bad."""
    if args.gpu is None:
        if args.gpu_memory_mib is not None or args.compute_capability is not None:
            raise ValueError("--gpu-memory-mib and --compute-capability describe --gpu NAME")
        return [describe(m.name) for m in GPU_MODELS]
    if not args.gpu.strip():
        raise ValueError("--gpu needs a GPU name")
    if args.gpu_memory_mib is not None and args.gpu_memory_mib <= 0:
        raise ValueError("--gpu-memory-mib must be a positive number of MiB")
    capability = args.compute_capability
    gpu = describe(
        args.gpu,
        args.gpu_memory_mib,
        parse_compute_capability(capability) if capability is not None else None,
    )
    note = gpu.note()
    if note:
        print(
            f"colloc: note: {note} (give --gpu-memory-mib / --compute-capability)",
            file=sys.stderr,
        )
    return [gpu]


def run_trace(args: argparse.Namespace) -> int:
    """`--trace`: the summary form of the user's model, as a job file's `model:`."""
    try:
        from estimator import trace  # needs torch, which Colloc itself does without
    except ImportError as exc:
        return _fail(
            f"--trace builds your model with PyTorch, which is not importable here ({exc}); "
            "install it: pip install 'colloc[trace]'"
        )
    try:
        shape = tuple(int(n) for n in args.input_shape.split(",")) if args.input_shape else None
        summary = trace.trace(args.trace, shape)
    except ValueError as exc:  # TraceError, or a malformed --input-shape
        return _fail(str(exc))
    # counts left at their defaults are left out, so a server that predates one takes it
    summary_form = summary.model_dump(exclude_defaults=True)
    text = yaml.safe_dump({"model": {"summary": summary_form}}, sort_keys=False)
    if args.out:
        args.out.write_text(text, encoding="utf-8")
        print(f"summary of {args.trace} written to {args.out}", file=sys.stderr)
    else:
        print(text, end="")
    return 0


def run_estimate(args: argparse.Namespace) -> int:
    if args.trace:
        return run_trace(args)
    if args.file is None:
        return _fail("estimate needs a spec FILE (or --trace pkg.module:factory)")
    try:
        gpus = _gpus(args)
        specs = load_specs(args.file)
    except ValueError as exc:
        return _fail(str(exc))
    estimator = default_estimator()
    refused: list[str] = []  # every spec the estimator cannot use, after the others' answers
    for number, spec in enumerate(specs, 1):
        try:
            estimates = [estimator.estimate(spec, gpu) for gpu in gpus]
        except SpecError as exc:
            refused.append(f"spec {number}: " + "; ".join(exc.problems))
            continue
        for estimate in estimates:
            if args.json:
                print(json.dumps(estimate.model_dump()))
            else:
                print(
                    f"spec {number}  {estimate.gpu_model:<26} peak {estimate.peak_mib:>7} MiB"
                    f"  upper {estimate.upper_mib:>7} MiB  ({estimate.method})"
                )
    if refused:
        return _fail("\n  ".join(refused))
    return 0


def run_train(args: argparse.Namespace) -> int:
    # imported here: scikit-learn takes a second to load, which no other command needs
    from estimator.learned.train import table_sha256, train

    data = args.data or measurements.TABLE
    out = args.out or artifact.ARTIFACT_DIR
    rows = measurements.read(data)
    trained = train(rows, data_sha256=table_sha256(data))
    artifact.save(trained, out)
    print(f"trained {trained.version} on {trained.manifest['data']['runs_used']} runs -> {out}")
    return 0


def run_extract(args: argparse.Namespace) -> int:
    try:
        rows = measurements.extract(args.shared)
    except (OSError, KeyError, ValueError) as exc:
        return _fail(f"cannot read the measurements in {args.shared}: {exc}")
    out = args.out or measurements.TABLE
    measurements.write(rows, out)
    print(f"{len(rows)} measurements written to {out}")
    return 0
