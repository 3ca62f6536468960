"""The model facts read from the traced JAX program: the logits behind a final softmax/sigmoid
(eagerly and inside ``jax.jit`` with the variables passed through a ``keras.StatelessScope``),
the columns of a score, and which input axis holds the channels. No TensorFlow is imported."""

import functools
import os
import pathlib
import subprocess
import sys

import keras
import pytest

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "jax", reason="runs in the JAX process: KERAS_BACKEND=jax pytest tests/backends"
)

jax = pytest.importorskip("jax")  # a TensorFlow-only install has no JAX
import numpy as np  # noqa: E402

from saliency_kit.model.input_axes import traced_channel_axis  # noqa: E402
from saliency_kit.model.scores import ScoreView, callable_columns, score_columns  # noqa: E402
from saliency_kit.model.squash import traced_squash  # noqa: E402

RNG = np.random.default_rng(7)
ops = keras.ops


def softmax_by_hand(t):
    e = ops.exp(t - ops.max(t, axis=-1, keepdims=True))
    return e / ops.sum(e, axis=-1, keepdims=True)


def _head(inputs, squash):
    """``(output ending in squash, logits)`` after a Dense layer of 3 units on ``inputs``."""
    dense = keras.layers.Dense(3, name="head")
    logits = dense(inputs)
    return squash(logits), logits


SQUASHES = {
    "activation_softmax": lambda h: keras.layers.Activation("softmax")(h),
    "softmax_layer": lambda h: keras.layers.Softmax()(h),
    "lambda_ops_sigmoid": lambda h: keras.layers.Lambda(lambda t: ops.sigmoid(t))(h),
    "softmax_by_hand": lambda h: keras.layers.Lambda(softmax_by_hand)(h),
    "then_reshape": lambda h: keras.layers.Reshape((3,))(keras.layers.Activation("sigmoid")(h)),
    "then_dropout": lambda h: keras.layers.Dropout(0.5)(keras.layers.Softmax()(h)),
    "jax_nn_softmax": lambda h: keras.layers.Lambda(lambda t: jax.nn.softmax(t))(h),
}


class Classifier(keras.Model):
    """A subclassed model ending in a softmax."""

    def __init__(self):
        super().__init__()
        self.hidden = keras.layers.Dense(5, activation="tanh")
        self.head = keras.layers.Dense(3)

    def call(self, t):
        return ops.softmax(self.head(self.hidden(t)))

    def logits(self, t):
        return self.head(self.hidden(t))


@functools.cache
def _models():
    """``{name: (model, twin)}``: ``twin`` computes the values before the squash from the same layers."""
    made = {}
    for name, squash in SQUASHES.items():
        inputs = keras.Input((4,))
        hidden = keras.layers.Dense(6, activation="relu")(inputs)
        output, logits = _head(hidden, squash)
        made[name] = (keras.Model(inputs, output), keras.Model(inputs, logits))
    for activation in ("softmax", "sigmoid"):
        inputs = keras.Input((4,))
        dense = keras.layers.Dense(3, activation=activation)
        model = keras.Model(inputs, dense(inputs))
        made[f"fused_{activation}"] = (model, lambda t, dense=dense: ops.matmul(t, dense.kernel) + dense.bias)
    inputs = keras.Input((4,))
    inner_output, inner_logits = _head(keras.layers.Dense(6, activation="relu")(inputs), keras.layers.Softmax())
    inner = keras.Model(inputs, inner_output, name="inner")
    outer_inputs = keras.Input((4,))
    made["nested"] = (keras.Model(outer_inputs, inner(outer_inputs)), keras.Model(inputs, inner_logits))
    classifier = Classifier()
    classifier(np.zeros((1, 4), "float32"))
    made["subclassed"] = (classifier, classifier.logits)
    return made


MODEL_NAMES = [*SQUASHES, "fused_softmax", "fused_sigmoid", "nested", "subclassed"]
X = RNG.normal(size=(5, 4)).astype("float32")


def _stateless(model, values, fn, *args):
    with keras.StatelessScope(state_mapping=list(zip(model.variables, values))):
        return fn(*args)


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_the_logits_behind_the_squash_eagerly(name):
    model, twin = _models()[name]
    view = ScoreView(model, "logits")
    assert view.strips_activation and view.differentiated == "logits"
    np.testing.assert_allclose(np.asarray(view(X)), np.asarray(twin(X)), rtol=1e-5, atol=1e-6)
    assert not np.allclose(np.asarray(view(X)), np.asarray(model(X)), atol=1e-3)


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_the_logits_inside_jit_read_the_variables_passed_as_arguments(name):
    model, twin = _models()[name]
    view = ScoreView(model, "logits")
    values = [np.asarray(v.value) * 1.5 if v.dtype == "float32" else v.value for v in model.variables]

    @jax.jit
    def kernel(values, x):
        return _stateless(model, values, view, x)

    expected = np.asarray(_stateless(model, values, twin, X))  # the twin on the same passed values
    np.testing.assert_allclose(np.asarray(kernel(values, X)), expected, rtol=1e-5, atol=1e-6)
    assert not np.allclose(expected, np.asarray(twin(X)), atol=1e-3)  # not the stored values


def test_the_gradient_of_a_logit_inside_jit_is_the_weights_column():
    model, _ = _models()["fused_softmax"]
    view = ScoreView(model, "logits")
    kernel, bias = (np.asarray(v.value) for v in model.layers[-1].weights)

    @jax.jit
    def gradient(values, x):
        return jax.grad(lambda x: _stateless(model, values, view, x)[:, 1].sum())(x)

    got = np.asarray(gradient([v.value for v in model.variables], X))
    np.testing.assert_allclose(got, np.tile(kernel[:, 1], (len(X), 1)), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(view(X)), X @ kernel + bias, rtol=1e-5, atol=1e-6)  # NumPy


def test_a_squash_inside_a_jitted_function_is_looked_behind_and_what_follows_applies():
    scaled = jax.jit(lambda t: jax.nn.softmax(2.0 * t))
    inputs = keras.Input((4,))
    logits = keras.layers.Dense(3)(inputs)
    model = keras.Model(inputs, keras.layers.Lambda(lambda t: ops.reshape(scaled(t), (-1, 3, 1)))(logits))
    twin = keras.Model(inputs, logits)
    view = ScoreView(model, "logits")
    assert view.strips_activation
    expected = 2.0 * np.asarray(twin(X))[..., None]
    np.testing.assert_allclose(np.asarray(view(X)), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(jax.jit(view)(X)), expected, rtol=1e-5, atol=1e-6)


def test_a_model_without_a_squash_keeps_its_output():
    inputs = keras.Input((4,))
    model = keras.Model(inputs, keras.layers.Dense(3, activation="tanh")(inputs))
    view = ScoreView(model, "logits")
    assert not view.strips_activation
    np.testing.assert_allclose(np.asarray(view(X)), np.asarray(model(X)), rtol=1e-6)


def test_a_softmax_over_another_axis_is_not_final():
    inputs = keras.Input((4,))
    h = keras.layers.Dense(3)(inputs)
    model = keras.Model(inputs, keras.layers.Lambda(lambda t: ops.softmax(t, axis=0))(h))
    assert not ScoreView(model, "logits").strips_activation


def test_a_squash_behind_a_rule_of_its_own_is_opaque_and_said_once():
    @jax.custom_jvp
    def scaled_softmax(t):
        return jax.nn.softmax(2.0 * t)

    scaled_softmax.defjvp(lambda primals, tangents: jax.jvp(lambda t: jax.nn.softmax(2.0 * t), primals, tangents))
    assert traced_squash(scaled_softmax, [((None, 3), "float32")]) == ("opaque", "softmax")
    inputs = keras.Input((4,))
    model = keras.Model(inputs, keras.layers.Lambda(scaled_softmax)(keras.layers.Dense(3)(inputs)))
    with pytest.warns(UserWarning, match="cannot be reached"):
        view = ScoreView(model, "logits")
    assert view.differentiated == "output"
    np.testing.assert_allclose(np.asarray(view(X)), np.asarray(model(X)), rtol=1e-6)


def test_traced_squash_names_the_squash():
    assert traced_squash(ops.sigmoid, [((None, 3), "float32")]) == ("traced", "sigmoid")
    assert traced_squash(softmax_by_hand, [((None, 3), "float32")]) == ("traced", "softmax")
    assert traced_squash(lambda t: 1.0 / (1.0 + ops.exp(-t)), [((None, 3), "float32")]) == ("traced", "sigmoid")
    assert traced_squash(ops.tanh, [((None, 3), "float32")]) is None


def test_score_columns_and_callable_columns():
    model, _ = _models()["fused_softmax"]
    assert score_columns(model) == 3
    assert score_columns(_models()["subclassed"][0]) == 3
    assert callable_columns(model, lambda out: out[:, 0]) == 1
    assert callable_columns(model, lambda out: out[:, :2] * 2.0) == 2
    with pytest.raises(ValueError, match=r"must return a \[B\] or \[B, K\] tensor"):
        callable_columns(model, lambda out: ops.sum(out))
    with pytest.raises(ValueError, match="targets callable failed on outputs of shape"):
        callable_columns(model, lambda out: out[:, :, 0])


def _functional(shape, layers):
    inputs = keras.Input(shape)
    h = inputs
    for layer in layers:
        h = layer(h)
    return keras.Model(inputs, h)


class FromTorch(keras.Model):
    """A subclassed model taking ``[B, C, H, W]`` and transposing before channels-last convolutions."""

    def __init__(self):
        super().__init__()
        self.conv = keras.layers.Conv2D(4, 3)

    def call(self, t):
        return self.conv(ops.transpose(t, (0, 2, 3, 1)) * 2.0)


def test_the_channel_axis_is_followed_through_transposes_to_the_first_convolution():
    channels_last = _functional((8, 8, 3), [keras.layers.Conv2D(4, 3), keras.layers.GlobalAveragePooling2D()])
    assert traced_channel_axis(channels_last, (8, 8, 3), "float32").axis == 3
    converted = _functional(
        (3, 8, 8), [keras.layers.Permute((2, 3, 1)), keras.layers.Conv2D(4, 3), keras.layers.Flatten()]
    )
    found = traced_channel_axis(converted, (3, 8, 8), "float32")
    assert (found.axis, found.moved, found.unsure) == (1, True, False)
    channels_first = _functional((3, 8, 8), [keras.layers.Conv2D(4, 3, data_format="channels_first")])
    assert traced_channel_axis(channels_first, (3, 8, 8), "float32").axis == 1
    pooled_first = _functional(
        (3, 8, 8), [keras.layers.Lambda(lambda t: ops.transpose(t, (0, 2, 3, 1))), keras.layers.MaxPooling2D()]
    )
    assert traced_channel_axis(pooled_first, (3, 8, 8), "float32").axis == 1
    subclassed = FromTorch()
    subclassed(np.zeros((1, 3, 8, 8), "float32"))
    found = traced_channel_axis(subclassed, (3, 8, 8), "float32")
    assert (found.axis, found.moved) == (1, True)
    tabular = _functional((5,), [keras.layers.Dense(2)])
    assert traced_channel_axis(tabular, (5,), "float32").axis is None


def test_a_reshape_before_the_first_convolution_is_unsure():
    model = _functional((192,), [keras.layers.Reshape((8, 8, 3)), keras.layers.Conv2D(4, 3)])
    found = traced_channel_axis(model, (192,), "float32")
    assert found.axis is None and found.unsure


NO_TENSORFLOW = """
import sys
import jax, keras, numpy as np
from saliency_kit.model.input_axes import traced_channel_axis
from saliency_kit.model.scores import ScoreView, callable_columns
inputs = keras.Input((4,))
model = keras.Model(inputs, keras.layers.Softmax()(keras.layers.Dense(3, activation="sigmoid")(inputs)))
fused = keras.Model(inputs, keras.layers.Dense(3, activation="softmax")(inputs))
x = np.ones((2, 4), "float32")
for m in (model, fused):
    view = ScoreView(m, "logits")
    assert view.strips_activation
    view(x)
    jax.jit(view)(x)
assert callable_columns(model, lambda out: out[:, :2]) == 2
converted = keras.Sequential([keras.Input((3, 8, 8)), keras.layers.Permute((2, 3, 1)), keras.layers.Conv2D(2, 3)])
assert traced_channel_axis(converted, (3, 8, 8), "float32").axis == 1
from saliency_kit.model.inspect import channel_axis, derived_state
assert channel_axis(converted, 3, (3, 8, 8)) == 0
normalization = keras.layers.Normalization()
normalization.adapt(np.arange(12, dtype="float32").reshape(4, 3))
assert [entry[:3] for entry in derived_state(normalization)] == [("mean", "<f4", (1, 3)), ("variance", "<f4", (1, 3))]
assert "tensorflow" not in sys.modules, "TensorFlow was imported"
"""


def test_the_model_facts_import_no_tensorflow():
    """In a process of its own: the shared test setup seeds through Keras, which imports
    TensorFlow when it is installed."""
    root = pathlib.Path(__file__).resolve().parents[2]
    env = {**os.environ, "KERAS_BACKEND": "jax", "PYTHONPATH": str(root)}
    done = subprocess.run([sys.executable, "-c", NO_TENSORFLOW], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
