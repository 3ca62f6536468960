"""A metric added for real, outside the package's modules: declared here with
``@sk.evaluate.metric``, it is scored by ``compare`` and by ``saliency evaluate --metric`` with
no other edit."""

import json

import keras
import numpy as np
import pytest
from PIL import Image

from saliency_kit import evaluate
from saliency_kit.evaluate import registry
from saliency_kit.evaluate.compare import explanation_of


@pytest.fixture
def mean_magnitude():
    """The mean |map| of each map (a made-up model-free metric, lower is better), declared for the test."""

    @evaluate.metric("mean_magnitude", family="complexity", higher_is_better=False)
    def mean_magnitude(
        model=None, inputs=None, explanation_or_method="gradient", targets="top1", *, maps=None, **options
    ):
        values = np.abs(np.asarray(maps if maps is not None else explanation_or_method.maps, dtype=np.float64))
        return values.reshape(*values.shape[:2], -1).mean(axis=-1)

    yield mean_magnitude
    registry.unregister("mean_magnitude")


def test_the_declared_metric_is_listed_and_scored_by_compare(mean_magnitude):
    declared = registry.get("mean_magnitude")
    assert declared in evaluate.metrics() and not declared.builtin and declared.takes_maps
    keras.utils.set_random_seed(2)
    model = keras.Sequential(
        [
            keras.Input((8, 8, 3)),
            keras.layers.Conv2D(2, 3, activation="relu"),
            keras.layers.Flatten(),
            keras.layers.Dense(3),
        ]
    )
    x = np.random.default_rng(1).random((2, 8, 8, 3)).astype(np.float32)
    rows = evaluate.compare(model, x, ["gradient"], ["mean_magnitude"])["rows"]
    expl = explanation_of(model, x, "gradient")
    gradient = next(r for r in rows if r["method"] == "gradient")
    np.testing.assert_allclose(gradient["per_input"], np.abs(expl.maps).mean(axis=(1, 2, 3)), rtol=1e-6)
    assert {r["method"] for r in rows} == {"gradient", "random"} and not gradient["higher_is_better"]


def test_saliency_evaluate_offers_and_scores_the_declared_metric(mean_magnitude, tmp_path, capsys):
    from saliency_kit.cli import main

    image = tmp_path / "a.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8)).save(image)
    with pytest.raises(SystemExit):
        main(["evaluate", "--help"])
    assert "mean_magnitude" in capsys.readouterr().out
    out = tmp_path / "out"
    assert main(["evaluate", str(image), "--method", "gradient", "--metric", "mean_magnitude", "--out", str(out)]) == 0
    rows = json.loads((out / "metrics.json").read_text())["rows"]
    assert {(r["method"], r["metric"]) for r in rows} == {("gradient", "mean_magnitude"), ("random", "mean_magnitude")}
    assert all(r["mean"] > 0 and r["higher_is_better"] is False for r in rows)
