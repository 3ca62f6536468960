"""Backward rules: hand-computed gates on a tiny net, and every ReLU variant against autodiff."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import saliency_kit as sk
from saliency_kit.rules import ReluFamily, relu_family_of_function

# A net with four hidden units covering every gate: (active, +w2), (active, -w2), (inactive, +w2),
# (inactive, -w2). x = [1, 2] gives pre-activations h = x @ W1 = [2, 3, -2, -3].
X = np.array([[1.0, 2.0]], np.float32)
W1 = np.array([[1.0, 2.0, -1.0, -2.0], [0.5, 0.5, -0.5, -0.5]], np.float32)
W2 = np.array([[2.0], [-3.0], [4.0], [-5.0]], np.float32)
# The gradient reaching the ReLU is W2 (the output is linear), so by hand:
HAND = {
    # plain: dy * 1[h > 0]                      = [2, -3, 0, 0]  -> W1 @ that
    "plain": W1 @ np.array([2.0, -3.0, 0.0, 0.0], np.float32),  # [-4, -0.5]
    # guided: dy * 1[h > 0] * 1[dy > 0]          = [2, 0, 0, 0]
    "guided": W1 @ np.array([2.0, 0.0, 0.0, 0.0], np.float32),  # [2, 1]
    # deconv: max(dy, 0)                         = [2, 0, 4, 0]
    "deconv": W1 @ np.array([2.0, 0.0, 4.0, 0.0], np.float32),  # [-2, -1]
}


def tiny_net(relu_as="fused"):
    """The four-unit net, its ReLU written in one of the ways Keras allows."""
    inp = keras.Input((2,))
    if relu_as == "fused":
        h = keras.layers.Dense(4, activation="relu", use_bias=False, name="hidden")(inp)
    else:
        h = keras.layers.Dense(4, use_bias=False, name="hidden")(inp)
        if relu_as == "layer":
            h = keras.layers.ReLU(name="relu")(h)
        elif relu_as == "activation":
            h = keras.layers.Activation("relu", name="relu")(h)
        else:  # a bare op recorded in the functional graph
            h = keras.ops.relu(h)
    out = keras.layers.Dense(1, use_bias=False, name="out")(h)
    model = keras.Model(inp, out)
    model.get_layer("hidden").set_weights([W1])
    model.get_layer("out").set_weights([W2])
    return model


def input_gradient(model, x, compiled=False):
    def compute(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf.reduce_sum(model(x))
        return tape.gradient(y, x)

    return (tf.function(compute) if compiled else compute)(tf.constant(x)).numpy()[0]


def test_hand_computed_answers_are_what_we_think():
    assert np.allclose(X @ W1, [[2, 3, -2, -3]])
    assert np.allclose(HAND["plain"], [-4, -0.5]) and np.allclose(HAND["guided"], [2, 1])
    assert np.allclose(HAND["deconv"], [-2, -1])


@pytest.mark.parametrize("relu_as", ["fused", "layer", "activation", "op"])
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "tf.function"])
def test_tiny_net_every_gate(relu_as, compiled):
    model = tiny_net(relu_as)
    np.testing.assert_allclose(input_gradient(model, X, compiled), HAND["plain"], rtol=1e-6)
    for rule in ("guided", "deconv"):
        rewritten = sk.rewrite(model, rule)
        assert len(rewritten.rewritten_layers) == 1
        np.testing.assert_allclose(input_gradient(rewritten, X, compiled), HAND[rule], rtol=1e-6)
        np.testing.assert_array_equal(rewritten(X).numpy(), model(X).numpy())
    # the original still gives the plain gradient after both rewrites
    np.testing.assert_allclose(input_gradient(model, X, compiled), HAND["plain"], rtol=1e-6)


def test_rule_objects_and_rule_instances():
    model = tiny_net()
    custom = sk.rewrite(model, sk.GuidedBackprop())
    np.testing.assert_allclose(input_gradient(custom, X), HAND["guided"], rtol=1e-6)

    class PassThrough(sk.ModifiedBackprop):
        """dx = dy: the ReLU is invisible to the backward pass."""

        def grad(self, x, y, dy):
            return dy

    np.testing.assert_allclose(input_gradient(sk.rewrite(model, PassThrough()), X), W1 @ W2[:, 0], rtol=1e-6)

    with pytest.raises(ValueError, match="'guided', 'deconv' or a ModifiedBackprop"):
        sk.rewrite(model, "guidedd")
    with pytest.raises(ValueError, match="instance"):
        sk.rewrite(model, sk.GuidedBackprop)
    with pytest.raises(NotImplementedError, match="must implement grad"):
        input_gradient(sk.rewrite(model, sk.ModifiedBackprop()), X)


FAMILIES = {
    "relu": ReluFamily(),
    "relu6": ReluFamily(max_value=6.0),
    "max_value=2.5": ReluFamily(max_value=2.5),
    "leaky": ReluFamily(negative_slope=0.3),
    "threshold": ReluFamily(threshold=1.0),
    "all three": ReluFamily(negative_slope=0.1, max_value=4.0, threshold=0.5),
}


@pytest.mark.parametrize("name", FAMILIES)
def test_rules_gate_on_the_activations_real_derivative(name):
    family = FAMILIES[name]
    rng = np.random.default_rng(0)
    x = tf.constant(rng.uniform(-8, 8, size=200).astype(np.float32))
    dy = tf.constant(rng.normal(size=200).astype(np.float32))

    # f'(x) from autodiff of Keras' own activation: an independent answer
    with tf.GradientTape() as tape:
        tape.watch(x)
        y_ref = keras.activations.relu(x, **family.as_dict())
    derivative = tape.gradient(y_ref, x).numpy()
    np.testing.assert_array_equal(family.derivative(x).numpy(), derivative)

    for rule, expected in [
        (sk.GuidedBackprop(family), dy.numpy() * derivative * (dy.numpy() > 0)),
        (sk.DeconvBackprop(family), np.maximum(dy.numpy(), 0)),
    ]:
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = rule(x)
        np.testing.assert_array_equal(y.numpy(), y_ref.numpy())  # forward unchanged
        np.testing.assert_allclose(tape.gradient(y, x, output_gradients=dy).numpy(), expected, rtol=1e-6)


@pytest.mark.parametrize(
    "fn,family",
    [
        (keras.activations.relu, ReluFamily()),
        (keras.activations.relu6, ReluFamily(max_value=6.0)),
        (tf.nn.relu, ReluFamily()),
        (tf.nn.relu6, ReluFamily(max_value=6.0)),
        (keras.ops.relu, ReluFamily()),
        (keras.activations.leaky_relu, ReluFamily(negative_slope=0.2)),
        (tf.nn.leaky_relu, ReluFamily(negative_slope=0.2)),
    ],
)
def test_relu_functions_are_recognised(fn, family):
    assert relu_family_of_function(fn) == family


def test_partials_and_non_relu_functions():
    import functools

    assert relu_family_of_function(functools.partial(keras.activations.relu, max_value=3)) == ReluFamily(max_value=3.0)
    assert relu_family_of_function(functools.partial(tf.nn.leaky_relu, alpha=0.1)) == ReluFamily(negative_slope=0.1)
    for fn in (keras.activations.silu, keras.activations.gelu, keras.activations.linear, tf.tanh, lambda t: t):
        assert relu_family_of_function(fn) is None


def test_float16_rule():
    x = tf.constant([-1.0, 2.0, 3.0], tf.float16)
    dy = tf.constant([1.0, -1.0, 2.0], tf.float16)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = sk.GuidedBackprop()(x)
    g = tape.gradient(y, x, output_gradients=dy)
    assert g.dtype == tf.float16
    np.testing.assert_array_equal(g.numpy(), [0.0, 0.0, 2.0])
