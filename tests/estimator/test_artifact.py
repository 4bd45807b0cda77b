"""Calibration artifacts: reproducible from the data, and loaded safely."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import sklearn

from estimator.learned import artifact, measurements
from estimator.learned.artifact import ArtifactError
from estimator.learned.calibration import Calibration, conformal_quantile
from estimator.learned.train import CalibrationFitter, prepare, table_sha256, train


def _close(ours: object, theirs: object, where: str = "") -> None:
    """`ours` equals `theirs` but for floats within 1e-9 of each other, relatively."""
    if isinstance(ours, dict) and isinstance(theirs, dict):
        assert ours.keys() == theirs.keys(), where
        for key in ours:
            _close(ours[key], theirs[key], f"{where}/{key}")
    elif isinstance(ours, list) and isinstance(theirs, list):
        assert len(ours) == len(theirs), where
        for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            _close(a, b, f"{where}[{i}]")
    elif isinstance(ours, float) or isinstance(theirs, float):
        assert isinstance(ours, int | float) and isinstance(theirs, int | float), where
        assert math.isclose(ours, theirs, rel_tol=1e-9, abs_tol=1e-15), where
    else:
        assert ours == theirs, where


def test_training_reproduces_the_committed_artifact(tmp_path: Path) -> None:
    """Bit for bit on a CPU like the one it was trained on; on another (AMD EPYC
    against the training machine's, 2026-12-03) the trees' sums round differently in
    the last bits (272 leaf values, at most 2e-14 relatively), and so do the manifest's
    figures (an Intel Xeon, 2026-12-06: its corrections, 1e-15 relatively) and the
    version, a hash of the model's bytes."""
    recorded = artifact.load().manifest["libraries"]
    if (recorded["numpy"], recorded["scikit-learn"]) != (np.__version__, sklearn.__version__):
        pytest.skip(f"the artifact was trained with {recorded}; floating point may differ")
    trained = train(measurements.read(), data_sha256=table_sha256(measurements.TABLE))
    artifact.save(trained, tmp_path)
    committed = artifact.ARTIFACT_DIR
    ours_model = (tmp_path / artifact.MODEL_FILE).read_bytes()
    theirs_model = (committed / artifact.MODEL_FILE).read_bytes()
    _close(json.loads(ours_model), json.loads(theirs_model))
    ours = json.loads((tmp_path / artifact.MANIFEST_FILE).read_text())
    theirs = json.loads((committed / artifact.MANIFEST_FILE).read_text())
    for manifest in (ours, theirs):
        manifest.pop("git_revision")
        if ours_model != theirs_model:
            manifest.pop("version")
    _close(ours, theirs)


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
