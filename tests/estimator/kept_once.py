"""What a spec's activations keep once a step, whatever its batch (shared by the tests
of what the catalog, the `summary` form and autocast charge there)."""

from __future__ import annotations

from typing import Any

from estimator.analytical.model import MIB, breakdown
from estimator.spec import TrainingSpec


def kept_once_bytes(body: dict[str, Any], batch: int = 1) -> float:
    """Twice the activations at `batch` less those at twice it: what each sample keeps
    cancels, what a step keeps once stays (in bytes)."""

    def activations(samples: int) -> float:
        spec = TrainingSpec.model_validate(body | {"batch_size": samples})
        return breakdown(spec, None).activations * MIB

    return 2 * activations(batch) - activations(2 * batch)
