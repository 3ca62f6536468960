"""The engine on JAX, checked by hand: gradients and layer gradients of small models whose weights
are set by hand equal NumPy's closed forms; one compiled kernel per (model, method, shapes),
reused; a kernel reads the weights at every call (training is seen, never a stale constant); the
user's model is left as it was."""

import keras
import numpy as np
import pytest

import saliency_kit as sk
from saliency_kit import engine

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "jax", reason="runs in the JAX process: KERAS_BACKEND=jax pytest tests/backends"
)

RNG = np.random.default_rng(11)


def dense_relu_dense():
    model = keras.Sequential(
        [keras.Input((6,)), keras.layers.Dense(5, activation="relu", name="hidden"), keras.layers.Dense(3, name="out")]
    )
    w1, b1 = RNG.normal(size=(6, 5)).astype("float32"), RNG.normal(size=5).astype("float32") * 0.3
    w2, b2 = RNG.normal(size=(5, 3)).astype("float32"), RNG.normal(size=3).astype("float32")
    model.layers[0].set_weights([w1, b1])
    model.layers[1].set_weights([w2, b2])
    return model, (w1, b1, w2, b2)


def closed_form(x, weights, columns):
    """Scores ``[B, K]``, input gradients ``[B, K, 6]`` and hidden-layer gradients ``[B, K, 5]``."""
    w1, b1, w2, b2 = weights
    h = x @ w1 + b1
    scores = (np.maximum(h, 0) @ w2 + b2)[:, columns]
    at_hidden = np.broadcast_to(w2.T[columns][None], (len(x), len(columns), 5))
    at_input = ((h > 0)[:, None, :] * w2.T[columns][None]) @ w1.T
    return scores, at_input, at_hidden


def test_the_backend_is_jax():
    assert sk.backend() == "jax"
    assert engine.backend.active().__name__ == "saliency_kit.engine.jax"


def test_gradients_and_scores_equal_the_closed_form():
    model, weights = dense_relu_dense()
    x = RNG.normal(size=(5, 6)).astype("float32")
    columns = [0, 2]
    explanation = sk.explain(model, x, "gradient", targets=np.tile(columns, (5, 1)), batch_size=2)
    scores, at_input, _ = closed_form(x, weights, columns)
    np.testing.assert_allclose(explanation.attributions, at_input, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(explanation.scores, scores, rtol=1e-5, atol=1e-6)
    assert explanation.backend == "jax"


def test_a_layers_gradient_is_the_closed_form():
    """``attribute_to=`` the hidden layer: gradient × (activation − its value at the baseline) is
    read from the layer's gradient, taken through a zero shift of its output."""
    model, weights = dense_relu_dense()
    x = RNG.normal(size=(3, 6)).astype("float32")
    explanation = sk.explain(model, x, "gradient", targets=np.tile([1], (3, 1)), attribute_to="hidden")
    _, _, at_hidden = closed_form(x, weights, [1])
    np.testing.assert_allclose(explanation.attributions, at_hidden, rtol=1e-5, atol=1e-6)


def test_one_kernel_is_compiled_and_reused():
    model, _ = dense_relu_dense()
    x = RNG.normal(size=(4, 6)).astype("float32")
    sk.explain(model, x, "integrated_gradients", targets=0, steps=8)
    traces = engine.trace_count()
    sk.explain(model, x + 1, "integrated_gradients", targets=0, steps=8)
    assert engine.trace_count() == traces


def test_a_kernel_sees_new_weights():
    model, weights = dense_relu_dense()
    x = RNG.normal(size=(2, 6)).astype("float32")
    sk.explain(model, x, "gradient", targets=0)
    w1, b1, w2, b2 = weights
    model.layers[1].set_weights([w2 * 2, b2])
    after = sk.explain(model, x, "gradient", targets=0)
    _, expected, _ = closed_form(x, (w1, b1, w2 * 2, b2), [0])
    np.testing.assert_allclose(after.attributions, expected, rtol=1e-5, atol=1e-6)


def test_the_model_is_left_as_it_was():
    model, _ = dense_relu_dense()
    before = [np.array(w) for w in model.get_weights()]
    config = model.get_config()
    sk.explain(model, RNG.normal(size=(2, 6)).astype("float32"), "integrated_gradients", targets=1, steps=4)
    assert model.get_config() == config
    for old, new in zip(before, model.get_weights()):
        np.testing.assert_array_equal(old, new)
