"""Models shared by the metric tests."""

import keras
import pytest


@pytest.fixture(scope="module")
def segmenter():
    """A dense model: per-pixel logits of 3 classes ``[B, 8, 8, 3]``."""
    keras.utils.set_random_seed(4)
    inputs = keras.Input((8, 8, 3))
    hidden = keras.layers.Conv2D(6, 3, padding="same", activation="relu")(inputs)
    return keras.Model(inputs, keras.layers.Conv2D(3, 1)(hidden))
