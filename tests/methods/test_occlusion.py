"""Occlusion against hand computations: on a linear model a window's drop is Σ w·(x − value)."""

import keras
import numpy as np

import saliency_kit as sk

B = 3


def test_occlusion_of_a_linear_model(linear_image):
    model, x, w = linear_image
    # window 1×1 over all channels: the drop at (i, j) is Σ_c w[i, j, c] x[i, j, c]
    expl = sk.explain(model, x, "occlusion", 1, window=1, stride=1)
    drop = (w[1] * x).sum(-1, keepdims=True)
    np.testing.assert_allclose(expl.attributions[:, 0], np.broadcast_to(drop, x.shape), atol=1e-5)
    # 2×2 windows, stride 2 (plus an edge window at column 3): pixels covered once get their window's drop
    coarse = sk.explain(model, x, "occlusion", 1, window=(2, 2), stride=2, value=0.5)
    region = (slice(None), slice(2, 4), slice(0, 2))
    expected = ((x - 0.5) * w[1])[region].sum(axis=(1, 2, 3))
    np.testing.assert_allclose(
        coarse.attributions[:, 0][region], np.broadcast_to(expected[:, None, None, None], (B, 2, 2, 2)), atol=1e-5
    )


def test_occlusion_of_tabular_inputs_is_feature_ablation():
    keras.utils.set_random_seed(2)
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(2, name="dense")])
    x = np.random.default_rng(3).normal(size=(4, 6)).astype("float32")
    expl = sk.explain(model, x, "occlusion", 1)
    np.testing.assert_allclose(expl.attributions[:, 0], x * model.get_layer("dense").kernel.numpy()[:, 1], atol=1e-5)
    assert expl.maps.shape == (4, 1)  # reduced over the last axis, as documented
