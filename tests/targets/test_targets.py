"""Targets (every target form, every error before any work) and scores (logits behind softmax/sigmoid)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import saliency_kit as sk
from saliency_kit import engine
from saliency_kit.model.scores import callable_columns
from saliency_kit.pipeline.api import resolve_targets
from saliency_kit.targets import parse, resolve

B, F, C = 4, 5, 3


@pytest.fixture(scope="module")
def linear():
    """Logits z = x W + b, then a separate softmax: the logits' gradient is a column of W."""
    keras.utils.set_random_seed(7)
    inputs = keras.Input((F,))
    logits = keras.layers.Dense(C, name="dense")(inputs)
    model = keras.Model(inputs, keras.layers.Activation("softmax")(logits))
    x = np.random.default_rng(0).normal(size=(B, F)).astype("float32")
    return model, x


# -- parsing ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "targets, expected",
    [
        (2, [[2]] * B),
        ([0, 1, 2, 0], [[0], [1], [2], [0]]),
        (np.array([[0, 2], [1, 0], [2, 2], [0, 1]]), [[0, 2], [1, 0], [2, 2], [0, 1]]),
        ((1, 1, 1, 1), [[1]] * B),
    ],
)
def test_class_targets(targets, expected):
    spec = parse(targets, B, C)
    np.testing.assert_array_equal(resolve(spec, num_inputs=B), expected)


def test_top_k_is_best_first():
    scores = np.array([[0.1, 0.7, 0.2], [3.0, -1.0, 2.0]])
    spec = parse("top2", 2, C)
    np.testing.assert_array_equal(resolve(spec, scores), [[1, 2], [0, 2]])


@pytest.mark.parametrize(
    "targets, message",
    [
        (3, "out of range"),
        (-1, "out of range"),
        ([0, 1], "sequence of 4 ints"),
        ([0, 1, 2, 9], "out of range"),
        ([0.5, 1, 1, 1], "integer"),
        (np.zeros((B, 1, 1), int), "array"),
        (np.zeros((B + 1, 2), int), "array"),
        ("top0", "look like"),
        ("best3", "look like"),
        ("top4", "asks for 4 classes"),
        ([[0], [1, 2], [0], [0]], "could not be read|integer|array"),
    ],
)
def test_bad_targets_raise_before_any_work(linear, targets, message):
    model, x = linear
    calls = engine.call_count()
    with pytest.raises(ValueError, match=message):
        sk.explain(model, x, "gradient", targets)
    assert engine.call_count() == calls  # nothing was evaluated


def test_a_boolean_or_float_target_is_a_type_error(linear):
    model, x = linear
    with pytest.raises(TypeError, match="not a boolean; received True"):
        sk.explain(model, x, "gradient", True)
    with pytest.raises(TypeError, match="not a float; received 2.0"):
        sk.explain(model, x, "gradient", 2.0)


def test_callable_target_shape_is_checked_symbolically(linear):
    model, x = linear
    calls = engine.call_count()
    with pytest.raises(ValueError, match=r"\[B\] or \[B, K\]"):
        sk.explain(model, x, "gradient", lambda z: tf.reduce_sum(z))
    assert engine.call_count() == calls
    assert callable_columns(model, lambda z: z[:, :2]) == 2
    assert callable_columns(model, lambda z: z[:, 0]) == 1


def test_callable_target_differentiates_its_score(linear):
    model, x = linear
    w = model.get_layer("dense").kernel.numpy()
    expl = sk.explain(model, x, "gradient", lambda logits: logits[:, 0] - 2.0 * logits[:, 2])
    np.testing.assert_array_equal(expl.targets, np.zeros((B, 1)))
    np.testing.assert_allclose(expl.attributions[:, 0], np.tile(w[:, 0] - 2 * w[:, 2], (B, 1)), atol=1e-6)
    two = sk.explain(model, x, "gradient", lambda logits: tf.stack([logits[:, 1], logits[:, 0]], axis=1))
    np.testing.assert_array_equal(two.targets, [[0, 1]] * B)
    np.testing.assert_allclose(two.attributions[:, 0], np.tile(w[:, 1], (B, 1)), atol=1e-6)


def test_top_k_targets_follow_the_model(linear):
    model, x = linear
    expl = sk.explain(model, x, "gradient", "top3")
    probabilities = model.predict(x, verbose=0)
    np.testing.assert_array_equal(expl.targets, np.argsort(-probabilities, axis=1))
    np.testing.assert_array_equal(resolve_targets(model, engine.check_inputs(model, x), "top3"), expl.targets)
    np.testing.assert_array_equal(resolve_targets(model, x, [2, 1, 0, 2]), [[2], [1], [0], [2]])
    np.testing.assert_array_equal(resolve_targets(model, x, lambda z: z[:, :2]), [[0, 1]] * B)
    w, b = model.get_layer("dense").kernel.numpy(), model.get_layer("dense").bias.numpy()
    np.testing.assert_allclose(expl.scores, np.take_along_axis(x @ w + b, expl.targets, 1), atol=1e-5)


# -- logits behind softmax / sigmoid --------------------------------------------------------------
def _dense_then(kind):
    keras.utils.set_random_seed(3)
    inputs = keras.Input((F,))
    if kind == "fused_softmax":
        return keras.Model(inputs, keras.layers.Dense(C, activation="softmax", name="dense")(inputs))
    if kind == "fused_sigmoid":
        return keras.Model(inputs, keras.layers.Dense(C, activation="sigmoid", name="dense")(inputs))
    if kind == "fused_tf_softmax":
        return keras.Model(inputs, keras.layers.Dense(C, activation=tf.nn.softmax, name="dense")(inputs))
    logits = keras.layers.Dense(C, name="dense")(inputs)
    if kind == "activation_softmax":
        return keras.Model(inputs, keras.layers.Activation("softmax")(logits))
    if kind == "softmax_layer":
        return keras.Model(inputs, keras.layers.Softmax()(logits))
    if kind == "ops_sigmoid":
        return keras.Model(inputs, keras.ops.sigmoid(logits))
    if kind == "sequential_fused":
        return keras.Sequential([keras.Input((F,)), keras.layers.Dense(C, activation="softmax", name="dense")])
    if kind == "nested_head":
        head_in = keras.Input((F,))
        head = keras.Model(head_in, keras.layers.Dense(C, activation="softmax", name="dense")(head_in), name="head")
        return keras.Model(inputs, head(inputs))
    raise AssertionError(kind)


KINDS = [
    "fused_softmax",
    "fused_sigmoid",
    "fused_tf_softmax",
    "activation_softmax",
    "softmax_layer",
    "ops_sigmoid",
    "sequential_fused",
    "nested_head",
]


@pytest.mark.parametrize("kind", KINDS)
def test_logits_gradient_is_the_weight_column(kind):
    model = _dense_then(kind)
    dense = model.get_layer("head").get_layer("dense") if kind == "nested_head" else model.get_layer("dense")
    before = [w.copy() for w in model.get_weights()]
    x = np.random.default_rng(1).normal(size=(B, F)).astype("float32")
    reference = model.predict(x, verbose=0)
    expl = sk.explain(model, x, "gradient", [0, 1, 2, 1])
    w = dense.kernel.numpy()
    np.testing.assert_allclose(expl.attributions[:, 0], w.T[[0, 1, 2, 1]], atol=1e-6)
    logits = x @ w + dense.bias.numpy()
    np.testing.assert_allclose(expl.scores[:, 0], logits[np.arange(B), [0, 1, 2, 1]], atol=1e-5)
    # the user's model is unchanged: same activation, same weights, same outputs
    assert dense.activation.__name__ in ("softmax", "softmax_v2", "sigmoid", "linear")
    np.testing.assert_array_equal(model.predict(x, verbose=0), reference)
    for a, b in zip(before, model.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_score_output_differentiates_the_probabilities():
    model = _dense_then("fused_softmax")
    x = np.random.default_rng(2).normal(size=(B, F)).astype("float32")
    w = model.get_layer("dense").kernel.numpy()
    p = model.predict(x, verbose=0)
    expl = sk.explain(model, x, "gradient", 1, score="output")
    # ∂p_1/∂x = p_1 (w_1 − Σ_j p_j w_j), by hand
    expected = p[:, 1:2] * (w[:, 1][None] - p @ w.T)
    np.testing.assert_allclose(expl.attributions[:, 0], expected, atol=1e-6)
    np.testing.assert_allclose(expl.scores[:, 0], p[:, 1], atol=1e-6)


def test_logits_follow_later_weight_changes():
    model = _dense_then("fused_softmax")
    x = np.ones((1, F), "float32")
    sk.explain(model, x, "gradient", 0)
    dense = model.get_layer("dense")
    dense.kernel.assign(dense.kernel.numpy() * 3.0)
    expl = sk.explain(model, x, "gradient", 0)
    np.testing.assert_allclose(expl.attributions[0, 0], dense.kernel.numpy()[:, 0], atol=1e-6)


def test_bad_score_and_inputs(linear):
    model, x = linear
    with pytest.raises(ValueError, match="score must be"):
        sk.explain(model, x, score="probabilities")
    with pytest.raises(ValueError, match=r"shape \[B, 5\]"):
        sk.explain(model, x[:, :4])
    with pytest.raises(TypeError, match="floating point"):
        sk.explain(model, (x * 100).astype(np.uint8))
    with pytest.raises(ValueError, match="unknown method"):
        sk.explain(model, x, "saliency")
    with pytest.raises(ValueError, match="no option 'steps'"):
        sk.explain(model, x, "gradient", steps=3)
    with pytest.raises(ValueError, match="batch_size"):
        sk.explain(model, x, batch_size=0)


def test_resolve_without_the_number_of_inputs_says_what_it_needs():
    with pytest.raises(ValueError, match="num_inputs"):
        resolve(parse(2, B, C))
    with pytest.raises(TypeError, match="as_target"):
        parse(lambda outputs: outputs, B, C)  # a callable is a target of its own


def test_a_target_request_without_a_forward_pass_says_so():
    from saliency_kit.targets import TargetRequest

    request = TargetRequest(model=None, inputs=np.zeros((2, 3), np.float32))
    with pytest.raises(ValueError, match="forward"):
        request.clean_outputs()
