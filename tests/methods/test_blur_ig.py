"""Blur IG against PAIR's ``saliency.core.BlurIG`` and against its own definition."""

import keras
import numpy as np
import pytest
import saliency.core as saliency_core
import scipy.ndimage
import tensorflow as tf
from methods.pair_reference import pair_gradients

import saliency_kit as sk
from saliency_kit.methods.blur_ig import gaussian_matrix


def tiny_model(dtype="float64", size=12, classes=3):
    inputs = keras.Input((size, size, 2), dtype=dtype)
    h = keras.layers.Conv2D(4, 3, padding="same", activation="tanh", dtype=dtype)(inputs)
    h = keras.layers.Flatten(dtype=dtype)(h)
    outputs = keras.layers.Dense(classes, dtype=dtype)(h)
    return keras.Model(inputs, outputs)


@pytest.mark.parametrize("sigma", [0.0, 0.3, 1.7, 6.0, 40.0])
def test_blur_matrix_is_scipy_constant_mode(sigma):
    rng = np.random.default_rng(0)
    image = rng.normal(size=(13, 9, 2))
    expected = scipy.ndimage.gaussian_filter(image, (sigma, sigma, 0), mode="constant")
    got = np.einsum("ah,hwc,bw->abc", gaussian_matrix(13, sigma), image, gaussian_matrix(9, sigma))
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("sqrt", [False, True])
def test_matches_pair_blur_ig(sqrt):
    model = tiny_model()
    x = np.random.default_rng(1).uniform(0, 1, (2, 12, 12, 2))
    targets = np.array([[0, 2], [1, 0]])
    got = sk.explain(model, x, "blur_ig", targets=targets, steps=10, max_sigma=4.0, sqrt=sqrt, batch_size=7)
    for b in range(2):
        for k in range(2):
            # PAIR's sqrt spacing is sqrt(i · max_sigma / steps): its widest blur is sqrt(max_sigma)
            expected = saliency_core.BlurIG().GetMask(
                x[b],
                pair_gradients(model, targets[b, k]),
                steps=10,
                max_sigma=16.0 if sqrt else 4.0,
                sqrt=sqrt,
                batch_size=1,
            )
            np.testing.assert_allclose(got.attributions[b, k], expected, rtol=1e-4, atol=1e-6 * np.abs(expected).max())


def test_batch_size_and_per_input_independence():
    model = tiny_model("float32")
    x = np.random.default_rng(2).uniform(0, 1, (3, 12, 12, 2)).astype("float32")
    whole = sk.explain(model, x, "blur_ig", targets="top2", steps=6, max_sigma=3.0, batch_size=64)
    small = sk.explain(model, x, "blur_ig", targets="top2", steps=6, max_sigma=3.0, batch_size=1)
    alone = sk.explain(model, x[1:2], "blur_ig", targets=whole.targets[1:2], steps=6, max_sigma=3.0, batch_size=5)
    np.testing.assert_allclose(small.attributions, whole.attributions, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(alone.attributions[0], whole.attributions[1], rtol=1e-4, atol=1e-6)
    assert whole.maps.shape == (3, 2, 12, 12)


def test_linear_model_closed_form():
    """For a linear score s = Σ w ⊙ x, Blur IG with exact steps is w ⊙ (x − G_σmax x) in the limit;
    with a linear score the Riemann sum of the blur path telescopes exactly when grad_step is the
    step, so check s(x) − s(blurred) = Σ attributions."""
    size, steps, max_sigma = 10, 8, 3.0
    inputs = keras.Input((size, size, 1), dtype="float64")
    outputs = keras.layers.Dense(1, dtype="float64")(keras.layers.Flatten(dtype="float64")(inputs))
    model = keras.Model(inputs, outputs)
    x = np.random.default_rng(3).uniform(0, 1, (1, size, size, 1))
    got = sk.explain(model, x, "blur_ig", targets=0, steps=steps, max_sigma=max_sigma, grad_step=max_sigma / steps)
    blurred = scipy.ndimage.gaussian_filter(x[0], (max_sigma, max_sigma, 0), mode="constant")
    change = model(x).numpy()[0, 0] - model(blurred[None]).numpy()[0, 0]
    np.testing.assert_allclose(got.attributions.sum(), change, rtol=1e-6)


def test_refuses_tabular_inputs():
    inputs = keras.Input((5,))
    model = keras.Model(inputs, keras.layers.Dense(2)(inputs))
    with pytest.raises(ValueError, match=r"blur_ig blurs over spatial axes.*received shape \(2, 5\)"):
        sk.explain(model, np.zeros((2, 5), "float32"), "blur_ig", targets=0)
    with pytest.raises(ValueError, match="max_sigma must be a positive number"):
        sk.explain(model, np.zeros((2, 5), "float32"), "blur_ig", targets=0, max_sigma=-1.0)


@pytest.mark.parametrize("size", [7, 30])
def test_compiled_blur_matrices_equal_the_numpy_ones(size):
    from saliency_kit.methods.blur_ig import gaussian_matrices

    widths = np.array([0.0, 0.004, 0.2, 1.3, 5.0, 9.99, 50.0])
    got = np.asarray(gaussian_matrices(size, tf.constant(widths)))
    for w, matrix in zip(widths, got):
        np.testing.assert_allclose(matrix, gaussian_matrix(size, w), rtol=1e-12, atol=1e-15)
