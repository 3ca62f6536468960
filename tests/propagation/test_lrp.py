"""LRP rules, composites, canonizers and DeepLIFT, checked against NumPy written independently
(:mod:`numpy_reference`: each reference carries the rule configurations it replicates)."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf
from propagation.numpy_reference import RULES, conv_matrix, numpy_deeplift, zbox_rule

from saliency_kit.propagation import composites
from saliency_kit.propagation.deeplift import rewrite_deeplift
from saliency_kit.propagation.lrp import rewrite_lrp
from saliency_kit.propagation.lrp_rules import AlphaBeta, Epsilon, Flat, Pass, ZBox, ZPlus

RNG = np.random.default_rng(7)


def named_lrp(model, composite, *, input_relevance=False, **options):
    """``rewrite_lrp`` with a named composite (or a Composite) built with ``options``."""
    return rewrite_lrp(model, composites.get(composite, **options), input_relevance=input_relevance)


def input_relevance(rewritten, x, column, *, logits_layer=-1):
    """The relevance at the input for output ``column`` (the input gradient of a model rewritten
    with ``input_relevance=True``)."""
    xt = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        score = rewritten(xt)[:, column]
    return tape.gradient(score, xt).numpy()


def gradient_times_input(model, x, column):
    xt = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        score = model(xt)[:, column]
    return (tape.gradient(score, xt) * xt).numpy()


def rule_id(case):
    rule_class, configuration, reference = case
    return f"{rule_class.__name__}({', '.join(f'{k}={v}' for k, v in configuration.items())})-{reference.__name__}"


def test_every_rule_has_a_reference():
    from saliency_kit.propagation import lrp_rules
    from saliency_kit.propagation.core import LinearRule

    defined = {
        cls
        for cls in vars(lrp_rules).values()
        if isinstance(cls, type) and issubclass(cls, LinearRule) and cls is not LinearRule
    }
    assert defined == {rule_class for rule_class, _, _ in RULES}


@pytest.mark.parametrize("case", RULES, ids=rule_id)
def test_each_rule_on_a_dense_layer_matches_numpy(case):
    rule_class, configuration, reference = case
    rule = rule_class(**configuration)
    W = RNG.normal(size=(5, 3)).astype(np.float32)
    b = np.array([0.3, -0.2, 0.1], np.float32)
    model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(3)])
    model.layers[0].set_weights([W, b])
    x = RNG.uniform(-1, 1, size=(2, 5)).astype(np.float32)
    rewritten = rewrite_lrp(model, composites.Composite({keras.layers.Dense: rule}), input_relevance=True)
    for column in range(3):
        got = input_relevance(rewritten, x, column)
        for row in range(2):
            z = x[row] @ W + b
            R = np.where(np.arange(3) == column, z, 0.0)
            want = reference(
                x[row].astype(np.float64),
                W.astype(np.float64),
                b.astype(np.float64),
                R,
                np.ones(W.shape),
                **configuration,
            )
            np.testing.assert_allclose(got[row], want, rtol=2e-4, atol=2e-5)


@pytest.mark.parametrize("case", RULES, ids=rule_id)
def test_each_rule_on_a_conv_layer_matches_numpy(case):
    rule_class, configuration, reference = case
    rule = rule_class(**configuration)
    kernel = RNG.normal(size=(2, 2, 2, 3)).astype(np.float32)
    bias = np.array([0.2, -0.1, 0.05], np.float32)
    model = keras.Sequential([keras.Input((4, 4, 2)), keras.layers.Conv2D(3, 2), keras.layers.Flatten()])
    model.layers[0].set_weights([kernel, bias])
    x = RNG.uniform(-1, 1, size=(1, 4, 4, 2)).astype(np.float32)
    rewritten = rewrite_lrp(model, composites.Composite({keras.layers.Conv2D: rule}), input_relevance=True)
    W, S = conv_matrix(kernel.astype(np.float64), 4, 4)
    b = np.tile(bias.astype(np.float64), 9)
    z = x.reshape(-1).astype(np.float64) @ W + b
    for column in (0, 13, 26):
        got = input_relevance(rewritten, x, column).reshape(-1)
        R = np.where(np.arange(27) == column, z, 0.0)
        want = reference(x.reshape(-1).astype(np.float64), W, b, R, S, **configuration)
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-5)


def test_zbox_takes_per_channel_bounds_in_input_space():
    low, high = np.array([-1.0, -2.0], np.float32), np.array([1.0, 0.5], np.float32)
    kernel = RNG.normal(size=(2, 2, 2, 1)).astype(np.float32)
    model = keras.Sequential([keras.Input((3, 3, 2)), keras.layers.Conv2D(1, 2), keras.layers.Flatten()])
    model.layers[0].set_weights([kernel, np.zeros(1, np.float32)])
    x = RNG.uniform(-0.5, 0.5, size=(1, 3, 3, 2)).astype(np.float32)
    rewritten = named_lrp(model, "epsilon_gamma_box", low=low, high=high, input_relevance=True)
    assert isinstance(
        rewritten.rewritten_layers["conv2d" if "conv2d" in rewritten.rewritten_layers else model.layers[0].name], ZBox
    )
    W, _ = conv_matrix(kernel.astype(np.float64), 3, 3)
    z = x.reshape(-1) @ W
    got = input_relevance(rewritten, x, 2).reshape(-1)
    want = zbox_rule(
        x.reshape(-1).astype(np.float64),
        W,
        np.zeros(4),
        np.where(np.arange(4) == 2, z, 0.0),
        None,
        low=np.tile(low, 9),
        high=np.tile(high, 9),
    )
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-5)


# ----------------------------------------------------------------------------- whole networks


def relu_net(bias=True, seed=0, final="softmax", relu_max=None):
    """conv(relu) → conv → BN → ReLU → max pool → flatten → dense(relu) → dense(softmax)."""
    rng = np.random.default_rng(seed)
    inp = keras.Input((8, 8, 3))
    h = keras.layers.Conv2D(4, 3, activation="relu", use_bias=bias)(inp)
    h = keras.layers.Conv2D(5, 3, use_bias=bias)(h)
    h = keras.layers.BatchNormalization(center=bias)(h)
    h = keras.layers.ReLU(max_value=relu_max)(h)
    h = keras.layers.MaxPooling2D()(h)
    h = keras.layers.Flatten()(h)
    h = keras.layers.Dense(6, activation="relu", use_bias=bias)(h)
    out = keras.layers.Dense(4, activation=final, use_bias=bias)(h)
    model = keras.Model(inp, out)
    for layer in model.layers:
        weights = layer.get_weights()
        if isinstance(layer, keras.layers.BatchNormalization):
            gamma = rng.uniform(0.5, 1.5, 5)
            rest = [rng.normal(0, 0.1, 5), rng.uniform(0.5, 2, 5)] if bias else [np.zeros(5), rng.uniform(0.5, 2, 5)]
            layer.set_weights([gamma, *(([rng.normal(0, 0.1, 5)]) if bias else []), *rest][: len(weights)])
        elif weights:
            layer.set_weights([rng.normal(0, 0.5, w.shape).astype(np.float32) for w in weights])
    return model


def logits_of(rewritten):
    return keras.Model(rewritten.inputs, rewritten.layers[-1].input)


@pytest.mark.parametrize("name", composites.names())
def test_relevance_is_conserved_with_zero_biases(name):
    model = relu_net(bias=False)
    x = RNG.uniform(0, 1, size=(2, 8, 8, 3)).astype(np.float32)
    options = {"epsilon": 1e-9, "stabilizer": 1e-9, "low": 0.0, "high": 1.0}
    rewritten = named_lrp(model, name, input_relevance=True, **options)
    np.testing.assert_allclose(rewritten(x), model(x), rtol=1e-5, atol=1e-6)
    logits = logits_of(rewritten)
    scores = logits(x).numpy()
    # z⁺-type rules (alpha1_beta0 on the last Dense) conserve where the output has positive
    # contributions, which every positive logit has; ε rules conserve everywhere.
    columns = range(4) if name != "alpha1_beta0" else [c for c in range(4) if np.all(scores[:, c] > 0)]
    assert columns
    for column in columns:
        got = input_relevance(logits, x, column).reshape(2, -1).sum(1)
        np.testing.assert_allclose(got, scores[:, column], rtol=1e-4, atol=1e-7)


def test_gradient_form_times_input_is_the_relevance():
    model = relu_net(bias=True)
    x = RNG.uniform(0.1, 1, size=(2, 8, 8, 3)).astype(np.float32)
    grad_form = logits_of(named_lrp(model, "epsilon_plus"))
    relevance_form = logits_of(named_lrp(model, "epsilon_plus", input_relevance=True))
    np.testing.assert_allclose(
        gradient_times_input(grad_form, x, 1), input_relevance(relevance_form, x, 1), rtol=1e-4, atol=1e-6
    )


def test_lrp0_equals_gradient_times_input_on_a_relu_net():
    model = relu_net(bias=True)
    plain_logits = relu_net(bias=True, final=None)  # the same weights, no softmax
    x = RNG.uniform(0, 1, size=(2, 8, 8, 3)).astype(np.float32)
    rewritten = logits_of(named_lrp(model, "epsilon", epsilon=1e-12, input_relevance=True))
    for column in range(4):
        np.testing.assert_allclose(
            input_relevance(rewritten, x, column), gradient_times_input(plain_logits, x, column), rtol=1e-4, atol=1e-6
        )


def awkward_net(seed=0):
    """Separable and depthwise convolutions (BatchNorm merged into the depthwise), a residual
    Add, a Concatenate, average pooling, a nested Sequential block and leaky ReLU; no biases."""
    rng = np.random.default_rng(seed)
    inp = keras.Input((9, 9, 3))
    a = keras.layers.SeparableConv2D(4, 3, padding="same", use_bias=False, name="sep")(inp)
    a = keras.layers.ReLU(name="sep_relu")(a)
    b = keras.layers.DepthwiseConv2D(3, padding="same", depth_multiplier=1, use_bias=False, name="dw")(a)
    b = keras.layers.BatchNormalization(center=False, name="dw_bn")(b)
    h = keras.layers.Add(name="residual")([a, b])
    h = keras.layers.LeakyReLU(0.1, name="leaky")(h)
    block = keras.Sequential(
        [
            keras.Input((9, 9, 4)),
            keras.layers.Conv2D(3, 1, use_bias=False, activation="relu"),
            keras.layers.AveragePooling2D(3),
        ],
        name="block",
    )
    c = keras.layers.Concatenate(name="concat")([block(h), keras.layers.MaxPooling2D(3)(h)])
    z = keras.layers.GlobalAveragePooling2D()(c)
    out = keras.layers.Dense(3, use_bias=False, name="logits")(z)
    model = keras.Model(inp, out)
    for layer in model.layers + block.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            layer.set_weights([rng.uniform(0.5, 1.5, 4), np.zeros(4), rng.uniform(0.5, 2, 4)])
        elif layer.get_weights() and not isinstance(layer, keras.Model):
            layer.set_weights([rng.normal(0, 0.5, w.shape).astype(np.float32) for w in layer.get_weights()])
    return model


def test_awkward_layers_lrp0_is_gradient_times_input_and_deeplift_sums_to_delta():
    model = awkward_net()
    x = RNG.uniform(-1, 1, size=(2, 9, 9, 3)).astype(np.float32)
    lrp0 = named_lrp(model, "epsilon", epsilon=1e-12, stabilizer=1e-12, input_relevance=True)
    assert lrp0.rewritten_layers["dw_bn"] == "merged into 'dw'"
    assert "block/" + model.get_layer("block").layers[0].name in lrp0.rewritten_layers
    np.testing.assert_allclose(lrp0(x), model(x), rtol=1e-5, atol=1e-6)
    for column in range(3):
        np.testing.assert_allclose(
            input_relevance(lrp0, x, column), gradient_times_input(model, x, column), rtol=1e-4, atol=1e-6
        )
    scores = model(x).numpy()
    _, gap = deeplift(model, x, np.array([[0, 1, 2]] * 2), baseline=0.1)
    assert np.abs(gap).max() <= 1e-5 * np.abs(scores).max() + 1e-6


def test_batchnorm_merged_forward_outputs_equal():
    model = relu_net(bias=True, seed=3)
    rewritten = named_lrp(model, "epsilon_plus_flat")
    bn = next(layer.name for layer in model.layers if isinstance(layer, keras.layers.BatchNormalization))
    conv = model.layers[2].name
    assert rewritten.rewritten_layers[bn] == f"merged into {conv!r}"
    x = RNG.uniform(0, 1, size=(3, 8, 8, 3)).astype(np.float32)
    np.testing.assert_allclose(rewritten(x), model(x), rtol=1e-5, atol=1e-6)
    # the merged layer's output is the original BatchNorm's output
    merged = keras.Model(rewritten.inputs, rewritten.get_layer(conv).output)
    original = keras.Model(model.inputs, model.get_layer(bn).output)
    np.testing.assert_allclose(merged(x), original(x), rtol=1e-5, atol=1e-5)


def test_rewrite_leaves_the_model_untouched_and_lists_rules():
    model = relu_net()
    before = [w.copy() for w in model.get_weights()]
    rewritten = named_lrp(model, "epsilon_plus_flat")
    names = [layer.name for layer in model.layers]
    rules = rewritten.rewritten_layers
    assert isinstance(rules[names[1]], Flat)  # first layer
    assert isinstance(rules[names[2]], ZPlus)  # convolution
    assert isinstance(rules[names[4]], Pass)  # ReLU
    assert isinstance(rules[names[7]], Epsilon) and isinstance(rules[names[8]], Epsilon)  # dense
    for a, b in zip(before, model.get_weights()):
        np.testing.assert_array_equal(a, b)
    assert all(type(layer).__module__.startswith("keras") for layer in model.layers)


def test_alpha_beta_must_differ_by_one():
    with pytest.raises(ValueError, match="alpha - beta = 1"):
        AlphaBeta(2.0, 2.0)


def test_unknown_composite_and_missing_bounds():
    with pytest.raises(ValueError, match="unknown composite"):
        composites.get("epsilon_plus_flatt")
    with pytest.raises(ValueError, match="low and high"):
        composites.get("epsilon_gamma_box")


def test_dense_without_rule_is_refused():
    model = relu_net()
    with pytest.raises(ValueError, match="no rule for linear layers"):
        rewrite_lrp(model, composites.Composite({keras.layers.Conv2D: ZPlus()}))


class Squarer(keras.layers.Layer):
    """A product of two explained values written in a call: no rule covers it."""

    def call(self, x):
        return x * x


class Sine(keras.layers.Layer):
    def call(self, x):
        return keras.ops.sin(x)


class ShuffledAttention(keras.layers.MultiHeadAttention):
    """An attention whose computation the rules would not mirror."""

    def _compute_attention(self, query, key, value, attention_mask=None, training=None, return_attention_scores=False):
        return super()._compute_attention(key, query, value, attention_mask, training, return_attention_scores)


@pytest.mark.parametrize(
    "make, named",
    [
        (lambda h: Squarer(name="custom")(h), "custom'.*Mul"),
        (lambda h: Sine(name="sine")(h), "sine'.*Sin"),
        (lambda h: ShuffledAttention(2, 4, name="mha")(h, h), "mha'.*_compute_attention"),
        (lambda h: keras.layers.Activation("softmax", name="soft")(h), "soft'.*softmax"),
        (lambda h: keras.layers.GroupNormalization(2, name="group")(h), "group'"),
        (lambda h: keras.layers.Dense(4, activation="softmax", name="softmax_dense")(h), "softmax_dense'"),
    ],
)
def test_layers_without_rules_are_refused_by_name(make, named):
    inp = keras.Input((3, 4))
    h = keras.layers.Dense(4)(inp)
    out = keras.layers.Dense(2)(keras.layers.Flatten()(make(h)))
    model = keras.Model(inp, out)
    with pytest.raises(ValueError, match=f"cannot rewrite layer '{named}"):
        named_lrp(model, "epsilon")
    with pytest.raises(ValueError, match=f"cannot rewrite layer '{named}"):
        rewrite_deeplift(model)


# ----------------------------------------------------------------------------- DeepLIFT


def deeplift(model, inputs, classes, baseline=0.0):
    """DeepLIFT attributions of the logits for ``classes [B, K]``, eagerly, through
    ``rewrite_deeplift``: ``(attributions [B, K, ...], Σ attributions − (s(x) − s(x₀)) [B, K])``."""
    rewritten = rewrite_deeplift(model)
    last = rewritten.layers[-1]
    if isinstance(last, keras.layers.Activation):  # a final softmax/sigmoid split apart
        rewritten = keras.Model(rewritten.inputs, last.input)
    x = np.asarray(inputs, np.float32)
    x0 = np.broadcast_to(np.asarray(baseline, np.float32), x.shape)
    pairs = tf.constant(np.stack([x, x0], 1).reshape(-1, *x.shape[1:]))  # rows x_0, x0_0, x_1, ...
    rows = []
    for k in range(classes.shape[1]):
        with tf.GradientTape() as tape:
            tape.watch(pairs)
            score = tf.gather(rewritten(pairs)[0::2], classes[:, k], axis=1, batch_dims=1)
        rows.append(tape.gradient(score, pairs).numpy()[0::2] * (x - x0))
    attributions = np.stack(rows, 1)
    out = rewritten(pairs).numpy()
    delta = np.take_along_axis(out[0::2], classes, 1) - np.take_along_axis(out[1::2], classes, 1)
    return attributions, attributions.reshape(*classes.shape, -1).sum(-1) - delta


def test_deeplift_matches_numpy_and_sums_to_delta():
    rng = np.random.default_rng(11)
    W1, b1 = rng.normal(size=(6, 8)), rng.normal(size=8) * 0.3
    W2, b2 = rng.normal(size=(4, 5)), rng.normal(size=5) * 0.3
    inp = keras.Input((6,))
    h = keras.layers.Dense(8, activation="relu")(inp)
    h = keras.layers.Reshape((4, 2))(h)
    h = keras.layers.MaxPooling1D(2, data_format="channels_first")(h)  # pools pairs of units
    h = keras.layers.Flatten()(h)
    out = keras.layers.Dense(5)(h)
    model = keras.Model(inp, out)
    model.layers[1].set_weights([W1.astype(np.float32), b1.astype(np.float32)])
    model.layers[-1].set_weights([W2.astype(np.float32), b2.astype(np.float32)])
    x = rng.normal(size=(3, 6)).astype(np.float32)
    baseline = np.float32(0.1) * rng.normal(size=6).astype(np.float32)
    attributions, gap = deeplift(model, x, np.array([[0, 3]] * 3), baseline=baseline)
    layers = [("dense", W1, b1), ("relu",), ("maxpool", 2), ("dense", W2, b2)]
    scores = model(x).numpy()
    base_scores = model(np.broadcast_to(baseline, x.shape)).numpy()
    for row in range(3):
        for k, column in enumerate((0, 3)):
            want = numpy_deeplift(layers, x[row].astype(np.float64), baseline.astype(np.float64), column)
            np.testing.assert_allclose(attributions[row, k], want, rtol=1e-4, atol=1e-5)
            delta = scores[row, column] - base_scores[row, column]
            np.testing.assert_allclose(attributions[row, k].sum(), delta, rtol=1e-5, atol=1e-6)
    assert np.all(np.abs(gap) <= 1e-5 * np.abs(scores[:, [0, 3]] - base_scores[:, [0, 3]]) + 1e-6)


def test_deeplift_sums_to_delta_on_a_conv_net_with_capped_relu_and_batchnorm():
    model = relu_net(bias=True, seed=5, relu_max=0.5)  # the cap is reached: Rescale, not the gradient
    x = RNG.uniform(0, 1, size=(2, 8, 8, 3)).astype(np.float32)
    attributions, gap = deeplift(model, x, np.array([[0, 1], [2, 3]]), baseline=0.25)
    logits = relu_net(bias=True, seed=5, final=None, relu_max=0.5)
    delta = logits(x).numpy() - logits(np.full_like(x, 0.25)).numpy()
    want = np.take_along_axis(delta, np.array([[0, 1], [2, 3]]), 1)
    np.testing.assert_allclose(attributions.reshape(2, 2, -1).sum(-1), want, rtol=1e-5, atol=1e-6)
    assert np.abs(gap).max() <= 1e-5 * np.abs(want).max() + 1e-6


# ----------------------------------------------------------------------------- keras.applications

APPLICATIONS = [
    ("ResNet50", (64, 64, 3), "epsilon"),
    ("VGG16", (32, 32, 3), "epsilon_plus_flat"),
    ("MobileNetV2", (32, 32, 3), "epsilon_gamma_box"),
    ("DenseNet121", (32, 32, 3), "epsilon_plus"),
    ("InceptionV3", (75, 75, 3), "epsilon_plus_flat"),
    ("ConvNeXtTiny", (32, 32, 3), "epsilon"),  # LayerNorm, GELU, its LayerScale (a custom layer) checked
]


@pytest.mark.parametrize("name, shape, composite", APPLICATIONS, ids=[a[0] for a in APPLICATIONS])
def test_lrp_on_keras_applications_conserves_relevance(name, shape, composite):
    """With ``weights=None`` every bias and every BatchNorm shift is zero and the BatchNorm
    statistics are the identity, so the relevance reaching the input must equal the logit; ε and
    the stabilisers at 1e-25 make the absorption negligible (randomly initialised MobileNetV2's
    logits are ~1e-13: an ε of 1e-9 would absorb them all) (MobileNetV2's ReLU6 goes through
    Pass, its first convolution through ZBox with bounds [-1, 1], its preprocessing range).

    ResNet50 is checked with ε everywhere: in a residual block a convolution output can be
    negative while the sum it joins is positive, so it receives negative relevance that z⁺
    (which only sees positive contributions) drops when that output has none. Zennit's
    EpsilonPlus on ResNets loses that relevance too; the rules are exact, the composite is not
    conservative there."""
    keras.utils.set_random_seed(0)
    model = getattr(keras.applications, name)(weights=None, input_shape=shape, classes=10)
    x = np.random.default_rng(0).uniform(-1, 1, size=(1, *shape)).astype(np.float32)
    rewritten = named_lrp(model, composite, input_relevance=True, epsilon=1e-25, stabilizer=1e-25, low=-1.0, high=1.0)
    np.testing.assert_allclose(rewritten(x), model(x), rtol=1e-4, atol=1e-6)
    logits = logits_of(rewritten)
    score = logits(x).numpy()[0]
    column = int(np.argmax(np.abs(score)))
    total = input_relevance(logits, x, column).sum()
    np.testing.assert_allclose(total, score[column], rtol=1e-2)
