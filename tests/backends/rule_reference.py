"""NumPy references of the ReLU-rule passes: each activation's forward pass and its backward pass by
a rule, small dense models with weights set by hand, and the activation kinds Keras writes, shared
by the rule-pass tests of each backend."""

import keras
import numpy as np

from saliency_kit.rules import ModifiedBackprop, ReluFamily


# -- NumPy references ------------------------------------------------------------------------------
def np_forward(family, z):
    y = np.where(z > family.threshold, z, 0.0)
    if family.max_value is not None:
        y = np.minimum(y, family.max_value)
    return y - family.negative_slope * np.maximum(family.threshold - z, 0.0)


def np_derivative(family, z):
    inside = z > family.threshold
    if family.max_value is not None:
        inside &= z < family.max_value
    return np.where(inside, 1.0, np.where(z < family.threshold, family.negative_slope, 0.0))


def np_rule(rule, family, z, dy):
    """dx of one activation: guided ``max(dy, 0)·f'(z)``, deconv ``max(dy, 0)``, half ``dy·f'(z)/2``."""
    if rule == "guided":
        return np.maximum(dy, 0.0) * np_derivative(family, z)
    if rule == "deconv":
        return np.maximum(dy, 0.0)
    if rule == "plain":
        return dy * np_derivative(family, z)
    return 0.5 * dy * np_derivative(family, z)


def away_from_kinks(family, z):
    kinks = [family.threshold] + ([family.max_value] if family.max_value is not None else [])
    return all(np.min(np.abs(z - k)) > 1e-3 for k in kinks)


class HalfGradient(ModifiedBackprop):
    """A rule of one's own, in keras.ops: half the plain gradient."""

    def grad(self, x, y, dy):
        return keras.ops.multiply(0.5, keras.ops.multiply(dy, self.derivative(x)))


def as_rule_argument(rule):
    return HalfGradient() if rule == "half" else rule


# -- models and their functions ----------------------------------------------------------------------
RNG = np.random.default_rng(7)
W1 = RNG.normal(size=(4, 5)).astype("float32")
B1 = RNG.normal(size=(5,)).astype("float32") * 0.5
W2 = RNG.normal(size=(5, 3)).astype("float32")
B2 = RNG.normal(size=(3,)).astype("float32")
X = RNG.normal(size=(2, 4)).astype("float32") * 2.0


class ReluInCall(keras.layers.Layer):
    """keras.ops.relu inside a custom layer's call."""

    def call(self, x):
        return keras.ops.relu(x)


def dense_model(block, name):
    model = keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(5, name="hidden"), block, keras.layers.Dense(3, name="out")], name=name
    )
    model.get_layer("hidden").set_weights([W1, B1])
    model.get_layer("out").set_weights([W2, B2])
    return model


BLOCKS = {
    "fused relu": (lambda: keras.layers.Activation("relu", name="act"), ReluFamily(), "relu"),
    "ReLU(max_value=6)": (lambda: keras.layers.ReLU(max_value=6, name="act"), ReluFamily(max_value=6.0), "relu6"),
    "LeakyReLU": (
        lambda: keras.layers.LeakyReLU(negative_slope=0.2, name="act"),
        ReluFamily(negative_slope=0.2),
        "leaky_relu(negative_slope=0.2)",
    ),
    "ReLU(all three)": (
        lambda: keras.layers.ReLU(max_value=1.5, negative_slope=0.1, threshold=0.25, name="act"),
        ReluFamily(negative_slope=0.1, max_value=1.5, threshold=0.25),
        "relu(negative_slope=0.1, max_value=1.5, threshold=0.25)",
    ),
    "ReLU(max_value=1.5)": (
        lambda: keras.layers.ReLU(max_value=1.5, name="act"),
        ReluFamily(max_value=1.5),
        "relu(max_value=1.5)",
    ),
    "minimum(relu, 1.5) by hand": (
        lambda: keras.layers.Lambda(lambda t: keras.ops.minimum(1.5, keras.ops.relu(t)), name="act"),
        ReluFamily(max_value=1.5),
        "relu(max_value=1.5)",
    ),
    "ops.relu in call": (lambda: ReluInCall(name="act"), ReluFamily(), "relu"),
    "Lambda": (lambda: keras.layers.Lambda(lambda t: keras.ops.relu(t), name="act"), ReluFamily(), "relu"),
}


def np_dense_gradient(rule, family, x, unit):
    """d out[:, unit] / d x of Dense -> activation -> Dense, the activation's backward by ``rule``."""
    z = x @ W1 + B1
    assert away_from_kinks(family, z)
    dz = np_rule(rule, family, z, np.broadcast_to(W2[:, unit], z.shape))
    return dz @ W1.T, np_forward(family, z) @ W2 + B2
