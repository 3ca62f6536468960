"""The transformer rules: each alone against NumPy on small random tensors, then a small
functional transformer of plain ``keras.layers.MultiHeadAttention`` and ``LayerNormalization``
(LRP against gradient × input of a stop-gradient twin written from its weights, DeepLIFT against
its rules by hand in NumPy, both against their axioms), and the same block as a custom layer."""

import math

import keras
import numpy as np
import pytest
import tensorflow as tf
from propagation import transformer_reference as reference

import saliency_kit as sk
from saliency_kit.propagation import composites
from saliency_kit.propagation.elementwise import activation_family
from saliency_kit.propagation.gates import SharedReference, interleave, midpoint_gate, rescale_gate
from saliency_kit.propagation.lrp import rewrite_lrp
from saliency_kit.propagation.products import bilinear_gate
from saliency_kit.propagation.transformer import LayerNormLayer

RNG = np.random.default_rng(0)
T, H, HEADS = 5, 8, 2


def gradient(f, x, dy):
    x = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = f(x)
    return tape.gradient(y, x, output_gradients=tf.constant(dy)).numpy()


def interleaved(f, x, x0, dy):
    """The input rows' gradient of ``f`` on rows ``[x_0, x0_0, x_1, ...]``, ``dy`` in the input rows."""
    rows = interleave(tf.constant(x), tf.constant(x0))
    g = gradient(f, rows.numpy(), interleave(tf.constant(dy), tf.zeros_like(tf.constant(dy))).numpy())
    assert np.all(g[1::2] == 0)  # the reference rows get nothing
    return g[0::2]


# ------------------------------------------------------------------------------ each rule alone


def test_midpoint_gate_on_softmax_is_the_rescaled_midpoint_jacobian_and_sums_to_delta():
    s, s0 = RNG.normal(size=(3, 4, 6)), RNG.normal(size=(3, 4, 6))
    dy = RNG.normal(size=(3, 4, 6))
    got = interleaved(lambda t: midpoint_gate(lambda u: tf.nn.softmax(u, -1), t), s, s0, dy)
    expected = np.zeros_like(s)
    for index in np.ndindex(s.shape[:-1]):
        pm = reference.softmax((s[index] + s0[index]) / 2)
        jacobian = np.diag(pm) - np.outer(pm, pm)
        delta_p = reference.softmax(s[index]) - reference.softmax(s0[index])
        expected[index] = reference._rescaled_jacobian(dy[index], jacobian, s[index] - s0[index], delta_p)
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-12)
    delta_y = reference.softmax(s) - reference.softmax(s0)
    np.testing.assert_allclose(((s - s0) * got).sum(-1), (dy * delta_y).sum(-1), rtol=1e-9, atol=1e-12)
    # not the plain gradient at x, nor at the midpoint
    assert np.abs(got - gradient(lambda t: tf.nn.softmax(t, -1), s, dy)).max() > 1e-3


def test_midpoint_gate_against_a_shared_reference_equals_the_interleaved_rows():
    x, x0, dy = RNG.normal(size=(3, 6)), RNG.normal(size=(1, 6)), RNG.normal(size=(3, 6))

    def f(t):
        return tf.nn.softmax(2 * t, -1)

    shared = SharedReference()
    with shared.record():
        midpoint_gate(f, tf.constant(x0), site="softmax")
    with shared.replay():
        got = gradient(lambda t: midpoint_gate(f, t, site="softmax"), x, dy)
    np.testing.assert_allclose(got, interleaved(lambda t: midpoint_gate(f, t), x, np.repeat(x0, 3, 0), dy), rtol=1e-12)


def test_layer_norm_rules_against_numpy():
    layer = keras.layers.LayerNormalization(epsilon=1e-3, dtype="float64")
    layer.build((None, H))
    layer.set_weights([RNG.normal(size=H), RNG.normal(size=H)])
    norm = reference.Norm(*layer.get_weights(), 1e-3)
    x, x0, dy = RNG.normal(size=(4, H)), RNG.normal(size=(4, H)), RNG.normal(size=(4, H))
    # DeepLIFT: the exact split of the difference, Δy = A Δx (the reference writes A out)
    deeplift = LayerNormLayer(layer, "deeplift")
    got = interleaved(deeplift, x, x0, dy)
    np.testing.assert_allclose(got, reference._layer_norm_multipliers(norm, x, x0, dy), rtol=1e-7, atol=1e-9)
    delta_y = reference.layer_norm(norm, x) - reference.layer_norm(norm, x0)
    np.testing.assert_allclose(((x - x0) * got).sum(-1), (delta_y * dy).sum(-1), rtol=1e-9)
    # LRP: 1/σ constant, so the gradient is γ/σ (I − 1/n) dy, and with to_relevance x times it
    lrp = LayerNormLayer(layer, "lrp")
    sigma = np.sqrt(x.var(-1, keepdims=True) + 1e-3)
    plain = norm.gamma * dy / sigma
    expected = plain - plain.mean(-1, keepdims=True)
    np.testing.assert_allclose(gradient(lrp, x, dy), expected, rtol=1e-9)
    lrp.to_relevance = True
    relevance = gradient(lrp, x, dy)
    np.testing.assert_allclose(relevance, x * expected, rtol=1e-9)
    # conservation: what reaches x is the output's relevance less β's share
    y = reference.layer_norm(norm, x)
    np.testing.assert_allclose(relevance.sum(-1), ((y - norm.beta) * dy).sum(-1), rtol=1e-9)


def test_layer_norm_deeplift_against_a_reference_of_zero_variance():
    """A reference whose layer norm input is constant (a zero baseline before a block with zero
    biases): the multipliers are γ·s·(I − 1/n) dy, bounded, and sum to delta in float32, where
    the midpoint Jacobian, taken where the map has saturated, gave multipliers of 3e4 and sums
    off by 5e-3."""
    layer = keras.layers.LayerNormalization(epsilon=1e-5)
    layer.build((None, H))
    gamma, beta = RNG.normal(size=H).astype(np.float32), RNG.normal(size=H).astype(np.float32)
    layer.set_weights([gamma, beta])
    x = RNG.normal(size=(4, H)).astype(np.float32)
    x0 = np.full((4, H), 0.3, np.float32)  # constant: zero variance
    dy = RNG.normal(size=(4, H)).astype(np.float32)
    got = interleaved(LayerNormLayer(layer, "deeplift"), x, x0, dy)
    c = x - x.mean(-1, keepdims=True)
    s = 1 / np.sqrt((c.astype(np.float64) ** 2).mean(-1, keepdims=True) + 1e-5)
    plain = gamma * dy * s
    np.testing.assert_allclose(got, plain - plain.mean(-1, keepdims=True), rtol=1e-4, atol=1e-5)
    delta_y = np.asarray(layer(x)) - np.asarray(layer(x0))
    np.testing.assert_allclose(((x - x0) * got).sum(-1), (delta_y * dy).sum(-1), rtol=1e-4, atol=1e-4)


def test_bilinear_gate_splits_an_einsum_exactly():
    a, a0 = RNG.normal(size=(2, 3, 4)), RNG.normal(size=(2, 3, 4))
    b, b0 = RNG.normal(size=(2, 4, 5)), RNG.normal(size=(2, 4, 5))
    dy = RNG.normal(size=(2, 3, 5))

    def f(p, q):
        return tf.einsum("bij,bjk->bik", p, q)

    rows_a, rows_b = interleave(tf.constant(a), tf.constant(a0)), interleave(tf.constant(b), tf.constant(b0))
    with tf.GradientTape() as tape:
        tape.watch([rows_a, rows_b])
        y = bilinear_gate(f, rows_a, rows_b)
    ga, gb = tape.gradient(y, [rows_a, rows_b], output_gradients=interleave(tf.constant(dy), tf.zeros_like(dy)))
    ga, gb = ga.numpy(), gb.numpy()
    assert np.all(ga[1::2] == 0) and np.all(gb[1::2] == 0)
    np.testing.assert_allclose(ga[0::2], np.einsum("bik,bjk->bij", dy, (b + b0) / 2), rtol=1e-12)
    np.testing.assert_allclose(gb[0::2], np.einsum("bik,bij->bjk", dy, (a + a0) / 2), rtol=1e-12)
    total = ((a - a0) * ga[0::2]).sum((1, 2)) + ((b - b0) * gb[0::2]).sum((1, 2))
    np.testing.assert_allclose(total, (dy * (a @ b - a0 @ b0)).sum((1, 2)), rtol=1e-12)


@pytest.mark.parametrize("name", ["gelu", "tanh", "silu"])
def test_rescale_on_smooth_activations_is_delta_y_over_delta_x(name):
    family = activation_family(getattr(keras.activations, name))
    assert family is not None and family.name in (name, "swish")  # keras' silu is its swish
    x, x0, dy = RNG.normal(size=(3, 7)), RNG.normal(size=(3, 7)), RNG.normal(size=(3, 7))
    x0[0, 0] = x[0, 0]  # no difference: the derivative
    f = {"gelu": lambda t: 0.5 * t * (1 + np.vectorize(math.erf)(t / math.sqrt(2))), "tanh": np.tanh}
    f["silu"] = lambda t: t / (1 + np.exp(-t))
    got = interleaved(lambda t: rescale_gate(family, t), x, x0, dy)
    with np.errstate(divide="ignore", invalid="ignore"):
        expected = dy * (f[name](x) - f[name](x0)) / (x - x0)
    expected[0, 0] = gradient(getattr(keras.activations, name), x[:1, :1], dy[:1, :1])[0, 0]
    np.testing.assert_allclose(got, expected, rtol=1e-6)


def test_softmax_and_glu_are_not_taken_for_element_wise_activations():
    for fn in (keras.activations.softmax, keras.activations.glu, keras.activations.log_softmax, lambda t: t):
        assert activation_family(fn) is None


# ------------------------------------------------------------------------------ a functional transformer


def transformer(seed=0, dtype="float32", biases=True):
    """x [T, H] → layer norm → a post-norm block (plain Keras layers) → first token → tanh pooler → 3 logits."""
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((T, H), dtype=dtype)
    h = keras.layers.LayerNormalization(epsilon=1e-6, name="norm0", dtype=dtype)(inputs)
    attention = keras.layers.MultiHeadAttention(HEADS, H // HEADS, name="attention", dtype=dtype)(h, h)
    h1 = keras.layers.LayerNormalization(epsilon=1e-6, name="norm1", dtype=dtype)(keras.layers.Add()([h, attention]))
    f = keras.layers.Dense(16, activation="gelu", name="ff1", dtype=dtype)(h1)
    f = keras.layers.Dense(H, name="ff2", dtype=dtype)(f)
    h2 = keras.layers.LayerNormalization(epsilon=1e-6, name="norm2", dtype=dtype)(h1 + f)
    pooled = keras.layers.Dense(H, activation="tanh", name="pool", dtype=dtype)(h2[:, 0, :])
    model = keras.Model(inputs, keras.layers.Dense(3, name="logits", dtype=dtype)(pooled))
    rng = np.random.default_rng(seed)

    def value(path, shape):
        if "gamma" in path:
            return 1.0 + 0.3 * rng.normal(size=shape)
        if "bias" in path or "beta" in path:
            return (0.3 if biases else 0.0) * rng.normal(size=shape)
        return 0.5 * rng.normal(size=shape)

    model.set_weights([value(v.path, w.shape) for v, w in zip(model.weights, model.get_weights())])
    return model


def params_of(model):
    g = model.get_layer
    block = reference.block_of(g("attention"), g("norm1"), g("ff1"), g("ff2"), g("norm2"), approximate_gelu=False)
    return reference.Params(reference.norm_of(g("norm0")), [block], g("pool").get_weights(), g("logits").get_weights())


@pytest.fixture(scope="module")
def functional():
    model = transformer()
    x = RNG.normal(size=(3, T, H)).astype("float32")
    return model, x, params_of(model)


def test_the_reference_reproduces_the_functional_transformer(functional):
    model, x, params = functional
    logits = np.stack([reference.forward(params, x[b].astype(np.float64), np.ones(T))[0] for b in range(3)])
    np.testing.assert_allclose(logits, np.asarray(model(x)), atol=1e-5)


def test_lrp_on_the_functional_transformer_is_the_stop_gradient_twins_gradient_times_input(functional):
    model, x, params = functional
    e = sk.explain(model, x, "lrp", targets=[0, 1, 2], composite="epsilon", epsilon=1e-9)
    point = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(point)
        logits = reference.stopped_logits(params, point, np.ones((3, T)))
        score = tf.reduce_sum(logits * tf.one_hot([0, 1, 2], 3))
    relevance = x * tape.gradient(score, point).numpy()
    scale = np.abs(relevance).max()
    assert scale > 0.05
    np.testing.assert_allclose(e.attributions[:, 0], relevance, atol=2e-6 * scale)
    plain = sk.explain(model, x, "gradient_x_input", targets=[0, 1, 2])
    assert np.abs(plain.attributions[:, 0] - relevance).max() > 0.01 * scale


def test_lrp_on_the_functional_transformer_conserves_without_biases():
    model = transformer(seed=1, biases=False)
    x = RNG.normal(size=(3, T, H)).astype("float32")
    e = sk.explain(model, x, "lrp", targets=[0, 1, 2], composite="epsilon", epsilon=1e-9)
    logits = np.asarray(model(x))[np.arange(3), [0, 1, 2]]
    assert np.abs(logits).min() > 0.01
    np.testing.assert_allclose(e.attributions[:, 0].sum(axis=(1, 2)), logits, rtol=1e-4)


@pytest.mark.parametrize("dtype, tolerance", [("float32", 1e-4), ("float64", 1e-6)])
def test_deeplift_on_the_functional_transformer_matches_its_rules_by_hand(dtype, tolerance):
    """One input: the baseline runs on its own (a shared reference), then the inputs. A float64
    model is computed in float64 (its attributions are returned as float32: their rounding is the
    tolerance)."""
    model = transformer(dtype=dtype)
    params = params_of(model)
    x = RNG.normal(size=(3, T, H)).astype(dtype)
    baseline = RNG.normal(size=(T, H)).astype(dtype)
    e = sk.explain(model, x, "deeplift", targets=[0, 1, 2], baseline=baseline)
    delta_s = np.asarray(model(x))[np.arange(3), [0, 1, 2]] - np.asarray(model(baseline[None]))[0, [0, 1, 2]]
    for b in range(3):
        expected = (x[b] - baseline) * reference.deeplift(
            params, x[b].astype(np.float64), baseline.astype(np.float64), np.ones(T), b
        )
        np.testing.assert_allclose(e.attributions[b, 0], expected, atol=5 * tolerance * np.abs(expected).max())
    np.testing.assert_allclose(e.attributions[:, 0].sum(axis=(1, 2)), delta_s, rtol=tolerance)
    assert np.abs(e.completeness_gap).max() <= tolerance * np.abs(delta_s).max()


# ------------------------------------------------------------------------------ the block as a custom layer


class Block(keras.layers.Layer):
    """The functional transformer's block written as a custom layer (its sublayers called in ``call``)."""

    def __init__(self, extra=None, **kwargs):
        super().__init__(**kwargs)
        self.extra = extra
        self.attention = keras.layers.MultiHeadAttention(HEADS, H // HEADS, name="attention")
        self.norm1 = keras.layers.LayerNormalization(epsilon=1e-6, name="norm1")
        self.ff1 = keras.layers.Dense(16, activation="gelu", name="ff1")
        self.ff2 = keras.layers.Dense(H, name="ff2")
        self.norm2 = keras.layers.LayerNormalization(epsilon=1e-6, name="norm2")

    def call(self, h):
        h1 = self.norm1(h + self.attention(h, h))
        h2 = self.norm2(h1 + self.ff2(self.ff1(h1)))
        return keras.ops.softmax(h2) if self.extra == "softmax" else h2

    def get_config(self):
        return {**super().get_config(), "extra": self.extra}


def custom_transformer(functional_model, extra=None):
    inputs = keras.Input((T, H))
    h = keras.layers.LayerNormalization(epsilon=1e-6, name="norm0")(inputs)
    block = Block(extra, name="block")
    h2 = block(h)
    pooled = keras.layers.Dense(H, activation="tanh", name="pool")(h2[:, 0, :])
    model = keras.Model(inputs, keras.layers.Dense(3, name="logits")(pooled))
    for name in ("norm0", "pool", "logits"):
        model.get_layer(name).set_weights(functional_model.get_layer(name).get_weights())
    for name in ("attention", "norm1", "ff1", "ff2", "norm2"):
        getattr(block, name).set_weights(functional_model.get_layer(name).get_weights())
    return model


@pytest.mark.parametrize("method", ["lrp", "deeplift"])
def test_the_block_as_a_custom_layer_is_explained_as_the_functional_one(functional, method):
    model, x, _ = functional
    custom = custom_transformer(model)
    np.testing.assert_allclose(np.asarray(custom(x)), np.asarray(model(x)), atol=1e-5)
    options = {"composite": "epsilon"} if method == "lrp" else {"baseline": 0.1}
    ours = sk.explain(custom, x, method, targets=[2, 0, 1], **options)
    theirs = sk.explain(model, x, method, targets=[2, 0, 1], **options)
    scale = np.abs(theirs.attributions).max()
    np.testing.assert_allclose(ours.attributions, theirs.attributions, atol=1e-5 * scale)
    rewritten = rewrite_lrp(custom, composites.get("epsilon"))
    assert rewritten.rewritten_layers["block"] == "custom"
    assert {"block/attention", "block/norm1", "block/ff1", "block/ff2", "block/norm2"} <= set(
        rewritten.rewritten_layers
    )


def test_a_block_computing_something_no_rule_covers_is_refused_naming_it_and_the_operation(functional):
    model, x, _ = functional
    custom = custom_transformer(model, extra="softmax")
    for method in ("lrp", "deeplift"):
        with pytest.raises(ValueError, match=r"cannot rewrite layer 'block' \(Block\) for LRP/DeepLIFT: .*Softmax"):
            sk.explain(custom, x, method, targets=0)
