"""Calibration artifacts: reproducible from the data, and loaded safely."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import sklearn

from estimator.learned import artifact, measurements
from estimator.learned.artifact import ArtifactError
from estimator.learned.calibration import Calibration, conformal_quantile
from estimator.learned.train import CalibrationFitter, prepare, table_sha256, train


def test_training_reproduces_the_committed_artifact_bit_for_bit(tmp_path: Path) -> None:
    recorded = artifact.load().manifest["libraries"]
    if (recorded["numpy"], recorded["scikit-learn"]) != (np.__version__, sklearn.__version__):
        pytest.skip(f"the artifact was trained with {recorded}; floating point may differ")
    trained = train(measurements.read(), data_sha256=table_sha256(measurements.TABLE))
    artifact.save(trained, tmp_path)
    committed = artifact.ARTIFACT_DIR
    assert (tmp_path / artifact.MODEL_FILE).read_bytes() == (
        committed / artifact.MODEL_FILE
    ).read_bytes()
    ours = json.loads((tmp_path / artifact.MANIFEST_FILE).read_text())
    theirs = json.loads((committed / artifact.MANIFEST_FILE).read_text())
    ours.pop("git_revision")
    theirs.pop("git_revision")
    assert ours == theirs


def test_loaded_calibration_predicts_like_the_fitted_one() -> None:
    data = prepare([r for r in measurements.read() if r.source == "cnns"])
    loaded = artifact.load()
    assert loaded.calibration.predict(data.features).shape == (len(data.rows),)
    refit = CalibrationFitter(coverage=0.9, max_iter=20).fit(
        np.vstack([data.features] * 10),
        np.tile(data.log_ratio, 10),
        np.repeat(np.arange(10), len(data.rows)),
        np.array(["vision"] * 10 * len(data.rows)),
    )
    again = Calibration.from_json(json.loads(json.dumps(refit.calibration_.to_json())))
    assert np.array_equal(refit.predict(data.features), again.predict(data.features))


def test_unknown_format_and_malformed_files_are_refused(tmp_path: Path) -> None:
    shutil.copytree(artifact.ARTIFACT_DIR, tmp_path / "a")
    manifest = json.loads((tmp_path / "a" / artifact.MANIFEST_FILE).read_text())
    (tmp_path / "a" / artifact.MANIFEST_FILE).write_text(json.dumps({**manifest, "format": 99}))
    with pytest.raises(ArtifactError, match="format 99"):
        artifact.load(tmp_path / "a")
    shutil.copytree(artifact.ARTIFACT_DIR, tmp_path / "b")
    (tmp_path / "b" / artifact.MODEL_FILE).write_text('{"format": 1}')
    with pytest.raises(ArtifactError, match="malformed"):
        artifact.load(tmp_path / "b")
    with pytest.raises(ArtifactError, match="no readable"):
        artifact.load(tmp_path / "missing")
    with pytest.raises(RuntimeError, match="not fitted"):
        CalibrationFitter().predict(np.zeros((1, 3)))


def test_conformal_quantile_is_the_finite_sample_rank() -> None:
    residuals = np.arange(1.0, 20.0)  # 19 values: rank ceil(20 * 0.95) = 19
    assert conformal_quantile(residuals, 0.95) == 19.0
    assert conformal_quantile(residuals, 0.5) == 10.0
