"""The same checks over a table of model kinds, against twins written by hand (their activations
in ``twin_support.py``).

For each kind: copies (``copy_model`` and ``sk.rewrite``) compute the original's outputs; guided
and deconv gradients through ``sk.rewrite`` equal those of a hand-built twin — the same forward
pass written with plain TensorFlow ops and ReLUs whose backward rules are written by hand, not the
library's; and the original is untouched afterwards (weights, statistics, plain gradients of a
function traced before the rewrite and of one traced after, both equal to the twin's).
"""

import functools

import keras
import numpy as np
import pytest
import tensorflow as tf
from twin_support import RELU, RELU6, clip, dense, general, leaky, twin_activation

import saliency_kit as sk
from saliency_kit.model.copy import copy_model

RNG = np.random.default_rng(11)


# -- the kinds: (model, twin(x, act) -> output) --------------------------------------------------------
def functional():
    inp = keras.Input((6,))
    d1 = keras.layers.Dense(5, activation="relu", name="d1")
    d2 = keras.layers.Dense(5, activation=functools.partial(keras.activations.relu, max_value=1.0), name="d2")
    d3 = keras.layers.Dense(5, activation=keras.layers.ReLU(negative_slope=0.2), name="d3")
    d4 = keras.layers.Dense(5, name="d4")
    out = keras.layers.Dense(3, name="out")
    y = out(keras.ops.relu(d4(d3(d2(d1(inp))))))
    model = keras.Model(inp, y, name="functional")

    def twin(x, act):
        h = act(dense(d1, x), RELU)
        h = act(dense(d2, h), clip(1.0))
        h = act(dense(d3, h), leaky(0.2))
        return dense(out, act(dense(d4, h), RELU))

    return model, twin


def sequential():
    conv = keras.layers.Conv2D(4, 3, activation="relu6", name="conv")
    head = keras.layers.Dense(3, name="head")
    model = keras.Sequential(
        [keras.Input((6, 6, 2)), conv, keras.layers.MaxPooling2D(2), keras.layers.Flatten(), head], name="sequential"
    )

    def twin(x, act):
        kernel, bias = conv.get_weights()
        h = act(tf.nn.conv2d(x, kernel, 1, "VALID") + bias, RELU6)
        h = tf.nn.max_pool2d(h, 2, 2, "VALID")
        return dense(head, tf.reshape(h, [tf.shape(h)[0], -1]))

    return model, twin


class Subclassed(keras.Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.hidden = keras.layers.Dense(5, activation="relu")
        self.capped = keras.layers.ReLU(max_value=2.0, threshold=0.1)  # several ops in Keras
        self.head = keras.layers.Dense(3)

    def call(self, x):
        return self.head(self.capped(tf.nn.relu6(self.hidden(x) * 4.0) - 1.0))


def subclassed():
    model = Subclassed(name="subclassed")
    model(np.zeros((1, 6), np.float32))

    def twin(x, act):
        h = act(dense(model.hidden, x), RELU)
        h = act(act(h * 4.0, RELU6) - 1.0, general(max_value=2.0, threshold=0.1))
        return dense(model.head, h)

    return model, twin


def nested_three_deep():
    inner = keras.Sequential([keras.Input((5,)), keras.layers.Dense(5, activation="relu", name="i1")], name="inner")
    mid_in = keras.Input((5,))
    mid_dense = keras.layers.Dense(5, name="m1")
    middle = keras.Model(mid_in, inner(keras.layers.LeakyReLU(0.3, name="mleaky")(mid_dense(mid_in))), name="middle")
    inp = keras.Input((6,))
    first = keras.layers.Dense(5, activation="relu", name="first")
    head = keras.layers.Dense(3, name="head")
    model = keras.Model(inp, head(middle(first(inp))), name="outer")
    i1 = inner.get_layer("i1")

    def twin(x, act):
        h = act(dense(first, x), RELU)
        h = act(dense(mid_dense, h), leaky(0.3))
        return dense(head, act(dense(i1, h), RELU))

    return model, twin


def time_distributed():
    step = keras.layers.Dense(4, activation="relu", name="step")
    head = keras.layers.Dense(3, name="head")
    model = keras.Sequential(
        [keras.Input((5, 3)), keras.layers.TimeDistributed(step, name="td"), keras.layers.Flatten(), head],
        name="time_distributed",
    )

    def twin(x, act):
        kernel, bias = step.get_weights()
        h = act(tf.einsum("btf,fu->btu", x, kernel) + bias, RELU)
        return dense(head, tf.reshape(h, [tf.shape(h)[0], -1]))

    return model, twin


def bidirectional_rnn():
    bi = keras.layers.Bidirectional(keras.layers.SimpleRNN(3, activation="relu"), name="bi")
    head = keras.layers.Dense(3, name="head")
    model = keras.Sequential([keras.Input((5, 2)), bi, head], name="bidirectional")

    def run(x, act, cell_weights, reverse):
        kernel, recurrent, bias = cell_weights
        h = tf.zeros((tf.shape(x)[0], 3))
        steps = range(4, -1, -1) if reverse else range(5)
        for t in steps:
            h = act(x[:, t] @ kernel + h @ recurrent + bias, RELU)
        return h

    def twin(x, act):
        forward = run(x, act, bi.forward_layer.get_weights(), False)
        backward = run(x, act, bi.backward_layer.get_weights(), True)
        return dense(head, tf.concat([forward, backward], axis=-1))

    return model, twin


def lambda_relu():
    d1, d2, head = (
        keras.layers.Dense(5, name="d1"),
        keras.layers.Dense(5, name="d2"),
        keras.layers.Dense(3, name="head"),
    )
    inp = keras.Input((6,))
    h = keras.layers.Lambda(tf.nn.relu, name="lambda_relu")(d1(inp))
    h = keras.layers.Lambda(lambda t: tf.nn.relu6(t * 3.0), name="lambda_relu6")(d2(h))
    model = keras.Model(inp, head(h), name="lambda_relu")

    def twin(x, act):
        h = act(dense(d1, x), RELU)
        return dense(head, act(dense(d2, h) * 3.0, RELU6))

    return model, twin


class HiddenRelus(keras.layers.Layer):
    """ReLUs computed in ``call``: nothing outside can see them."""

    def build(self, input_shape):
        self.w = self.add_weight(shape=(input_shape[-1], 5), initializer="glorot_uniform", name="w")

    def call(self, x):
        h = keras.ops.relu(keras.ops.matmul(x, self.w))
        return tf.nn.leaky_relu(h - 0.5, alpha=0.1)


def custom_call():
    hidden = HiddenRelus(name="hidden")
    head = keras.layers.Dense(3, name="head")
    inp = keras.Input((6,))
    model = keras.Model(inp, head(hidden(inp)), name="custom_call")
    head.kernel.assign(
        np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32) * np.array([[1], [-1], [1], [-1], [1]])
    )

    def twin(x, act):
        h = act(x @ tf.constant(hidden.w.numpy()), RELU)
        return dense(head, act(h - 0.5, leaky(0.1)))

    return model, twin


class CompositeRelus(keras.layers.Layer):
    """ReLUs with a ceiling, a threshold and a slope, each several ops, computed in ``call``."""

    def build(self, input_shape):
        self.w = self.add_weight(shape=(input_shape[-1], 5), initializer="glorot_uniform", name="w")
        self.capped = keras.layers.ReLU(max_value=1.0, threshold=0.2)

    def call(self, x):
        h = self.capped(keras.ops.matmul(x, self.w) * 3.0)
        return keras.activations.relu(h - 0.5, negative_slope=0.1, max_value=0.6)


def composite_relus():
    hidden = CompositeRelus(name="hidden")
    d2, head = keras.layers.Dense(10, name="d2"), keras.layers.Dense(3, name="head")
    rnn = keras.layers.SimpleRNN(4, activation=functools.partial(keras.activations.relu, max_value=0.8), name="rnn")
    inp = keras.Input((6,))
    h = keras.layers.Lambda(lambda t: tf.clip_by_value(tf.nn.relu(t), 0.0, 0.7), name="clip")(d2(hidden(inp)))
    h = rnn(keras.layers.Reshape((5, 2))(h))
    model = keras.Model(inp, head(h), name="composite_relus")

    def twin(x, act):
        h = act(x @ tf.constant(hidden.w.numpy()) * 3.0, general(max_value=1.0, threshold=0.2))
        h = act(h - 0.5, general(0.1, 0.6))
        h = act(dense(d2, h), clip(0.7))
        kernel, recurrent, bias = rnn.get_weights()
        state = tf.zeros((tf.shape(x)[0], 4))
        for t in range(5):
            state = act(h[:, 2 * t : 2 * t + 2] @ kernel + state @ recurrent + bias, clip(0.8))
        return dense(head, state)

    return model, twin


def normalization_front_end():
    norm = keras.layers.Normalization(name="norm")
    norm.adapt(RNG.normal(3.0, 2.0, (200, 6)).astype(np.float32))
    d1, head = keras.layers.Dense(5, activation="relu", name="d1"), keras.layers.Dense(3, name="head")
    inp = keras.Input((6,))
    model = keras.Model(inp, head(d1(norm(inp))), name="normalized")
    mean, variance = np.asarray(norm.mean), np.asarray(norm.variance)
    assert abs(mean.mean() - 3.0) < 0.5  # really adapted

    def twin(x, act):
        z = (x - mean) / np.maximum(np.sqrt(variance), keras.backend.epsilon())
        return dense(head, act(dense(d1, z), RELU))

    return model, twin


def channels_first():
    conv = keras.layers.Conv2D(4, 3, activation="relu", data_format="channels_first", name="conv")
    head = keras.layers.Dense(3, name="head")
    model = keras.Sequential(
        [keras.Input((2, 6, 6)), conv, keras.layers.GlobalAveragePooling2D(data_format="channels_first"), head],
        name="channels_first",
    )

    def twin(x, act):
        kernel, bias = conv.get_weights()
        h = act(tf.nn.conv2d(tf.transpose(x, [0, 2, 3, 1]), kernel, 1, "VALID") + bias, RELU)
        return dense(head, tf.reduce_mean(h, axis=[1, 2]))

    return model, twin


def mixed_float16():
    d1 = keras.layers.Dense(8, activation="relu", dtype="mixed_float16", name="d1")
    head = keras.layers.Dense(3, dtype="float32", name="head")
    inp = keras.Input((6,))
    model = keras.Model(inp, head(d1(inp)), name="mixed")

    def twin(x, act):
        kernel, bias = [tf.constant(w, tf.float16) for w in d1.get_weights()]
        h = act(tf.cast(x, tf.float16) @ kernel + bias, RELU)
        return dense(head, tf.cast(h, tf.float32))

    return model, twin


def converted_from_pytorch():
    """Takes [B, C, H, W] and transposes it before channels-last layers, as converters write it."""
    conv = keras.layers.Conv2D(4, 3, activation="relu", name="conv")
    head = keras.layers.Dense(3, name="head")
    inp = keras.Input((2, 6, 6))
    h = conv(keras.layers.Permute((2, 3, 1))(inp))
    model = keras.Model(inp, head(keras.layers.GlobalAveragePooling2D()(h)), name="converted_from_pytorch")

    def twin(x, act):
        kernel, bias = conv.get_weights()
        h = act(tf.nn.conv2d(tf.transpose(x, [0, 2, 3, 1]), kernel, 1, "VALID") + bias, RELU)
        return dense(head, tf.reduce_mean(h, axis=[1, 2]))

    return model, twin


def float16():
    """Every layer in float16 (not the mixed policy): weights, activations and output."""
    d1 = keras.layers.Dense(8, activation="relu", dtype="float16", name="d1")
    head = keras.layers.Dense(3, dtype="float16", name="head")
    inp = keras.Input((6,), dtype="float16")
    model = keras.Model(inp, head(d1(inp)), name="float16")

    def twin(x, act):
        return dense(head, act(dense(d1, tf.cast(x, tf.float16)), RELU))

    return model, twin


def fully_convolutional():
    c1 = keras.layers.Conv2D(4, 3, padding="same", activation="relu", name="c1")
    c2 = keras.layers.Conv2D(2, 1, activation="sigmoid", name="c2")
    model = keras.Sequential([keras.Input((6, 6, 2)), c1, c2], name="fully_convolutional")

    def twin(x, act):
        k1, b1 = c1.get_weights()
        k2, b2 = c2.get_weights()
        h = act(tf.nn.conv2d(x, k1, 1, "SAME") + b1, RELU)
        return tf.sigmoid(tf.nn.conv2d(h, k2, 1, "VALID") + b2)

    return model, twin


def conv1d_time_series():
    c1 = keras.layers.Conv1D(4, 3, activation="relu", name="c1")
    c2 = keras.layers.Conv1D(5, 3, strides=2, padding="same", activation=keras.layers.LeakyReLU(0.1), name="c2")
    head = keras.layers.Dense(3, name="head")
    model = keras.Sequential(
        [keras.Input((12, 2)), c1, c2, keras.layers.GlobalAveragePooling1D(), head], name="conv1d_time_series"
    )

    def twin(x, act):
        k1, b1 = c1.get_weights()
        k2, b2 = c2.get_weights()
        h = act(tf.nn.conv1d(x, k1, 1, "VALID") + b1, RELU)
        h = act(tf.nn.conv1d(h, k2, 2, "SAME") + b2, leaky(0.1))
        return dense(head, tf.reduce_mean(h, axis=1))

    return model, twin


def conv3d_volume():
    conv = keras.layers.Conv3D(4, 3, activation="relu", name="conv")
    head = keras.layers.Dense(3, name="head")
    # average pooling: at a max over dead (all-zero) ReLUs, eager TensorFlow sends the gradient to every
    # tied zero and a compiled function to one of them, which the deconv rule would expose
    model = keras.Sequential(
        [keras.Input((4, 5, 5, 2)), conv, keras.layers.AveragePooling3D(2), keras.layers.Flatten(), head],
        name="conv3d_volume",
    )

    def twin(x, act):
        kernel, bias = conv.get_weights()
        h = act(tf.nn.conv3d(x, kernel, [1] * 5, "VALID") + bias, RELU)  # [B, 2, 3, 3, 4]
        h = tf.nn.avg_pool3d(h, 2, 2, "VALID")
        return dense(head, tf.reshape(h, [tf.shape(h)[0], -1]))

    return model, twin


KINDS = {
    "functional": (functional, (6,)),
    "sequential": (sequential, (6, 6, 2)),
    "subclassed": (subclassed, (6,)),
    "nested_three_deep": (nested_three_deep, (6,)),
    "time_distributed": (time_distributed, (5, 3)),
    "bidirectional_rnn": (bidirectional_rnn, (5, 2)),
    "lambda_relu": (lambda_relu, (6,)),
    "relu_in_custom_call": (custom_call, (6,)),
    "composite_relus": (composite_relus, (6,)),
    "normalization_front_end": (normalization_front_end, (6,)),
    "channels_first": (channels_first, (2, 6, 6)),
    "mixed_float16": (mixed_float16, (6,)),
    "fully_convolutional": (fully_convolutional, (6, 6, 2)),
    "conv1d_time_series": (conv1d_time_series, (12, 2)),
    "conv3d_volume": (conv3d_volume, (4, 5, 5, 2)),
    "converted_from_pytorch": (converted_from_pytorch, (2, 6, 6)),
    "float16": (float16, (6,)),
}


def score(output):
    output = tf.cast(output, tf.float32)
    if len(output.shape) == 2:
        return output[:, 0]
    return tf.reduce_sum(output[..., 0], axis=list(range(1, len(output.shape) - 1)))


def gradient_of(fn, x):
    x = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(x)
        s = tf.reduce_sum(score(fn(x)))
    return tape.gradient(s, x).numpy()


def compiled_gradient_of(model):
    @tf.function
    def gradient(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            s = tf.reduce_sum(score(model(x)))
        return tape.gradient(s, x)

    return lambda x: gradient(tf.constant(x)).numpy()


def tolerance(name):
    return dict(rtol=2e-2, atol=2e-3) if name in ("mixed_float16", "float16") else dict(rtol=1e-4, atol=1e-6)


_NEEDS = {"channels_first": pytest.mark.channels_first_convolution}  # kernels some CPUs lack (cpu_support.py)


@pytest.fixture(params=[pytest.param(k, marks=_NEEDS.get(k, ())) for k in KINDS], scope="module")
def kind(request):
    build, shape = KINDS[request.param]
    keras.utils.set_random_seed(6)  # a seed where guided maps of the small kinds are alive on most inputs
    model, twin = build()
    x = RNG.normal(size=(16, *shape)).astype(np.float32)
    return request.param, model, twin, x


def state_of(model):
    return [np.array(v) for v in model.weights] + [
        np.asarray(layer.mean) for layer in model._flatten_layers() if isinstance(layer, keras.layers.Normalization)
    ]


def test_copies_compute_the_original_outputs(kind):
    name, model, _, x = kind
    expected = np.asarray(model(x, training=False))
    copies = [sk.rewrite(model, "guided"), sk.rewrite(model, "deconv")]
    if name != "subclassed":
        copies.append(copy_model(model))
    for copy in copies:
        np.testing.assert_array_equal(np.asarray(copy(x, training=False)), expected)


def test_guided_and_deconv_equal_the_hand_built_twin_and_the_original_is_untouched(kind):
    name, model, twin, x = kind
    tol = tolerance(name)
    plain_twin = gradient_of(lambda t: twin(t, twin_activation("plain")), x)
    traced_before = compiled_gradient_of(model)
    before = traced_before(x)
    np.testing.assert_allclose(before, plain_twin, **tol)  # the twin is the model
    np.testing.assert_allclose(np.asarray(model(x)), twin(tf.constant(x), twin_activation("plain")).numpy(), **tol)
    state = state_of(model)

    for rule in ("guided", "deconv"):
        rewritten = sk.rewrite(model, rule)
        expected = gradient_of(lambda t: twin(t, twin_activation(rule)), x)
        assert np.abs(expected - plain_twin).max() > 1e-3 * np.abs(plain_twin).max(), "the rule must matter here"
        np.testing.assert_allclose(gradient_of(rewritten, x), expected, **tol)
        np.testing.assert_allclose(compiled_gradient_of(rewritten)(x), expected, **tol)
        assert rewritten.rewritten_layers

    for a, b in zip(state_of(model), state):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(traced_before(x), before, rtol=0, atol=0)
    np.testing.assert_allclose(compiled_gradient_of(model)(x), plain_twin, **tol)
    np.testing.assert_allclose(gradient_of(model, x), plain_twin, **tol)


@pytest.mark.parametrize("method, rule", [("guided_backprop", "guided"), ("deconvnet", "deconv")])
def test_the_guided_and_deconv_methods_equal_the_hand_built_twin_and_report_what_they_changed(kind, method, rule):
    name, model, twin, x = kind
    expected = gradient_of(lambda t: twin(t, twin_activation(rule)), x)
    live = np.abs(expected).reshape(len(x), -1).max(axis=1) > 0
    assert live.sum() >= len(x) // 4, "maps must be alive for the comparison to mean something"
    explanation = sk.explain(model, x, method, targets=score, score="output")
    np.testing.assert_allclose(explanation.attributions[:, 0], expected, **tolerance(name))
    assert explanation.rewritten, "the method must say which activations the rule took over"
    assert all(isinstance(op, str) for op in explanation.rewritten)
