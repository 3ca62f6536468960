"""A backward rule called directly (``rule(x)``, ``ModifiedBackprop.__call__``) gives the activation's
own forward values and the rule's gradient, on whichever backend runs: checked against NumPy."""

import keras
import numpy as np
import pytest

from saliency_kit.rules import DeconvBackprop, GuidedBackprop, ModifiedBackprop, ReluFamily

FAMILIES = {
    "relu": ReluFamily(),
    "relu6": ReluFamily(max_value=6.0),
    "max_value=2.5": ReluFamily(max_value=2.5),
    "leaky": ReluFamily(negative_slope=0.3),
    "threshold": ReluFamily(threshold=1.0),
    "all three": ReluFamily(negative_slope=0.1, max_value=4.0, threshold=0.5),
}


class AbsoluteGate(ModifiedBackprop):
    """A rule of one's own, in keras.ops: ``|dy| · f'(x)``."""

    def grad(self, x, y, dy):
        return keras.ops.multiply(keras.ops.abs(dy), self.derivative(x))


def np_derivative(family, x):
    inside = x > family.threshold
    if family.max_value is not None:
        inside &= x < family.max_value
    return np.where(inside, 1.0, np.where(x < family.threshold, family.negative_slope, 0.0)).astype(np.float32)


def vjp(f, x, dy):
    """``(f(x), dy · df/dx)`` as NumPy arrays, by the running backend's own differentiation."""
    if keras.backend.backend() == "jax":
        import jax

        y, pull = jax.vjp(f, x)
        return np.asarray(y), np.asarray(pull(dy)[0])
    if keras.backend.backend() == "torch":
        import torch

        leaf = torch.tensor(x, requires_grad=True)
        y = f(leaf)
        (grad,) = torch.autograd.grad(y, leaf, torch.tensor(dy))
        return y.detach().numpy(), grad.numpy()
    import tensorflow as tf

    x = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = f(x)
    return y.numpy(), tape.gradient(y, x, output_gradients=tf.constant(dy)).numpy()


@pytest.mark.parametrize("name", FAMILIES)
def test_a_rule_called_directly_gives_its_gradient(name):
    family = FAMILIES[name]
    rng = np.random.default_rng(0)
    x = rng.uniform(-8, 8, size=200).astype(np.float32)
    dy = rng.normal(size=200).astype(np.float32)
    derivative = np_derivative(family, x)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(family.derivative(keras.ops.array(x))), derivative)

    own_forward = keras.ops.convert_to_numpy(keras.activations.relu(x, **family.as_dict()))
    for rule, expected in [
        (GuidedBackprop(family), dy * derivative * (dy > 0)),
        (DeconvBackprop(family), np.maximum(dy, 0)),
        (AbsoluteGate(family), np.abs(dy) * derivative),
    ]:
        y, dx = vjp(rule, x, dy)
        np.testing.assert_array_equal(y, own_forward)
        np.testing.assert_allclose(dx, expected, rtol=1e-6, atol=1e-7)
