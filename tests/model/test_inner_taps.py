"""Taps on a layer inside a custom layer (no node of the functional graph): its output recorded
while the custom layer runs, a tensor put in its place, the class's ``call`` its own again after,
and the refusals (a name not there, a layer a wrapper runs once per slice) naming what is."""

import keras
import numpy as np
import pytest

from saliency_kit.model.placed import Placed
from saliency_kit.model.scores import ScoreView


class Block(keras.layers.Layer):
    """``out(relu(inner(x)))``: two Dense layers the block tracks and calls itself."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.inner = keras.layers.Dense(4, name="inner")
        self.out = keras.layers.Dense(3, name="out")

    def call(self, x):
        return self.out(keras.ops.relu(self.inner(x)))


def _model():
    inputs = keras.Input((5,))
    model = keras.Model(inputs, keras.layers.Dense(2, name="head")(Block(name="block")(inputs)))
    rng = np.random.default_rng(0)
    model.set_weights([rng.normal(size=w.shape).astype("float32") for w in model.get_weights()])
    return model


def test_a_layer_inside_a_custom_layer_is_tapped_and_swapped():
    model, x = _model(), np.random.default_rng(1).normal(size=(3, 5)).astype("float32")
    block = model.get_layer("block")
    values, taken = ScoreView(model, "output").raw(x, ("block/inner",))
    inner = x @ block.inner.kernel.numpy() + block.inner.bias.numpy()
    np.testing.assert_allclose(keras.ops.convert_to_numpy(taken["block/inner"]), inner, rtol=1e-5)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(values), keras.ops.convert_to_numpy(model(x)), rtol=1e-5)
    swapped, _ = ScoreView(model, "output").raw(Placed([x], {"block/inner": np.zeros((3, 4), "float32")}), ())
    bias = block.out.bias.numpy() @ model.get_layer("head").kernel.numpy() + model.get_layer("head").bias.numpy()
    np.testing.assert_allclose(keras.ops.convert_to_numpy(swapped), np.tile(bias, (3, 1)), rtol=1e-5)
    assert not hasattr(keras.layers.Dense.call, "_saliency_intercept")  # the class as it was
    np.testing.assert_allclose(keras.ops.convert_to_numpy(block.inner(x)), inner, rtol=1e-5)  # as it was


def test_a_name_not_inside_is_refused_naming_the_layers_that_are():
    with pytest.raises(ValueError, match=r"no single layer 'block/nothing'.*'block/inner', 'block/out'"):
        ScoreView(_model(), "output").raw(np.zeros((1, 5), "float32"), ("block/nothing",))


def test_a_layer_a_wrapper_runs_per_slice_is_refused():
    inputs = keras.Input((2, 5))
    model = keras.Model(inputs, keras.layers.TimeDistributed(keras.layers.Dense(3, name="dense"), name="td")(inputs))
    with pytest.raises(ValueError, match=r"'td/dense' is inside 'td' \(TimeDistributed\).*tap 'td' itself"):
        ScoreView(model, "output").raw(np.zeros((1, 2, 5), "float32"), ("td/dense",))
