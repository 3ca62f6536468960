"""SmoothGrad against closed forms on a linear model: the gradient is constant, so the mean is
the gradient, the mean of squares its square and the variance zero."""

import numpy as np

import saliency_kit as sk


def test_smoothgrad_of_a_linear_model(linear_image):
    model, x, w = linear_image
    mean = sk.explain(model, x, "smoothgrad", 3, samples=6, noise=0.5, seed=1)
    np.testing.assert_allclose(mean.attributions[:, 0], np.broadcast_to(w[3], x.shape), atol=1e-5)
    square = sk.explain(model, x, "smoothgrad", 3, samples=6, noise=0.5, aggregate="square", seed=1)
    np.testing.assert_allclose(square.attributions[:, 0], np.broadcast_to(w[3] ** 2, x.shape), atol=1e-5)
    variance = sk.explain(model, x, "smoothgrad", 3, samples=6, aggregate="variance", seed=1)
    np.testing.assert_allclose(variance.attributions, 0.0, atol=1e-5)
    # over gradient × input the noise matters: mean of (x + ε) · w = x·w + mean(ε)·w
    noisy = sk.explain(model, x, "smoothgrad", 3, base="gradient_x_input", samples=6, noise=0.5, seed=1)
    assert not np.allclose(noisy.attributions[:, 0], x * w[3], atol=1e-3)
    assert noisy.options["base"] == "gradient_x_input" and noisy.options["seed"] == 1
