"""LRP and DeepLIFT on JAX, checked against NumPy written independently of the library
(:mod:`propagation.numpy_reference`) and against their axioms (DeepLIFT's summation to delta
through attention and layer normalisation), with the model left untouched and later weights seen."""

import json

import keras
import numpy as np
import pytest
from propagation.numpy_reference import RULES, conv_matrix, numpy_deeplift

import saliency_kit as sk
from saliency_kit.propagation import composites
from saliency_kit.propagation.lrp import rewrite_lrp
from saliency_kit.propagation.lrp_rules import Epsilon

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "jax", reason="runs in the JAX process: KERAS_BACKEND=jax pytest tests/backends"
)

RNG = np.random.default_rng(5)


def input_relevance(rewritten, x, column):
    """The input gradient of ``rewritten``'s output ``column`` (its relevance, ``input_relevance=True``)."""
    import jax

    def score(z):
        return rewritten(z)[:, column].sum()

    return np.asarray(jax.grad(score)(keras.ops.convert_to_tensor(x)))


def rule_id(case):
    rule_class, configuration, reference = case
    return f"{rule_class.__name__}({', '.join(f'{k}={v}' for k, v in configuration.items())})-{reference.__name__}"


@pytest.mark.parametrize("case", RULES, ids=rule_id)
def test_each_rule_on_a_dense_layer_matches_numpy(case):
    rule_class, configuration, reference = case
    W = RNG.normal(size=(5, 3)).astype(np.float32)
    b = np.array([0.3, -0.2, 0.1], np.float32)
    model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(3)])
    model.layers[0].set_weights([W, b])
    x = RNG.uniform(-1, 1, size=(2, 5)).astype(np.float32)
    rule = rule_class(**configuration)
    rewritten = rewrite_lrp(model, composites.Composite({keras.layers.Dense: rule}), input_relevance=True)
    for column in range(3):
        got = input_relevance(rewritten, x, column)
        for row in range(2):
            z = x[row].astype(np.float64) @ W + b
            R = np.where(np.arange(3) == column, z, 0.0)
            want = reference(x[row].astype(np.float64), W.astype(np.float64), b.astype(np.float64), R,
                             np.ones(W.shape), **configuration)  # fmt: skip
            np.testing.assert_allclose(got[row], want, rtol=2e-4, atol=2e-5)


def test_epsilon_on_a_convolution_matches_numpy():
    kernel = RNG.normal(size=(2, 2, 2, 3)).astype(np.float32)
    bias = np.array([0.2, -0.1, 0.05], np.float32)
    model = keras.Sequential([keras.Input((4, 4, 2)), keras.layers.Conv2D(3, 2), keras.layers.Flatten()])
    model.layers[0].set_weights([kernel, bias])
    x = RNG.uniform(-1, 1, size=(1, 4, 4, 2)).astype(np.float32)
    configuration, reference = next((c, r) for cls, c, r in RULES if cls is Epsilon)
    rewritten = rewrite_lrp(
        model, composites.Composite({keras.layers.Conv2D: Epsilon(**configuration)}), input_relevance=True
    )
    W, S = conv_matrix(kernel.astype(np.float64), 4, 4)
    b = np.tile(bias.astype(np.float64), 9)
    z = x.reshape(-1).astype(np.float64) @ W + b
    for column in (0, 13, 26):
        got = input_relevance(rewritten, x, column).reshape(-1)
        R = np.where(np.arange(z.size) == column, z, 0.0)
        want = reference(x.reshape(-1).astype(np.float64), W, b, R, S, **configuration)
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-5)


def _chain(rng):
    W1, b1 = rng.normal(size=(6, 8)), rng.normal(size=8) * 0.3
    W2, b2 = rng.normal(size=(4, 5)), rng.normal(size=5) * 0.3
    inp = keras.Input((6,))
    h = keras.layers.Dense(8, activation="relu")(inp)
    h = keras.layers.Reshape((4, 2))(h)
    h = keras.layers.MaxPooling1D(2, data_format="channels_first")(h)  # pools pairs of units
    h = keras.layers.Flatten()(h)
    model = keras.Model(inp, keras.layers.Dense(5)(h))
    model.layers[1].set_weights([W1.astype(np.float32), b1.astype(np.float32)])
    model.layers[-1].set_weights([W2.astype(np.float32), b2.astype(np.float32)])
    return model, [("dense", W1, b1), ("relu",), ("maxpool", 2), ("dense", W2, b2)]


def test_deeplift_matches_numpy_and_sums_to_delta():
    rng = np.random.default_rng(11)
    model, layers = _chain(rng)
    x = rng.normal(size=(3, 6)).astype(np.float32)
    baseline = np.float32(0.1) * rng.normal(size=6).astype(np.float32)
    explanation = sk.explain(model, x, method="deeplift", targets=[[0, 3]] * 3, baseline=baseline)
    scores = np.asarray(model(x))
    base_scores = np.asarray(model(np.broadcast_to(baseline, x.shape)))
    for row in range(3):
        for k, column in enumerate((0, 3)):
            want = numpy_deeplift(layers, x[row].astype(np.float64), baseline.astype(np.float64), column)
            np.testing.assert_allclose(explanation.attributions[row, k], want, rtol=1e-4, atol=1e-5)
            gap = explanation.attributions[row, k].sum() - (scores[row, column] - base_scores[row, column])
            assert abs(gap) < 1e-4


def test_later_weights_are_seen_and_the_model_is_untouched():
    rng = np.random.default_rng(3)
    model, _ = _chain(rng)
    x = rng.normal(size=(2, 6)).astype(np.float32)
    config, weights = json.dumps(model.get_config(), sort_keys=True), [w.copy() for w in model.get_weights()]
    before = np.asarray(model(x))
    sk.explain(model, x, method="deeplift", targets=[1, 2])
    assert json.dumps(model.get_config(), sort_keys=True) == config
    assert all(np.array_equal(a, b) for a, b in zip(model.get_weights(), weights))
    np.testing.assert_array_equal(np.asarray(model(x)), before)

    W1, b1 = rng.normal(size=(6, 8)), rng.normal(size=8) * 0.3
    W2, b2 = rng.normal(size=(4, 5)), rng.normal(size=5) * 0.3
    model.layers[1].set_weights([W1.astype(np.float32), b1.astype(np.float32)])
    model.layers[-1].set_weights([W2.astype(np.float32), b2.astype(np.float32)])
    layers = [("dense", W1, b1), ("relu",), ("maxpool", 2), ("dense", W2, b2)]
    got = sk.explain(model, x, method="deeplift", targets=[1, 2]).attributions
    for row, column in enumerate((1, 2)):
        want = numpy_deeplift(layers, x[row].astype(np.float64), np.zeros(6), column)
        np.testing.assert_allclose(got[row, 0], want, rtol=1e-4, atol=1e-5)


def _transformer(rng, biases=True):
    tokens, width = 5, 8
    inp = keras.Input((tokens, width))
    attended = keras.layers.MultiHeadAttention(num_heads=2, key_dim=4)(inp, inp)
    h = keras.layers.LayerNormalization()(keras.layers.Add()([inp, attended]))
    h = keras.layers.Dense(12, activation="gelu")(h)
    h = keras.layers.Dense(width)(h)
    h = keras.layers.GlobalAveragePooling1D()(h)
    model = keras.Model(inp, keras.layers.Dense(3, activation="tanh")(h))
    for variable in model.weights:
        keep = biases or "bias" not in variable.path or "norm" in variable.path
        value = rng.normal(scale=0.4, size=variable.shape) if keep else np.zeros(variable.shape)
        variable.assign(value.astype(np.float32))
    return model


@pytest.mark.parametrize("case", ["random baseline", "zero baseline, zero biases"])
def test_deeplift_sums_to_delta_through_attention_and_layer_norm(case):
    """Also where the layer norm's input at the baseline has no variance (zero baseline, zero biases)."""
    rng = np.random.default_rng(2)
    model = _transformer(rng, biases=case == "random baseline")
    x = rng.normal(size=(2, 5, 8)).astype(np.float32)
    baseline = np.float32(0.2) * rng.normal(size=(5, 8)).astype(np.float32)
    if case != "random baseline":
        baseline = np.zeros((5, 8), np.float32)
    explanation = sk.explain(model, x, method="deeplift", targets=[[0, 2]] * 2, baseline=baseline)
    delta = np.asarray(model(x)) - np.asarray(model(np.broadcast_to(baseline, x.shape)))
    sums = explanation.attributions.reshape(2, 2, -1).sum(-1)
    np.testing.assert_allclose(sums, delta[:, [0, 2]], atol=2e-4)
    assert 1e-3 < np.abs(explanation.attributions).max() < 10


def test_lrp_conserves_relevance_through_a_transformer_without_biases():
    rng = np.random.default_rng(4)
    tokens, width = 4, 6
    inp = keras.Input((tokens, width))
    attended = keras.layers.MultiHeadAttention(num_heads=2, key_dim=3, use_bias=False)(inp, inp)
    h = keras.layers.Add()([inp, attended])
    h = keras.layers.Dense(10, activation="relu", use_bias=False)(h)
    h = keras.layers.Flatten()(h)
    model = keras.Model(inp, keras.layers.Dense(2, use_bias=False)(h))
    for variable in model.weights:
        variable.assign(rng.normal(scale=0.5, size=variable.shape).astype(np.float32))
    x = rng.normal(size=(2, tokens, width)).astype(np.float32)
    explanation = sk.explain(model, x, method="lrp", composite="epsilon", epsilon=1e-9, targets=[0, 1])
    scores = np.asarray(model(x))
    sums = explanation.attributions.reshape(2, -1).sum(-1)
    np.testing.assert_allclose(sums, scores[[0, 1], [0, 1]], rtol=1e-4, atol=1e-5)


class Residual(keras.layers.Layer):
    """A custom layer: a dense sublayer and a residual sum (linear around the sublayer)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.inner = keras.layers.Dense(6, activation="relu")

    def call(self, x):
        return x + 0.5 * self.inner(x)


class Squashing(keras.layers.Layer):
    """A custom layer whose call computes a softmax of the explained values itself."""

    def call(self, x):
        return keras.ops.softmax(x, axis=-1) * x


def test_a_linear_custom_layer_is_explained_and_a_nonlinear_one_refused():
    rng = np.random.default_rng(8)
    inp = keras.Input((6,))
    model = keras.Model(inp, keras.layers.Dense(3)(Residual()(inp)))
    for variable in model.weights:
        variable.assign(rng.normal(scale=0.5, size=variable.shape).astype(np.float32))
    x = rng.normal(size=(2, 6)).astype(np.float32)
    baseline = np.zeros(6, np.float32)
    explanation = sk.explain(model, x, method="deeplift", targets=[0, 2], baseline=baseline)
    delta = np.asarray(model(x)) - np.asarray(model(np.zeros_like(x)))
    np.testing.assert_allclose(explanation.attributions.reshape(2, -1).sum(-1), delta[[0, 1], [0, 2]], atol=1e-4)

    inp = keras.Input((6,))
    squashing = keras.Model(inp, keras.layers.Dense(3)(Squashing(name="squash")(inp)))
    with pytest.raises(ValueError) as refused:
        sk.explain(squashing, x, method="lrp", targets=[0, 1])
    line = str(refused.value)
    assert "\n" not in line and "squash" in line and "not linear" in line, line
