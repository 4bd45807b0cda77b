"""Reading the YAML or JSON files people write: job specs, training specs, cluster files.

Shared by the estimator's, the agent's and the service's commands, so a bad file gets
the same clear message everywhere.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


def read_yaml(path: Path) -> Any:
    """The file's data (YAML is a superset of JSON); ValueError says what is wrong."""
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise ValueError(f"{path} is not valid YAML or JSON: {exc}") from exc
