"""Grad-CAM, Grad-CAM++ and guided Grad-CAM computed by hand on a tiny CNN whose channel
gradients are W[c, k] / (h w)."""
import numpy as np
import tensorflow as tf

import saliency_kit as sk


def _upsample(cam):
    return tf.image.resize(cam[..., None], (8, 8), method="bilinear").numpy()[..., 0]


def test_gradcam_by_hand(tiny_cnn):
    model, x, A, W = tiny_cnn
    expl = sk.explain(model, x, "gradcam", [[0, 1]] * 2)
    assert expl.layer == "conv" and expl.attributions.shape == (2, 2, 8, 8)
    for k in range(2):
        alpha = W[:, k] / 16.0
        cam = np.maximum((A * alpha).sum(-1), 0)
        np.testing.assert_allclose(expl.attributions[:, k], _upsample(cam), atol=1e-5)
    raw = sk.explain(model, x, "gradcam", [[0, 1]] * 2, relu=False, layer="conv")
    for k in range(2):
        np.testing.assert_allclose(raw.maps[:, k], _upsample((A * W[:, k] / 16.0).sum(-1)), atol=1e-5)
    assert (raw.maps < 0).any()  # so relu=True above really clipped something


def test_gradcam_plus_plus_by_hand(tiny_cnn):
    model, x, A, W = tiny_cnn
    expl = sk.explain(model, x, "gradcam_plus_plus", 1)
    g = np.broadcast_to(W[:, 1] / 16.0, A.shape)
    alpha = g**2 / np.where(g != 0, 2 * g**2 + A.sum(axis=(1, 2), keepdims=True) * g**3, 1)
    weights = (alpha * np.maximum(g, 0)).sum(axis=(1, 2))  # [B, c]
    cam = np.maximum(np.einsum("bc,bhwc->bhw", weights, A), 0)
    np.testing.assert_allclose(expl.attributions[:, 0], _upsample(cam), rtol=1e-4, atol=1e-6)


def test_guided_gradcam_is_guided_times_cam(tiny_cnn):
    model, x, _, _ = tiny_cnn
    guided = sk.explain(model, x, "guided_backprop", 0).attributions
    cam = sk.explain(model, x, "gradcam", 0).attributions
    both = sk.explain(model, x, "guided_gradcam", 0)
    np.testing.assert_allclose(both.attributions, guided * cam[..., None], atol=1e-6)
    assert both.attributions.shape == x[:, None].shape and both.layer == "conv"
