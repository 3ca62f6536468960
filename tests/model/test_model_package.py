"""saliency_kit.model: the walker, scores behind a softmax/sigmoid, taps, the configured CAM layer,
and the checked copier."""

import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

import saliency_kit as sk
from saliency_kit.model.copy import copy_model
from saliency_kit.model.scores import ScoreView
from saliency_kit.model.walker import default_cam_layer, find_layer, is_recurrent, walk, weighted_layers

RNG = np.random.default_rng(3)


# -- the walker --------------------------------------------------------------------------------------
def wrapped_model():
    inner = keras.Sequential(
        [keras.Input((4, 3)), keras.layers.TimeDistributed(keras.layers.Dense(2, name="step"), name="td")], name="inner"
    )
    inp = keras.Input((4, 3))
    h = inner(inp)
    h = keras.layers.Bidirectional(keras.layers.LSTM(2, name="lstm"), name="bi")(h)
    return keras.Model(inp, keras.layers.Dense(2, name="out")(h), name="outer")


def test_walk_yields_paths_and_owners_through_models_and_wrappers():
    model = wrapped_model()
    visits = {v.path: v for v in walk(model)}
    assert {
        "inner",
        "inner/td",
        "inner/td/step",
        "bi",
        "bi/forward_lstm",
        "bi/backward_lstm",
        "bi/forward_lstm/lstm_cell",
        "out",
    } <= set(visits)
    assert visits["inner/td/step"].owner is visits["inner/td"].layer
    assert visits["inner/td"].in_graph and not visits["inner/td/step"].in_graph
    assert find_layer(model, "step") == "inner/td/step"
    assert find_layer(model, model.get_layer("out")) == "out"
    assert [p for p, _ in weighted_layers(model)] == ["inner/td", "bi", "out"]
    assert is_recurrent(model) and not is_recurrent(keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)]))
    with pytest.raises(ValueError, match="not in model"):
        find_layer(model, "nope")
    with pytest.raises(TypeError, match="received int"):
        find_layer(model, 3)


# -- logits behind the final squash ------------------------------------------------------
def logits_of(model, x):
    return ScoreView(model, "logits")(tf.constant(x)).numpy()


def test_lambda_sigmoid_and_softmax_followed_by_identity_like_layers_give_logits():
    x = RNG.normal(size=(3, 5)).astype(np.float32)
    inp = keras.Input((5,))
    dense = keras.layers.Dense(4, name="z")
    z = dense(inp)
    expected = np.asarray(dense(x))

    m1 = keras.Model(inp, keras.layers.Lambda(tf.nn.sigmoid)(z))
    m2 = keras.Model(inp, keras.layers.Dropout(0.5)(keras.layers.Lambda(tf.nn.softmax)(z)))
    fused = keras.layers.Dense(4, activation="softmax", name="fused")
    h = fused(inp)
    h = keras.layers.Activation("linear")(keras.layers.Identity()(keras.layers.Dropout(0.2)(h)))
    m3 = keras.Model(inp, keras.layers.Reshape((4,))(h))
    for model in (m1, m2):
        np.testing.assert_allclose(logits_of(model, x), expected, rtol=1e-5, atol=1e-6)
    kernel, bias = fused.get_weights()
    np.testing.assert_allclose(logits_of(m3, x), x @ kernel + bias, rtol=1e-5, atol=1e-5)
    assert ScoreView(m3, "logits").differentiated == "logits"


class SoftmaxNet(keras.Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.hidden = keras.layers.Dense(4, activation="relu")
        self.probs = keras.layers.Dense(3, activation="softmax")

    def call(self, x):
        return self.probs(self.hidden(x))


def _hand_logits(net, x):
    """The values before ``net``'s softmax, from its weights in NumPy."""
    (w1, b1), (w2, b2) = net.hidden.get_weights(), net.probs.get_weights()
    return np.maximum(x @ w1 + b1, 0) @ w2 + b2


def test_a_subclassed_model_ending_in_a_softmax_is_scored_on_the_values_before_it():
    net = SoftmaxNet(name="softmax_net")
    x = RNG.normal(size=(2, 5)).astype(np.float32)
    net(x)
    inp = keras.Input((5,))
    wrapper = keras.Model(inp, net(inp), name="wrapper")
    for model in (net, wrapper):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            view = ScoreView(model, "logits")
        assert view.differentiated == "logits"
        np.testing.assert_allclose(view(tf.constant(x)).numpy(), _hand_logits(net, x), rtol=1e-5, atol=1e-6)


_compiled_softmax = tf.function(tf.nn.softmax, autograph=False)


class CompiledHeadNet(keras.Model):
    """A softmax inside a separately compiled tf.function: the values before it cannot be reached."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.head = keras.layers.Dense(3)

    def call(self, x):
        return _compiled_softmax(self.head(x))


def test_a_softmax_that_cannot_be_looked_behind_warns_once_and_says_output():
    net = CompiledHeadNet(name="compiled_head")
    x = RNG.normal(size=(2, 5)).astype(np.float32)
    net(x)
    inp = keras.Input((5,))
    wrapper = keras.Model(inp, net(inp), name="compiled_wrapper")
    for model in (net, wrapper):
        with pytest.warns(UserWarning, match="cannot be reached"):
            view = ScoreView(model, "logits")
        assert view.differentiated == "output"
        np.testing.assert_allclose(view(tf.constant(x)).numpy(), np.asarray(net(x)), rtol=1e-6)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            ScoreView(model, "logits")  # once per model


def test_subclassed_models_are_scored_on_their_output_and_refuse_taps_clearly():
    net = SoftmaxNet(name="net2")
    x = RNG.normal(size=(2, 5)).astype(np.float32)
    net(x)
    view = ScoreView(net, "output")
    np.testing.assert_allclose(view(tf.constant(x)).numpy(), np.asarray(net(x)), rtol=1e-6)
    with pytest.raises(ValueError, match="subclassed keras.Model.*cannot be tapped"):
        view(tf.constant(x), tap=find_layer(net, net.hidden))
    with pytest.raises(ValueError, match="subclassed"):
        default_cam_layer(net)


# -- the configured Grad-CAM layer, fully convolutional models --------------
def test_a_zoo_model_uses_its_configured_gradcam_layer():
    model, spec = sk.load_model("vgg16", weights="random")
    assert spec.gradcam_layer == "block5_conv3"
    assert default_cam_layer(model) == "block5_conv3"  # not block5_pool, the last 4-D layer
    x = RNG.uniform(-1, 1, (1, 224, 224, 3)).astype(np.float32)
    explanation = sk.explain(model, x, "gradcam", targets=0)
    assert explanation.layer == "block5_conv3"
    # the same architecture built directly has no spec: the last 4-D layer
    assert default_cam_layer(keras.applications.VGG16(weights=None)) == "block5_pool"


def test_default_cam_layer_of_a_fully_convolutional_model_with_a_fused_sigmoid():
    inp = keras.Input((8, 8, 3))
    h = keras.layers.Conv2D(4, 3, padding="same", activation="relu", name="c1")(inp)
    out = keras.layers.Conv2D(2, 1, activation="sigmoid", name="heads")(h)
    model = keras.Model(inp, out)
    assert default_cam_layer(model) == "heads"
    x = RNG.normal(size=(2, 8, 8, 3)).astype(np.float32)
    view = ScoreView(model, "logits")
    values, taken = view(tf.constant(x), tap="heads")
    scores = tf.reduce_mean(values[..., 0], axis=[1, 2])[:, None]
    kernel, bias = model.get_layer("heads").get_weights()
    logits = np.einsum("bhwc,ck->bhwk", np.asarray(model.get_layer("c1")(x)), kernel[0, 0]) + bias
    np.testing.assert_allclose(taken.numpy(), logits, rtol=1e-5, atol=1e-5)  # the tap sees the logits
    np.testing.assert_allclose(scores.numpy()[:, 0], logits[..., 0].mean(axis=(1, 2)), rtol=1e-5, atol=1e-5)
    explanation = sk.explain(model, x, "gradcam", targets=lambda v: tf.reduce_mean(v[..., 0], axis=[1, 2]))
    assert explanation.layer == "heads" and np.isfinite(explanation.maps).all()


# -- the checked copier ---------------------------------------------------------------
def test_an_adapted_normalization_keeps_its_statistics_in_every_copy():
    norm = keras.layers.Normalization(name="norm")
    norm.adapt(RNG.normal(5.0, 3.0, (100, 4)).astype(np.float32))
    inp = keras.Input((4,))
    model = keras.Model(inp, keras.layers.Dense(2, activation="relu")(norm(inp)))
    for copy in (copy_model(model), sk.rewrite(model, "guided")):
        np.testing.assert_array_equal(np.asarray(copy.get_layer("norm").mean), np.asarray(norm.mean))
        np.testing.assert_array_equal(np.asarray(copy.get_layer("norm").variance), np.asarray(norm.variance))


def test_efficientnet_builtin_normalization_is_copied():
    model = keras.applications.EfficientNetB0(weights=None, input_shape=(32, 32, 3), classes=3)
    norm = next(v.layer for v in walk(model) if isinstance(v.layer, keras.layers.Normalization))
    norm.adapt(RNG.uniform(0, 255, (8, 32, 32, 3)).astype(np.float32))  # as loading weights would set it
    copy = copy_model(model)
    np.testing.assert_array_equal(np.asarray(copy.get_layer(norm.name).mean), np.asarray(norm.mean))


class Scaled(keras.layers.Layer):
    """Its config says scale=1 but the layer was changed afterwards: state outside get_config."""

    def __init__(self, scale=1.0, **kwargs):
        super().__init__(**kwargs)
        self.scale = scale

    def call(self, x):
        return x * self.scale


def test_a_copy_that_differs_is_refused_naming_the_first_layer():
    scaled = Scaled(name="scaled")
    inp = keras.Input((4,))
    h = keras.layers.Dense(4, activation="relu", name="before")(inp)
    model = keras.Model(inp, keras.layers.Dense(2, name="after")(scaled(h)))
    scaled.scale = 3.0
    with pytest.raises(ValueError, match="first difference is at layer 'scaled'"):
        copy_model(model)
    with pytest.raises(ValueError, match="first difference is at layer 'scaled'"):
        sk.rewrite(model, "guided")


def test_the_rewrite_of_a_subclassed_softmax_model_also_says_output():
    net = SoftmaxNet(name="net3")
    x = RNG.normal(size=(2, 5)).astype(np.float32)
    net(x)
    with pytest.warns(UserWarning, match="cannot be reached"):  # the rewrite runs it compiled
        view = ScoreView(sk.rewrite(net, "guided"), "logits")
    assert view.differentiated == "output"


def test_the_channel_axis_of_a_converted_model_is_traced_without_a_dtype():
    from saliency_kit.model.inspect import channel_axis

    inputs = keras.Input((2, 6, 6))
    features = keras.layers.Conv2D(4, 3)(keras.layers.Permute((2, 3, 1))(inputs))
    model = keras.Model(inputs, keras.layers.GlobalAveragePooling2D()(features))
    assert channel_axis(model, 3, (2, 6, 6)) == 0
