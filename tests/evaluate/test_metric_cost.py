"""What monotonicity_correlation costs: the forward passes it runs are counted (the engine's
compiled calls, one input per call), equal the count it states, and a cost above the threshold is
said in one warning before any pass is run."""

import math
import warnings

import keras
import numpy as np
import pytest

import saliency_kit as sk
from saliency_kit import engine, evaluate
from saliency_kit.evaluate import faithfulness

B = 2


@pytest.fixture(scope="module")
def explained():
    keras.utils.set_random_seed(9)
    inputs = keras.Input((8, 8, 3))
    hidden = keras.layers.Conv2D(4, 3, padding="same", activation="relu")(inputs)
    model = keras.Model(inputs, keras.layers.Dense(3)(keras.layers.GlobalAveragePooling2D()(hidden)))
    x = np.random.default_rng(1).random((B, 8, 8, 3)).astype("float32")
    return model, x, sk.explain(model, x, "gradient", "top2")


@pytest.mark.parametrize(
    ("options", "each"),
    [
        ({"features_in_step": 48, "nr_samples": 3}, 4 * 3),  # 192 elements in 4 steps, 3 uniform draws
        ({"features_in_step": 50, "nr_samples": 2}, 4 * 2),  # the last step shorter
        ({"features_in_step": 64, "nr_samples": 5, "perturb_baseline": "black"}, 3),  # one draw of a fixed baseline
    ],
)
def test_the_passes_run_are_the_passes_counted(explained, options, each):
    model, x, expl = explained
    random = options.get("perturb_baseline", "uniform") == "uniform"
    assert faithfulness.monotonicity_passes(192, options["features_in_step"], options["nr_samples"], random) == each
    evaluate.monotonicity_correlation(model, x, expl, batch_size=1, **options)  # compiled once
    before = engine.call_count()
    evaluate.monotonicity_correlation(model, x, expl, batch_size=1, **options)
    assert engine.call_count() - before == B + B * 2 * each  # the clean inputs, then every step of 2 targets


def test_quantus_defaults_on_a_64_pixel_image_cost_over_a_million_passes():
    assert faithfulness.monotonicity_passes(64 * 64 * 3, 1, 100) == 1_228_800
    assert faithfulness.monotonicity_passes(64 * 64 * 3, math.ceil(64 * 64 * 3 / 64), 100) == 6_400


def test_a_cost_above_the_threshold_is_said_before_any_pass(explained, monkeypatch):
    model, x, expl = explained
    options = {"features_in_step": 48, "nr_samples": 3}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        evaluate.monotonicity_correlation(model, x, expl, **options)  # 48 passes: below the threshold, silent
    monkeypatch.setattr(faithfulness, "WARN_PASSES", 47)
    before = engine.call_count()
    with pytest.raises(UserWarning, match=r"will run 48 forward passes \(2 inputs × 2 targets × 4 steps") as caught:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            evaluate.monotonicity_correlation(model, x, expl, **options)
    assert engine.call_count() == before  # said before any pass was run
    message = str(caught.value)
    assert "\n" not in message and "features_in_step=3 (64 steps)" in message and "nr_samples" in message
