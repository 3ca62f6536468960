"""gradient, gradient × input, guided backprop and deconvnet against closed forms and a hand
computation on a net small enough to do on paper."""

import re

import keras
import numpy as np
import pytest
import tensorflow as tf

import saliency_kit as sk

B = 3


def test_gradient_is_w(linear_image):
    model, x, w = linear_image
    expl = sk.explain(model, x, "gradient", [[0, 3]] * B)
    np.testing.assert_allclose(expl.attributions, np.broadcast_to(w[[0, 3]], (B, 2, 6, 5, 2)), atol=1e-6)
    np.testing.assert_allclose(expl.maps, np.abs(expl.attributions).max(-1))


def test_gradient_x_input_is_w_times_x(linear_image):
    model, x, w = linear_image
    expl = sk.explain(model, x, "gradient_x_input", 2)
    np.testing.assert_allclose(expl.attributions[:, 0], x * w[2], atol=1e-6)
    np.testing.assert_allclose(expl.maps[:, 0], (x * w[2]).sum(-1), atol=1e-5)


@pytest.mark.filterwarnings("ignore:guided_backprop.*all zero")  # input 2: every active unit has v < 0
def test_guided_and_deconv_by_hand(two_layer):
    model, x, W, v = two_layer
    active = (x @ W > 0).astype("float32")  # [B, 4]
    plain = (active * v) @ W.T
    guided = (active * v * (v > 0)) @ W.T
    deconv = np.tile(np.maximum(v, 0) @ W.T, (len(x), 1))
    np.testing.assert_allclose(sk.explain(model, x, "gradient", 0).attributions[:, 0], plain, atol=1e-6)
    np.testing.assert_allclose(sk.explain(model, x, "guided_backprop", 0).attributions[:, 0], guided, atol=1e-6)
    np.testing.assert_allclose(sk.explain(model, x, "deconvnet", 0).attributions[:, 0], deconv, atol=1e-6)
    assert not np.allclose(plain, guided) and not np.allclose(guided, deconv)
    np.testing.assert_allclose(sk.jacobian(model, x, rule="guided")[:, 0], guided, atol=1e-6)
    # and the plain gradient is still plain afterwards
    np.testing.assert_allclose(sk.jacobian(model, x)[:, 0], plain, atol=1e-6)


@pytest.mark.filterwarnings("ignore:.*all zero")
def test_the_rule_methods_report_the_activations_they_changed(two_layer, tiny_cnn):
    model, x, _, _ = two_layer
    for method in ("guided_backprop", "deconvnet"):
        expl = sk.explain(model, x, method, 0)
        # graph op names: the layer's name scope (numbered by TensorFlow when reused), then the op
        assert len(expl.rewritten) == 1 and re.search(r"/hidden(_\d+)?/Relu$", expl.rewritten[0]), expl.rewritten
        assert "rewritten=[1 names]" in repr(expl)
    assert sk.explain(model, x, "gradient", 0).rewritten is None
    assert sk.explain(model, x, "smoothgrad", 0, base="guided_backprop", samples=2).rewritten == expl.rewritten
    cnn, images, _, _ = tiny_cnn
    (op,) = sk.explain(cnn, images, "guided_gradcam", 0).rewritten
    assert re.search(r"(^|/)conv(_\d+)?/Relu$", op), op


class _CeilingFromData(keras.layers.Layer):
    """A ReLU whose ceiling is the batch mean, computed in ``call``: no constant to bind a rule to."""

    def call(self, t):
        return tf.where(t > keras.ops.mean(t), t, tf.zeros_like(t))


class _CompiledRelu(keras.layers.Layer):
    """A ReLU inside a separately compiled tf.function: its graph is shared, so it cannot be marked."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.relu = tf.function(tf.nn.relu)

    def call(self, t):
        return self.relu(t)


@pytest.mark.parametrize(
    "layer, message", [(_CeilingFromData, "threshold is not a constant"), (_CompiledRelu, "keep their plain gradient")]
)
def test_a_relu_the_rule_cannot_reach_is_refused_not_silently_left_plain(layer, message):
    inputs = keras.Input((3,))
    model = keras.Model(inputs, keras.layers.Dense(2)(layer()(keras.layers.Dense(4)(inputs))))
    x = np.random.default_rng(0).normal(size=(2, 3)).astype("float32")
    for method in ("guided_backprop", "deconvnet"):
        with pytest.raises(ValueError, match=message):
            sk.explain(model, x, method, 0)
    assert sk.explain(model, x, "gradient", 0).attributions.shape == (2, 1, 3)


def test_a_model_without_relus_is_refused_not_given_the_plain_gradient():
    inputs = keras.Input((3,))
    hidden = keras.layers.PReLU()(keras.layers.Dense(4, activation="gelu")(inputs))
    model = keras.Model(inputs, keras.layers.Dense(2)(hidden))
    x = np.random.default_rng(0).normal(size=(2, 3)).astype("float32")
    for method in ("guided_backprop", "deconvnet"):
        with pytest.raises(ValueError, match="no ReLU-family activation.*gelu x1.*PReLU x1"):
            sk.explain(model, x, method, 0)
