"""Versioned calibration artifacts: the fitted calibration and a manifest, both JSON.

Plain JSON loads without running code (unlike pickle) and serialises the same fit to
the same bytes, so `colloc estimator train` reproduces the committed artifact exactly.
Bump FORMAT on a breaking change and keep loading the formats before it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from estimator.learned.calibration import Calibration

FORMAT = 1
SUPPORTED_FORMATS = (1,)
RELEASE = "2026.12.0"
ARTIFACT_DIR = Path(__file__).with_name("artifacts")
MODEL_FILE = "calibration.json"
MANIFEST_FILE = "manifest.json"


class ArtifactError(RuntimeError):
    """An artifact that cannot be loaded (missing, unknown format, malformed)."""


@dataclass
class Artifact:
    calibration: Calibration
    manifest: dict[str, Any]

    @property
    def version(self) -> str:
        return str(self.manifest["version"])


def _dumps(data: dict[str, Any]) -> bytes:
    return (json.dumps(data, sort_keys=True, separators=(",", ":")) + "\n").encode()


def model_bytes(calibration: Calibration) -> bytes:
    return _dumps({"format": FORMAT, **calibration.to_json()})


def version_of(model: bytes, manifest_core: dict[str, Any]) -> str:
    digest = hashlib.sha256(model + _dumps(manifest_core))
    return f"{RELEASE}+{digest.hexdigest()[:12]}"


def save(artifact: Artifact, directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / MODEL_FILE).write_bytes(model_bytes(artifact.calibration))
    (directory / MANIFEST_FILE).write_text(
        json.dumps(artifact.manifest, indent=1, sort_keys=True) + "\n", encoding="utf-8"
    )


def load(directory: Path = ARTIFACT_DIR) -> Artifact:
    try:
        manifest = json.loads((directory / MANIFEST_FILE).read_text(encoding="utf-8"))
        model = json.loads((directory / MODEL_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ArtifactError(f"no readable calibration artifact in {directory}: {exc}") from exc
    for name, data in ((MANIFEST_FILE, manifest), (MODEL_FILE, model)):
        if data.get("format") not in SUPPORTED_FORMATS:
            raise ArtifactError(
                f"{name}: format {data.get('format')!r} is not one of {SUPPORTED_FORMATS}"
            )
    try:
        calibration = Calibration.from_json(model)
    except (KeyError, TypeError, ValueError) as exc:
        raise ArtifactError(f"{MODEL_FILE} is malformed: {exc}") from exc
    return Artifact(calibration, manifest)
