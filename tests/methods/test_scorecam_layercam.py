"""Score-CAM and LayerCAM against tf-keras-vis ``Scorecam``/``Layercam`` and hand-written references."""

import numpy as np
import pytest

import saliency_kit as sk

keras = pytest.importorskip("keras")
tf = pytest.importorskip("tensorflow")
import tf_keras_vis.layercam as layercam_anchor
import tf_keras_vis.scorecam as scorecam_anchor
from tf_keras_vis.utils.scores import CategoricalScore  # noqa: E402


def same_size_model(channels=5, classes=4):
    """The CAM layer has the input's own size: no resizing, so the anchors' zoom does not matter."""
    inputs = keras.Input((10, 10, 3))
    h = keras.layers.Conv2D(channels, 3, padding="same", activation="relu", name="cam")(inputs)
    h = keras.layers.Conv2D(6, 3, padding="same", activation="relu")(h)
    h = keras.layers.GlobalAveragePooling2D()(h)
    return keras.Model(inputs, keras.layers.Dense(classes)(h))


def pooled_model(channels=4):
    inputs = keras.Input((12, 12, 2))
    h = keras.layers.Conv2D(channels, 3, padding="same", activation="relu")(inputs)
    h = keras.layers.MaxPooling2D(3, name="pooled")(h)
    h = keras.layers.Flatten()(h)
    return keras.Model(inputs, keras.layers.Dense(3)(h))


def images(shape, seed=0):
    return np.random.default_rng(seed).uniform(0, 1, shape).astype("float32")


@pytest.mark.parametrize("method", ["scorecam", "layercam"])
def test_matches_tf_keras_vis(method):
    model = same_size_model()
    x = images((3, 10, 10, 3))
    targets = np.array([[0, 3], [2, 1], [1, 1]])
    got = sk.explain(model, x, method, targets=targets, layer="cam", batch_size=5)
    anchor = (scorecam_anchor.Scorecam if method == "scorecam" else layercam_anchor.Layercam)(model)
    for k in range(2):
        expected = anchor(CategoricalScore(list(targets[:, k])), x, penultimate_layer="cam", normalize_cam=False)
        np.testing.assert_allclose(got.attributions[:, k], expected, rtol=1e-4, atol=1e-5 * np.abs(expected).max())
    assert got.attributions.shape == (3, 2, 10, 10) and got.layer == "cam"


def test_scorecam_resized_layer_by_hand():
    model = pooled_model()
    x = images((2, 12, 12, 2), 1)
    got = sk.explain(model, x, "scorecam", targets=[[2, 0], [1, 2]], layer="pooled", batch_size=3)
    tapped = keras.Model(model.input, [model.get_layer("pooled").output, model.output])
    activations = tapped(x)[0].numpy()  # [2, 4, 4, 4]
    for b in range(2):
        up = tf.image.resize(activations[b : b + 1], (12, 12), method="bilinear").numpy()[0]  # [12, 12, C]
        masks = (up - up.min(axis=(0, 1))) / (up.max(axis=(0, 1)) - up.min(axis=(0, 1)) + 1e-7)
        copies = x[b][None] * np.moveaxis(masks, -1, 0)[..., None]  # [C, 12, 12, 2]
        probabilities = tf.nn.softmax(model(copies), axis=-1).numpy()  # [C, classes]
        for k, cls in enumerate(got.targets[b]):
            low = np.maximum(np.einsum("c,hwc->hw", probabilities[:, cls], activations[b]), 0)
            expected = tf.image.resize(low[None, ..., None], (12, 12), method="bilinear").numpy()[0, ..., 0]
            np.testing.assert_allclose(got.attributions[b, k], expected, rtol=1e-4, atol=1e-6)


def test_scorecam_one_channel_layer_is_the_normalised_activation():
    model = same_size_model(channels=1)
    x = images((2, 10, 10, 3), 2)
    got = sk.explain(model, x, "scorecam", targets=1, layer="cam")
    activation = keras.Model(model.input, model.get_layer("cam").output)(x).numpy()[..., 0]

    def normalised(a):
        low, high = a.min(axis=(-2, -1), keepdims=True), a.max(axis=(-2, -1), keepdims=True)
        return (a - low) / (high - low)

    np.testing.assert_allclose(normalised(got.attributions[:, 0]), normalised(activation), atol=1e-5)


def test_faster_scorecam_keeps_each_inputs_channels_of_largest_spread():
    model = same_size_model(channels=6)
    x = images((2, 10, 10, 3), 3)
    fast = sk.explain(model, x, "scorecam", targets=0, layer="cam", max_channels=2, batch_size=4)
    activations = keras.Model(model.input, model.get_layer("cam").output)(x).numpy()
    for b in range(2):
        keep = np.argsort(-activations[b].std(axis=(0, 1)))[:2]
        masks = activations[b][..., keep]
        masks = (masks - masks.min(axis=(0, 1))) / (masks.max(axis=(0, 1)) - masks.min(axis=(0, 1)) + 1e-7)
        probabilities = tf.nn.softmax(model(x[b][None] * np.moveaxis(masks, -1, 0)[..., None]), axis=-1).numpy()
        expected = np.maximum(np.einsum("c,hwc->hw", probabilities[:, 0], activations[b][..., keep]), 0)
        np.testing.assert_allclose(fast.attributions[b, 0], expected, rtol=1e-4, atol=1e-6)
        # an input explained alone keeps the same channels (the anchor takes a union over the batch)
        alone = sk.explain(model, x[b : b + 1], "scorecam", targets=0, layer="cam", max_channels=2)
        np.testing.assert_allclose(alone.attributions[0, 0], fast.attributions[b, 0], rtol=1e-5, atol=1e-7)


def test_layercam_resized_layer_by_hand_and_batch_size():
    model = pooled_model()
    x = images((3, 12, 12, 2), 4)
    got = sk.explain(model, x, "layercam", targets="top2", layer="pooled", batch_size=1)
    again = sk.explain(model, x, "layercam", targets="top2", layer="pooled", batch_size=64)
    np.testing.assert_allclose(got.attributions, again.attributions, rtol=1e-5, atol=1e-7)
    tapped = keras.Model(model.input, [model.get_layer("pooled").output, model.output])
    for b in range(3):
        for k, cls in enumerate(got.targets[b]):
            xb = tf.constant(x[b : b + 1])
            with tf.GradientTape() as tape:
                a, out = tapped(xb)
                score = out[:, cls]
            g = tape.gradient(score, a).numpy()[0]
            low = np.maximum((np.maximum(g, 0) * a.numpy()[0]).sum(-1), 0)
            expected = tf.image.resize(low[None, ..., None], (12, 12), method="bilinear").numpy()[0, ..., 0]
            np.testing.assert_allclose(got.attributions[b, k], expected, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("method", ["scorecam", "layercam"])
def test_cams_need_spatial_inputs_and_a_layer_of_their_rank(method):
    flat = keras.Sequential([keras.Input((6,)), keras.layers.Dense(2)])
    with pytest.raises(ValueError, match=r"need image inputs \[B, H, W, C\].*received shape \(1, 6\)"):
        sk.explain(flat, np.zeros((1, 6), "float32"), method, targets=0)
    inputs = keras.Input((6, 3))  # a sequence, but no layer keeps its time axis
    model = keras.Model(inputs, keras.layers.Dense(2)(keras.layers.Flatten()(inputs)))
    with pytest.raises(ValueError, match=r"no layer with a 3-D \[batch, time, channels\] output"):
        sk.explain(model, np.zeros((1, 6, 3), "float32"), method, targets=0)
