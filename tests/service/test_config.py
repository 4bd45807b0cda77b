"""Settings: environment, a YAML config file, and refusal of unknown plugins."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from service.config import CONFIG_FILE_ENV, Settings
from service.scheduler.framework import Limit


def test_a_config_file_sets_the_pipeline_and_the_environment_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "colloc.yaml"
    config.write_text(
        "scheduler_scorers: {spread: 2.0}\nmax_jobs_per_gpu: 2\npreemption: true\n"
        "user_quotas: {ann: {gpus: 4}}\nmax_attempts_per_cycle: 50\n"
    )
    monkeypatch.setenv(CONFIG_FILE_ENV, str(config))
    monkeypatch.setenv("COLLOC_MAX_JOBS_PER_GPU", "3")
    pipeline = Settings().scheduler()
    assert pipeline.scorers == {"spread": 2.0} and pipeline.preemption
    assert pipeline.max_jobs_per_gpu == 3
    assert pipeline.quotas.users == {"ann": Limit(gpus=4)}
    assert pipeline.max_attempts_per_cycle == 50
    config.write_text("max_attempts_per_cycle: null\n")
    assert Settings().scheduler().max_attempts_per_cycle is None  # no bound


def test_unknown_plugins_and_unsafe_values_stop_start_up() -> None:
    with pytest.raises(ValidationError, match="unknown scheduler plugin"):
        Settings(scheduler_filters=["memory_fit", "telepathy"])
    with pytest.raises(ValidationError, match="sqlite:// or postgresql://"):
        Settings(database_url="mysql://x")
    with pytest.raises(ValidationError):
        Settings(max_jobs_per_gpu=0)
    with pytest.raises(ValidationError):
        Settings(max_attempts_per_cycle=0)
