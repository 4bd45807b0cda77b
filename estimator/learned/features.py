"""What the learned correction sees of a job: the model-dependent analytical terms
and the model's make-up, never the fixed cost (the correction acts on the
model-dependent terms only; a stack's fixed cost is an offset, `estimator/offsets.py`).

Everything is a ratio or a logarithm, so the correction learns how the physics errs
(allocator behaviour, cuDNN workspaces, what is freed when) rather than sizes.
"""

from __future__ import annotations

import math

from estimator.analytical.model import Breakdown, ModelShape
from estimator.spec import TrainingSpec

LAYER_KINDS = ("conv2d", "linear", "batchnorm", "layernorm", "attention", "groupnorm")

NAMES = (
    "log_model_mib",
    "static_share",
    "activation_share",
    "log_batch",
    "log_params",
    "log_activations_per_sample",
    "largest_activation_share",
    "is_transformer",
    "is_summary",
    *(f"{kind}_share" for kind in LAYER_KINDS),
)
# The sizes a calibration's domain is bounded in (`train.py` records their ranges).
RANGED = ("log_model_mib", "log_batch", "log_params", "log_activations_per_sample")


def model_kind(spec: TrainingSpec, shape: ModelShape) -> str:
    """The family a calibration margin is kept for."""
    if shape.dims is not None:
        return "transformer"
    return "summary" if spec.model.summary is not None else "vision"


def features(spec: TrainingSpec, shape: ModelShape, terms: Breakdown) -> list[float]:
    total = terms.model_mib
    static = terms.weights + terms.gradients + terms.optimizer
    layers = sum(shape.layers.values()) or 1
    per_sample = shape.activations_per_sample
    largest = shape.largest_activation_per_sample / per_sample if per_sample else 0.0
    return [
        math.log(total),
        static / total,
        terms.activations / total,
        math.log(spec.batch_size),
        math.log(shape.params),
        math.log1p(per_sample),
        largest,
        float(shape.dims is not None),
        float(spec.model.summary is not None),
        *(shape.layers.get(kind, 0) / layers for kind in LAYER_KINDS),
    ]
