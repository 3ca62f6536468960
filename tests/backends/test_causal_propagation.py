"""LRP and DeepLIFT through a causal, dilated ``Conv1D`` (the layer pads the time axis on the left
before convolving), on every backend: LRP-ε conserves the score of a bias-free model, DeepLIFT sums
to the difference from its baseline, and LRP-ε on a linear model is the input times the weight
each input reaches the score with, written out in NumPy."""

import keras
import numpy as np

import saliency_kit as sk

RNG = np.random.default_rng(5)
KERNEL = RNG.normal(size=(3, 4, 5)).astype("float32")
HEAD = RNG.normal(size=(7 * 5, 3)).astype("float32")
X = RNG.normal(size=(2, 7, 4)).astype("float32")


def _model(activation):
    inputs = keras.Input((7, 4))
    conv = keras.layers.Conv1D(5, 3, padding="causal", dilation_rate=2, use_bias=False, activation=activation)
    head = keras.layers.Dense(3, use_bias=False)
    model = keras.Model(inputs, head(keras.layers.Flatten()(conv(inputs))))
    conv.set_weights([KERNEL])
    head.set_weights([HEAD])
    return model


def _numpy_linear_weights(unit):
    """``[7, 4]``: ∂ out[unit] / ∂ x of the linear model, from the causal convolution written out:
    ``z[t, f] = Σ_j Σ_c x[t − 2(2 − j), c] · K[j, c, f]`` (terms before the start are zero)."""
    head = HEAD[:, unit].reshape(7, 5)
    weights = np.zeros((7, 4))
    for t in range(7):
        for j in range(3):
            source = t - 2 * (2 - j)
            if source >= 0:
                weights[source] += KERNEL[j] @ head[t]
    return weights


def test_lrp_epsilon_on_a_linear_causal_model_is_the_input_times_its_weights():
    explanation = sk.explain(_model(None), X, "lrp", targets=[0, 2], composite="epsilon", epsilon=1e-9)
    for row, unit in enumerate([0, 2]):
        expected = X[row] * _numpy_linear_weights(unit)
        np.testing.assert_allclose(explanation.attributions[row, 0], expected, rtol=1e-4, atol=1e-5)


def test_lrp_conserves_and_deeplift_sums_to_delta_through_a_causal_relu_convolution():
    model = _model("relu")
    scores = keras.ops.convert_to_numpy(model(X))[[0, 1], [0, 2]]
    lrp = sk.explain(model, X, "lrp", targets=[0, 2], composite="epsilon", epsilon=1e-9)
    np.testing.assert_allclose(lrp.attributions.reshape(2, -1).sum(-1), scores, rtol=1e-4, atol=1e-5)
    deeplift = sk.explain(model, X, "deeplift", targets=[0, 2])
    delta = scores - keras.ops.convert_to_numpy(model(np.zeros_like(X)))[[0, 1], [0, 2]]
    np.testing.assert_allclose(deeplift.attributions.reshape(2, -1).sum(-1), delta, rtol=1e-4, atol=1e-5)
