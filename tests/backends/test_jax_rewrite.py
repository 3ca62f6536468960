"""``sk.rewrite`` on JAX: the guided copy's gradient against NumPy by hand, ReLUs hidden in a
custom ``call`` reached, the user's model and its own gradient untouched, LRP copies computing
the model's outputs."""

import keras
import numpy as np
import pytest

import saliency_kit as sk

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "jax", reason="runs in the JAX process: KERAS_BACKEND=jax pytest tests/backends"
)


class HiddenRelu(keras.layers.Layer):
    """A dense map with its ReLU written in ``call`` (no ``activation=`` to see)."""

    def __init__(self, units, **kwargs):
        super().__init__(**kwargs)
        self.units = units

    def build(self, shape):
        self.kernel = self.add_weight(shape=(shape[-1], self.units), name="kernel")

    def call(self, x):
        return keras.ops.relu(keras.ops.matmul(x, self.kernel))


def _model(rng):
    inp = keras.Input((5,))
    h = HiddenRelu(6, name="hidden")(inp)
    model = keras.Model(inp, keras.layers.Dense(3, use_bias=False, name="out")(h))
    W1, W2 = rng.normal(size=(5, 6)), rng.normal(size=(6, 3))
    model.get_layer("hidden").set_weights([W1.astype(np.float32)])
    model.get_layer("out").set_weights([W2.astype(np.float32)])
    return model, W1, W2


def _input_gradient(model, x, column):
    import jax

    return np.asarray(jax.grad(lambda z: model(z)[:, column].sum())(keras.ops.convert_to_tensor(x)))


def test_the_guided_copy_has_the_hand_computed_guided_gradient():
    rng = np.random.default_rng(1)
    model, W1, W2 = _model(rng)
    x = rng.normal(size=(4, 5)).astype(np.float32)
    plain_before = _input_gradient(model, x, 1)
    guided = sk.rewrite(model, "guided")
    np.testing.assert_allclose(np.asarray(guided(x)), np.asarray(model(x)), rtol=1e-6)
    assert guided.rewritten_layers and "relu" in guided.rewritten_layers[0]
    got = _input_gradient(guided, x, 1)
    z = x.astype(np.float64) @ W1
    # guided: through the ReLU only where its input is positive and the gradient arriving is positive
    arriving = np.broadcast_to(W2[:, 1], z.shape)
    want = ((z > 0) * np.maximum(arriving, 0)) @ W1.T
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    plain = ((z > 0) * arriving) @ W1.T
    assert np.abs(got - plain).max() > 1e-3  # the rule changed something here
    np.testing.assert_array_equal(_input_gradient(model, x, 1), plain_before)  # the model's own stays plain


def test_a_model_without_relus_is_refused_in_one_line():
    inp = keras.Input((4,))
    model = keras.Model(inp, keras.layers.Dense(2, activation="tanh")(inp))
    with pytest.raises(ValueError) as refused:
        sk.rewrite(model, "guided")
    assert "\n" not in str(refused.value)


def test_an_lrp_copy_computes_the_models_outputs():
    rng = np.random.default_rng(2)
    inp = keras.Input((6, 6, 2))
    h = keras.layers.Conv2D(3, 3, activation="relu")(inp)
    h = keras.layers.Flatten()(h)
    model = keras.Model(inp, keras.layers.Dense(2)(h))
    x = rng.normal(size=(2, 6, 6, 2)).astype(np.float32)
    copy = sk.rewrite(model, sk.composites.LRPRewrite("epsilon_plus_flat"))
    np.testing.assert_allclose(np.asarray(copy(x)), np.asarray(model(x)), rtol=1e-5, atol=1e-6)
    assert copy is not model and copy.rewritten_layers
