"""Every backend gives TensorFlow's numbers: the conformance table (``conformance_support.py``) run
on the active backend against the reference a TensorFlow process writes on the same ``.keras``
weights. Each row must agree to 1e-4 (relative to the row's largest value, float32), or be
refused as TensorFlow refuses it; what this backend does not run yet is refused in one line
naming the backend and what to use (:data:`NOT_YET`), never answered with other numbers."""

import hashlib
import json
import os
import pathlib
import shutil
import subprocess
import sys
from importlib import metadata

import keras
import numpy as np
import pytest
from conformance_support import Row, load, metric_rows, model_of, rows, run, run_metric

pytestmark = pytest.mark.skipif(
    keras.backend.backend() == "tensorflow", reason="the reference backend: run with KERAS_BACKEND=jax"
)

#: methods a backend refuses for now, each in one line naming the backend (none today)
NOT_YET: dict = {}
TOLERANCE = 1e-4
#: metrics whose scores are each backend's own, not TensorFlow's, and why (measured on JAX); their
#: rows check the scores' shape and where they are undefined
OWN_SCORES = {
    "randomization": "the re-initialised weights are drawn by each backend's Keras initializers "
    "(its own random stream); 5e-2 apart",
    "relative_input_stability": "a ratio of attribution changes to input changes of 1e-3 amplifies "
    "the backends' float32 rounding; 8e-4 of the largest score apart",
    "monotonicity_correlation": "a rank correlation: where the backends' float32 rounding differs, two "
    "near-equal values can swap ranks; 7e-4 of the largest score apart on an AMD EPYC with AVX2 "
    "(within 1e-4 on a CPU with AVX-512)",
}
HERE = pathlib.Path(__file__).resolve().parent


def _reference_key() -> str:
    """A digest of everything TensorFlow's reference depends on: the package's files (sources and
    shipped models), this folder's sources, and the versions of the frameworks that compute it."""
    digest = hashlib.sha256()
    package = HERE.parents[1] / "saliency_kit"
    files = [p for p in package.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    for path in sorted(files + list(HERE.glob("*.py"))):
        digest.update(str(path.relative_to(HERE.parents[1])).encode() + b"\0" + path.read_bytes())
    for dist in ("keras", "numpy", "tensorflow-cpu", "tensorflow"):
        try:
            digest.update(f"{dist}=={metadata.version(dist)}".encode())
        except metadata.PackageNotFoundError:
            pass
    return digest.hexdigest()[:24]


@pytest.fixture(scope="module")
def reference(request, tmp_path_factory):
    """TensorFlow's numbers, written by a TensorFlow process; kept in pytest's cache under the
    digest of what they depend on, so the next backend's process of the same checkout reads them
    instead of computing them again (any change to the package or its frameworks computes anew)."""
    folder = request.config.cache.mkdir("conformance-reference") / _reference_key()
    if not (folder / "refusals.json").exists():
        scratch = tmp_path_factory.mktemp("conformance")
        env = {**os.environ, "KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "3"}
        env["PYTHONPATH"] = os.pathsep.join([str(HERE.parents[1]), env.get("PYTHONPATH", "")])
        done = subprocess.run(
            [sys.executable, str(HERE / "conformance_support.py"), str(scratch)],
            env=env,
            capture_output=True,
            text=True,
            timeout=1800,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        shutil.rmtree(folder, ignore_errors=True)
        shutil.copytree(scratch, folder.with_suffix(".part"), dirs_exist_ok=True)
        os.replace(folder.with_suffix(".part"), folder)  # whole or absent, never half written
    arrays = dict(np.load(folder / "reference.npz"))
    refusals = json.loads((folder / "refusals.json").read_text())
    return folder, arrays, refusals


_models: dict = {}


@pytest.mark.parametrize("row", rows(), ids=lambda row: row.id)
def test_the_row_gives_tensorflows_numbers(row: Row, reference):
    folder, arrays, refusals = reference
    name = model_of(row)
    if name not in _models:
        _models[name] = load(name, folder)
    model = _models[name]
    backend = keras.backend.backend()
    if row.method in NOT_YET.get(backend, ()):
        with pytest.raises(Exception) as refused:
            run(row, model, name)
        line = str(refused.value)
        assert "\n" not in line and backend in line, line
        assert "KERAS_BACKEND=tensorflow" in line, line
        return
    if row.id in refusals:
        with pytest.raises(Exception) as refused:
            run(row, model, name)
        assert type(refused.value).__name__ == refusals[row.id].split(":")[0], (str(refused.value), refusals[row.id])
        return
    got = run(row, model, name)
    for key, value in got.items():
        expected = arrays[f"{row.id}/{key}"]
        assert value.shape == expected.shape, key
        scale = max(float(np.abs(expected).max()), 1e-30)
        error = float(np.abs(value - expected).max()) / scale
        assert error <= TOLERANCE, f"{key}: largest difference {error:.2e} of the largest value"


@pytest.mark.parametrize("metric", metric_rows())
def test_every_metric_gives_tensorflows_scores(metric, reference):
    """Each declared metric scoring the same map on the same weights: the same per-input scores
    (its perturbations are seeded per input, the same draws on every backend)."""
    folder, arrays, refusals = reference
    if "shapes" not in _models:
        _models["shapes"] = load("shapes", folder)
    if f"metric-{metric}" in refusals:
        with pytest.raises(Exception) as refused:
            run_metric(metric, _models["shapes"])
        assert type(refused.value).__name__ == refusals[f"metric-{metric}"].split(":")[0], str(refused.value)
        return
    got = run_metric(metric, _models["shapes"])["per_input"]
    expected = arrays[f"metric-{metric}/per_input"]
    if metric in OWN_SCORES:
        assert got.shape == expected.shape and np.isfinite(got).sum() == np.isfinite(expected).sum()
        return
    scale = max(float(np.nanmax(np.abs(expected))), 1e-30) if np.isfinite(expected).any() else 1.0
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
    error = float(np.nanmax(np.abs(got - expected))) / scale if np.isfinite(expected).any() else 0.0
    assert error <= TOLERANCE, f"largest difference {error:.2e} of the largest score"
