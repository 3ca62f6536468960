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


def test_the_layer_may_be_given_as_the_layer_object(tiny_cnn):
    import keras
    import pytest

    model, x, A, W = tiny_cnn
    conv = model.get_layer("conv")
    for method in ("gradcam", "gradcam_plus_plus", "layercam", "scorecam"):
        by_object = sk.explain(model, x, method, 1, layer=conv)
        by_name = sk.explain(model, x, method, 1, layer="conv")
        assert by_object.layer == "conv" and by_object.options["layer"] == "conv"  # recorded as its path
        np.testing.assert_array_equal(by_object.attributions, by_name.attributions)
    cam = np.maximum((A * W[:, 1] / 16.0).sum(-1), 0)
    np.testing.assert_allclose(
        sk.explain(model, x, "gradcam", 1, layer=conv).attributions[:, 0], _upsample(cam), atol=1e-5
    )

    # a layer nested in an inner model is found by object too, as its path
    outer_in = keras.Input((8, 8, 2))
    wrapped = keras.Model(outer_in, model(outer_in), name="wrapper")
    nested = sk.explain(wrapped, x, "gradcam", 1, layer=conv)
    assert nested.layer == f"{model.name}/conv"
    np.testing.assert_allclose(nested.attributions[:, 0], _upsample(cam), atol=1e-5)

    stranger = keras.layers.Conv2D(3, 3, name="stranger")
    with pytest.raises(ValueError, match="'stranger' is not part of model"):
        sk.explain(model, x, "gradcam", 1, layer=stranger)
    with pytest.raises(TypeError, match="option 'layer' must be str or a keras layer or None; received 3"):
        sk.explain(model, x, "gradcam", 1, layer=3)
