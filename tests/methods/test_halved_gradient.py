"""A new method takes its own file and this test: registered with ``sk.methods.register``, it is
explained through ``sk.explain`` and run by ``saliency explain --method``, with no other edit."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from cli_support import ROOT, environment, own_lines, python, save_tiny_model

import saliency_kit as sk

HERE = Path(__file__).resolve().parent


def _inputs():
    return np.random.default_rng(0).uniform(0, 1, (2, 32, 32, 3)).astype("float32")


@pytest.fixture
def registered():
    """The method registered by importing its file, and unregistered afterwards (other tests list
    the registry)."""
    import halved_gradient  # noqa: F401  registers it

    yield
    sk.methods.unregister("halved_gradient")
    sys.modules.pop("halved_gradient")


def test_sk_explain_runs_the_registered_method(tmp_path, registered):
    import keras

    model = keras.saving.load_model(save_tiny_model(tmp_path / "tiny.keras"))
    assert "halved_gradient" in sk.methods.names()
    halved = sk.explain(model, _inputs(), "halved_gradient", targets=[1, 2])
    full = sk.explain(model, _inputs(), "gradient", targets=[1, 2])
    np.testing.assert_allclose(halved.attributions, 0.5 * full.attributions, rtol=1e-5, atol=1e-7)


def test_the_command_line_runs_the_registered_method(tmp_path):
    from PIL import Image

    model = save_tiny_model(tmp_path / "tiny.keras")
    image = tmp_path / "a.png"
    Image.fromarray((_inputs()[0] * 255).astype(np.uint8)).save(image)
    argv = ["explain", str(image), "--model", str(model), "--method", "halved_gradient", "--format", "npz"]
    argv += ["--out", str(tmp_path / "out")]
    code = f"import sys, halved_gradient\nfrom saliency_kit.cli import main\nsys.exit(main({argv!r}))\n"
    status, _, err = python(code, env=environment(PYTHONPATH=f"{ROOT}:{HERE}"))
    assert status == 0, own_lines(err, "explain") or err
    records = [json.loads(line) for line in (tmp_path / "out" / "manifest.jsonl").read_text().splitlines()]
    assert [(r["status"], r["method"]) for r in records] == [("ok", "halved_gradient")]
    saved = np.load(tmp_path / "out" / records[0]["file"])
    x = np.asarray(Image.open(image), np.float32)[None] / 255.0
    model = sk.load_model(str(model))[0]
    full = sk.explain(model, x, "gradient", targets=[records[0]["class"]]).attributions[0, 0]
    np.testing.assert_allclose(saved["attributions"], 0.5 * full, rtol=1e-4, atol=1e-6)
