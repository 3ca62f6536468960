"""api.check: the checks explain makes before any work, without explaining; the command line's
pre-flight uses it, so the two cannot disagree (a channels-first model included)."""

from __future__ import annotations

import keras
import numpy as np
import pytest

import saliency_kit as sk
from saliency_kit import engine
from saliency_kit.cli.options import UsageError, preflight
from saliency_kit.pipeline import api


@pytest.fixture(scope="module")
def channels_first():
    inputs = keras.Input((3, 8, 8))
    h = keras.layers.Conv2D(4, 3, data_format="channels_first", activation="relu")(inputs)
    h = keras.layers.GlobalAveragePooling2D(data_format="channels_first")(h)
    return keras.Model(inputs, keras.layers.Dense(2)(h))


def test_check_refuses_what_explain_refuses_and_runs_nothing(channels_first):
    x = np.random.default_rng(0).uniform(size=(2, 3, 8, 8)).astype("float32")
    before = engine.kernel_count(channels_first)
    with pytest.raises(ValueError, match="channels-first") as checked:
        api.check(channels_first, x, "rise", masks=8)
    with pytest.raises(ValueError, match="channels-first") as explained:
        sk.explain(channels_first, x, "rise", masks=8)
    assert str(checked.value) == str(explained.value)
    assert engine.kernel_count(channels_first) == before  # nothing was compiled
    with pytest.raises(UsageError, match="rise: .*channels-first"):
        preflight(channels_first, None, x[:1], [("rise", {"masks": 8})], 4)


def test_check_returns_the_options_explain_uses():
    model = keras.Sequential(
        [keras.Input((8, 8, 3)), keras.layers.Conv2D(2, 3, activation="relu"), keras.layers.GlobalAveragePooling2D()]
    )
    x = np.zeros((1, 8, 8, 3), "float32")
    values = api.check(model, x, "smoothgrad", samples=3)
    explanation = sk.explain(model, x, "smoothgrad", targets=0, samples=3, seed=values["seed"])
    assert values["samples"] == 3 and explanation.options["seed"] == values["seed"]
    with pytest.raises(TypeError, match="samples"):
        api.check(model, x, "smoothgrad", samples="many")
    with pytest.raises(ValueError, match="unknown method"):
        api.check(model, x, "smoothgradd")


def test_explain_warnings_point_at_the_callers_line():
    """An all-zero map (one input) and an input the score does not depend on (several) are
    warned about at the line that called explain, not inside the package."""
    x = keras.Input((4,))
    blocked = keras.Model(x, keras.layers.Dense(2)(keras.ops.stop_gradient(x)))
    with pytest.warns(RuntimeWarning, match="all zero") as one:
        sk.explain(blocked, np.ones((2, 4), "float32"), "gradient", 0)
    a, b = keras.Input((4,), name="a"), keras.Input((3,), name="b")
    merged = keras.layers.Concatenate()([a, keras.ops.stop_gradient(b)])
    pair = keras.Model([a, b], keras.layers.Dense(2)(merged))
    with pytest.warns(RuntimeWarning, match="every attribution of 'b' is zero") as several:
        sk.explain(pair, [np.ones((2, 4), "float32"), np.ones((2, 3), "float32")], "gradient", 0)
    assert {w.filename for w in [*one, *several]} == {__file__}
