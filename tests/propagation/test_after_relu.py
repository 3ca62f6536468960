"""The shorter path of the LRP rules for a layer whose input comes from a ReLU (x ≥ 0 by
construction: x⁺ = x, no x⁻ branches, γ and αβ from one extra convolution), checked on a whole
network against the NumPy references composed layer by layer, and which layers take it."""

from __future__ import annotations

import functools

import keras
import numpy as np
import pytest
import tensorflow as tf
from propagation.numpy_reference import RULES, conv_matrix, epsilon_rule

from saliency_kit.propagation import canonizers, composites
from saliency_kit.propagation.lrp import RuleLayer, rewrite_lrp
from saliency_kit.propagation.lrp_rules import Epsilon
from saliency_kit.rules.relu import ReluFamily

#: The rules whose relevance is proportional to their input (ε, γ, z⁺, αβ): inside a network the
#: copy carries relevance as value × gradient. Flat, w² and ZBox also give relevance to inputs that
#: are 0; they are rules for the first layer, which reads the input.
PROPORTIONAL = [
    case
    for case in RULES
    if all(branch.inputs in ("x", "positive", "negative") for branch in case[0](**case[1]).branches)
]


def rule_id(case):
    rule_class, configuration, _ = case
    return f"{rule_class.__name__}({', '.join(f'{k}={v}' for k, v in configuration.items())})"


def chain_net(seed: int, dtype: str = "float32") -> keras.Model:
    """conv(relu) → conv → ReLU → conv → flatten → dense, every bias of both signs."""
    rng = np.random.default_rng(seed)
    inp = keras.Input((6, 6, 2), dtype=dtype)
    h = keras.layers.Conv2D(3, 2, activation="relu", name="c1", dtype=dtype)(inp)
    h = keras.layers.Conv2D(3, 2, name="c2", dtype=dtype)(h)
    h = keras.layers.ReLU(name="r2", dtype=dtype)(h)
    h = keras.layers.Conv2D(2, 2, name="c3", dtype=dtype)(h)
    h = keras.layers.Flatten(dtype=dtype)(h)
    out = keras.layers.Dense(3, name="d", dtype=dtype)(h)
    model = keras.Model(inp, out)
    for layer in model.layers:
        if layer.weights:
            layer.set_weights([rng.normal(0, 0.7, w.shape).astype(dtype) for w in layer.get_weights()])
    return model


def numpy_relevance(model, x, column, reference, configuration):
    """The input relevance of logit ``column`` by the NumPy references, one layer after another."""
    (k1, b1), (k2, b2), (k3, b3), (wd, bd) = (model.get_layer(n).get_weights() for n in ("c1", "c2", "c3", "d"))
    f64 = np.float64
    W1, S1 = conv_matrix(k1.astype(f64), 6, 6)
    W2, S2 = conv_matrix(k2.astype(f64), 5, 5)
    W3, S3 = conv_matrix(k3.astype(f64), 4, 4)
    b1, b2, b3 = np.tile(b1.astype(f64), 25), np.tile(b2.astype(f64), 16), np.tile(b3.astype(f64), 9)
    a0 = x.reshape(-1).astype(f64)
    a1 = np.maximum(a0 @ W1 + b1, 0)
    a2 = np.maximum(a1 @ W2 + b2, 0)
    z3 = a2 @ W3 + b3
    z4 = z3 @ wd.astype(f64) + bd.astype(f64)
    relevance = np.where(np.arange(3) == column, z4, 0.0)
    relevance = epsilon_rule(z3, wd.astype(f64), bd.astype(f64), relevance, None, epsilon=1e-3)
    relevance = reference(a2, W3, b3, relevance, S3, **configuration)  # c3 reads the ReLU r2
    relevance = reference(a1, W2, b2, relevance, S2, **configuration)  # c2 reads c1's fused ReLU
    return reference(a0, W1, b1, relevance, S1, **configuration)  # c1 reads the input (both signs)


def test_the_proportional_rules_are_the_ones_with_an_input_sign_path():
    assert {case[0].__name__ for case in PROPORTIONAL} == {"Epsilon", "Gamma", "ZPlus", "AlphaBeta"}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", PROPORTIONAL, ids=rule_id)
def test_every_rule_after_a_relu_matches_numpy_on_a_whole_network(case, dtype):
    rule_class, configuration, reference = case
    model = chain_net(seed=3, dtype=dtype)
    rewritten = rewrite_lrp(
        model,
        composites.Composite({keras.layers.Conv2D: rule_class(**configuration), keras.layers.Dense: Epsilon(1e-3)}),
        input_relevance=True,
    )
    shorter = {layer.name: layer.nonnegative_input for layer in rewritten.layers if isinstance(layer, RuleLayer)}
    assert shorter == {"c1": False, "c2": True, "c3": True, "d": False}
    x = np.random.default_rng(4).uniform(-1, 1, size=(2, 6, 6, 2)).astype(dtype)
    # float64: every rule keeps the model's dtype (no float32 constant meets a float64 tensor)
    tolerance = {"rtol": 2e-4, "atol": 2e-5} if dtype == "float32" else {"rtol": 1e-7, "atol": 1e-9}
    xt = tf.constant(x)
    for column in range(3):
        with tf.GradientTape() as tape:
            tape.watch(xt)
            score = rewritten(xt)[:, column]
        got = tape.gradient(score, xt).numpy()
        for row in range(2):
            want = numpy_relevance(model, x[row], column, reference, configuration)
            np.testing.assert_allclose(got[row].reshape(-1), want, **tolerance)


def relu_after(make_layer) -> keras.Model:
    inp = keras.Input((5, 5, 2))
    h = keras.layers.Conv2D(2, 2)(inp)
    h = make_layer()(h)
    out = keras.layers.Conv2D(1, 2, name="reader")(h)
    return keras.Model(inp, out)


@pytest.mark.parametrize(
    "make_layer, nonnegative",
    [
        (keras.layers.ReLU, True),
        (lambda: keras.layers.ReLU(max_value=6.0), True),
        (lambda: keras.layers.ReLU(threshold=0.5), True),
        (lambda: keras.layers.Activation(functools.partial(keras.activations.relu, threshold=-0.5)), False),
        (lambda: keras.layers.ReLU(negative_slope=0.1), False),
        (keras.layers.LeakyReLU, False),
        (lambda: keras.layers.Activation("relu"), True),
        (lambda: keras.layers.BatchNormalization(), False),
    ],
    ids=["relu", "relu6", "threshold+", "threshold-", "slope", "leaky", "activation", "batchnorm"],
)
def test_which_layers_read_values_that_cannot_be_negative(make_layer, nonnegative):
    facts = {fact.path: fact for fact in canonizers.model_facts(relu_after(make_layer))}
    assert facts["reader"].nonnegative_input is nonnegative


def test_sign_is_kept_through_padding_pooling_and_sums_of_relus_only():
    inp = keras.Input((6, 6, 2))
    a = keras.layers.ReLU()(keras.layers.Conv2D(2, 1)(inp))
    b = keras.layers.ReLU()(keras.layers.Conv2D(2, 1)(inp))
    pooled = keras.layers.MaxPooling2D()(keras.layers.ZeroPadding2D()(a))
    both = keras.layers.Add()([a, b])
    mixed = keras.layers.Add()([a, inp])  # the raw input can be negative
    outs = [
        keras.layers.Conv2D(1, 1, name="after_pool")(pooled),
        keras.layers.Conv2D(1, 1, name="after_sum")(both),
        keras.layers.Conv2D(1, 1, name="after_mixed")(mixed),
        keras.layers.Conv2D(1, 1, name="after_subtract")(keras.layers.Subtract()([a, b])),
    ]
    facts = {fact.path: fact.nonnegative_input for fact in canonizers.model_facts(keras.Model(inp, outs))}
    assert (facts["after_pool"], facts["after_sum"], facts["after_mixed"], facts["after_subtract"]) == (
        True,
        True,
        False,
        False,
    )


def test_relu_family_sign():
    assert ReluFamily().nonnegative and ReluFamily(max_value=6.0).nonnegative
    assert not ReluFamily(negative_slope=0.2).nonnegative
    assert not ReluFamily(threshold=-1.0).nonnegative
    assert not ReluFamily(max_value=-1.0).nonnegative


def bn_net(dtype: str) -> keras.Model:
    """conv(relu) → conv → BN (merged) → ReLU → conv → average → dense, in ``dtype``."""
    rng = np.random.default_rng(0)
    inp = keras.Input((8, 8, 3), dtype=dtype)
    h = keras.layers.Conv2D(4, 3, activation="relu", dtype=dtype)(inp)
    h = keras.layers.Conv2D(5, 3, dtype=dtype)(h)
    h = keras.layers.BatchNormalization(dtype=dtype)(h)
    h = keras.layers.ReLU(dtype=dtype)(h)
    h = keras.layers.Conv2D(3, 3, dtype=dtype)(h)
    out = keras.layers.Dense(2, dtype=dtype)(keras.layers.GlobalAveragePooling2D(dtype=dtype)(h))
    model = keras.Model(inp, out)
    for layer in model.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            layer.set_weights([rng.uniform(0.5, 1.5, w.shape).astype(dtype) for w in layer.get_weights()])
        elif layer.weights:
            layer.set_weights([rng.normal(0, 0.5, w.shape).astype(dtype) for w in layer.get_weights()])
    return model


@pytest.mark.parametrize("composite", composites.names())
def test_every_composite_explains_a_float64_model_as_its_float32_twin(composite):
    """Compiled (where a Python number meeting a float64 tensor in an op fails, unlike eagerly)."""
    import saliency_kit as sk

    x = np.random.default_rng(1).uniform(-1, 1, (2, 8, 8, 3))
    bounds = {"low": -1.0, "high": 1.0}
    wide = sk.explain(bn_net("float64"), x, "lrp", 0, composite=composite, **bounds)
    narrow = sk.explain(bn_net("float32"), x.astype("float32"), "lrp", 0, composite=composite, **bounds)
    assert np.abs(wide.attributions).max() > 0
    np.testing.assert_allclose(wide.attributions, narrow.attributions, rtol=1e-3, atol=1e-5)
