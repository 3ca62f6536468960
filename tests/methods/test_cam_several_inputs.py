"""CAM methods on models with several image inputs, against references computed by hand.

A siamese pair runs one branch (``branch/conv``) on both inputs: the layer has one call per input,
and each input's map must come from the activations and gradients of its own call. The
references build the branch alone from its weights (``tf.nn.conv2d``), apply it to each input,
differentiate the head with ``tf.GradientTape`` with respect to each call's activations and
write each method's formula and the half-pixel bilinear upsampling in NumPy. A layer after a
merge of two images of different sizes has one map in its own space, upsampled to each input.
A layer called twice on one input's path is refused.
"""

import os
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras
import numpy as np
import pytest
import tensorflow as tf
from twin_support import RELU, twin_activation

import saliency_kit as sk

RNG = np.random.default_rng(31)
B = 3
TARGETS = np.tile([0, 2], (B, 1))
CAMS = ["gradcam", "gradcam_plus_plus", "layercam", "guided_gradcam", "scorecam"]


def upsample(maps, size):
    """``maps [B, h, w]`` -> ``[B, *size]``: linear along each axis, half-pixel centres, edges held."""

    def weights(n_in, n_out):
        source = np.clip((np.arange(n_out) + 0.5) * n_in / n_out - 0.5, 0, n_in - 1)
        low = np.floor(source).astype(int)
        high = np.minimum(low + 1, n_in - 1)
        matrix = np.zeros((n_out, n_in))
        np.add.at(matrix, (np.arange(n_out), low), 1 - (source - low))
        np.add.at(matrix, (np.arange(n_out), high), source - low)
        return matrix

    rows, columns = weights(maps.shape[1], size[0]), weights(maps.shape[2], size[1])
    return np.einsum("Hh,bhw,Ww->bHW", rows, maps, columns)


def conv(layer, x, act=None, strides=1):
    kernel, bias = (tf.constant(w) for w in layer.get_weights())
    out = tf.nn.conv2d(x, kernel, strides, "VALID") + bias
    return out if act is None else act(out, RELU)


def dense(layer, t):
    kernel, bias = (tf.constant(w) for w in layer.get_weights())
    return t @ kernel + bias


def cam_formulas(A, g):
    """Grad-CAM, Grad-CAM++ and LayerCAM (before the final relu) of activations ``A [B, h, w, c]``
    and gradients ``g [B, h, w, c]``: ``{method: [B, h, w]}``."""
    gradcam = np.einsum("bc,bhwc->bhw", g.mean(axis=(1, 2)), A)
    total = A.sum(axis=(1, 2), keepdims=True)
    denominator = 2 * g**2 + total * g**3
    alpha = np.where(denominator != 0, g**2 / np.where(denominator != 0, denominator, 1), 0)
    plus = np.einsum("bc,bhwc->bhw", (alpha * np.maximum(g, 0)).sum(axis=(1, 2)), A)
    layercam = (np.maximum(g, 0) * A).sum(axis=-1)
    return {"gradcam": gradcam, "gradcam_plus_plus": plus, "layercam": layercam}


# -- a siamese pair: one branch, two calls -----------------------------------------------------------------
@pytest.fixture(scope="module")
def siamese():
    keras.utils.set_random_seed(11)
    shared = keras.layers.Conv2D(3, 3, activation="relu", name="conv")
    branch = keras.Sequential([keras.Input((6, 6, 2)), shared, keras.layers.Flatten()], name="branch")
    left, right = keras.Input((6, 6, 2), name="left"), keras.Input((6, 6, 2), name="right")
    head = keras.layers.Dense(3, name="head")
    model = keras.Model([left, right], head(keras.layers.Subtract()([branch(left), branch(right)])), name="siamese")
    x = [RNG.normal(size=(B, 6, 6, 2)).astype("float32") for _ in range(2)]
    return model, x, shared, head


def siamese_logits(shared, head, x, act):
    """The pair's logits ``[B, 3]`` from the branch written by hand, applied to each input."""
    flat = [tf.reshape(conv(shared, tf.constant(v), act), [len(v), -1]) for v in x]
    return dense(head, flat[0] - flat[1])


def siamese_references(shared, head, x):
    """``{method: [input][B, K, 6, 6]}``: each input's maps from its own call of the branch."""
    activations = [conv(shared, tf.constant(v), twin_activation("plain")) for v in x]  # [B, 4, 4, 3] each
    out: dict = {name: [np.zeros((B, 2, 6, 6)) for _ in x] for name in [*CAMS, "gradcam_raw"]}
    out["guided_gradcam"] = [np.zeros((B, 2, 6, 6, 2)) for _ in x]
    for k, c in enumerate(TARGETS[0]):
        with tf.GradientTape() as tape:
            tape.watch(activations)
            flat = [tf.reshape(a, [B, -1]) for a in activations]
            score = tf.reduce_sum(dense(head, flat[0] - flat[1])[:, c])
        grads = tape.gradient(score, activations)
        points = [tf.constant(v) for v in x]
        with tf.GradientTape() as tape:  # guided backprop: the branch's ReLU passes positive gradients only
            tape.watch(points)
            score = tf.reduce_sum(siamese_logits(shared, head, points, twin_activation("guided"))[:, c])
        guided = [g.numpy() for g in tape.gradient(score, points)]
        for i, (A, g) in enumerate(zip(activations, grads)):
            A, g = A.numpy().astype(np.float64), g.numpy().astype(np.float64)
            for name, value in cam_formulas(A, g).items():
                out[name][i][:, k] = upsample(np.maximum(value, 0), (6, 6))
            out["gradcam_raw"][i][:, k] = upsample(cam_formulas(A, g)["gradcam"], (6, 6))
            out["guided_gradcam"][i][:, k] = guided[i] * out["gradcam"][i][:, k, ..., None]
            # Score-CAM: each channel, upsampled and scaled to [0, 1], masks this input, the other held
            weights = np.zeros((B, A.shape[-1]))
            for channel in range(A.shape[-1]):
                up = upsample(A[..., channel], (6, 6))
                low, high = up.min(axis=(1, 2), keepdims=True), up.max(axis=(1, 2), keepdims=True)
                masked = list(x)
                masked[i] = (x[i] * ((up - low) / (high - low + 1e-7))[..., None]).astype("float32")
                logits = siamese_logits(shared, head, masked, twin_activation("plain")).numpy().astype(np.float64)
                probabilities = np.exp(logits - logits.max(axis=1, keepdims=True))
                weights[:, channel] = (probabilities / probabilities.sum(axis=1, keepdims=True))[:, c]
            out["scorecam"][i][:, k] = upsample(np.maximum(np.einsum("bc,bhwc->bhw", weights, A), 0), (6, 6))
    return out


@pytest.mark.parametrize("swap", [False, True], ids=["left-right", "right-left"])
@pytest.mark.parametrize("method", CAMS)
def test_each_input_of_a_shared_branch_gets_the_maps_of_its_own_call(siamese, method, swap):
    model, x, shared, head = siamese
    x = x[::-1] if swap else x
    np.testing.assert_allclose(
        model(x).numpy(), siamese_logits(shared, head, x, twin_activation("plain")), rtol=1e-5, atol=1e-6
    )  # the hand-built pair is the model
    want = siamese_references(shared, head, x)[method]
    assert np.abs(want[0] - want[1]).max() > 1e-3, "the two inputs' maps differ, so a mix-up shows"
    e = sk.explain(model, x, method, targets=TARGETS)
    assert e.layer == "branch/conv" and len(e.attributions) == 2
    for i, (got, expected) in enumerate(zip(e.attributions, want)):
        assert np.abs(expected).reshape(B, -1).max(axis=1).min() > 1e-4, f"input {i}'s reference maps are alive"
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-6, err_msg=f"{method}, input {i}")


def test_gradcam_without_the_final_relu_keeps_each_calls_sign(siamese):
    model, x, shared, head = siamese
    want = siamese_references(shared, head, x)["gradcam_raw"]
    e = sk.explain(model, x, "gradcam", targets=TARGETS, relu=False)
    for got, expected in zip(e.attributions, want):
        assert (expected < 0).any() and (expected > 0).any()
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-6)


def test_one_input_of_the_pair_alone(siamese):
    model, x, shared, head = siamese
    want = siamese_references(shared, head, x)["gradcam"]
    e = sk.explain(model, {"left": x[0], "right": x[1]}, "gradcam", targets=TARGETS, attribute_to="right")
    assert set(e.parts) == {"right"}
    np.testing.assert_allclose(e.map_of("right"), want[1], rtol=1e-4, atol=1e-6)


def test_where_one_output_of_the_shared_layer_is_needed_it_is_refused(siamese):
    model, x, _, _ = siamese
    for method in ("gradient", "conductance"):  # the layer's output explained: not one tensor
        with pytest.raises(ValueError, match="'branch/conv' is called more than once in model 'siamese'"):
            sk.explain(model, x, method, targets=0, attribute_to="branch/conv")


# -- a layer after a merge of two images of different sizes ----------------------------------------------
@pytest.mark.parametrize("merge", ["concatenate", "add"])
def test_a_layer_after_a_merge_has_one_map_upsampled_to_each_image(merge):
    keras.utils.set_random_seed(12)
    small, large = keras.Input((8, 8, 2), name="small"), keras.Input((14, 14, 2), name="large")
    conv_small = keras.layers.Conv2D(3, 3, name="conv_small")  # 8×8 -> 6×6
    conv_large = keras.layers.Conv2D(3, 3, strides=2, name="conv_large")  # 14×14 -> 6×6
    joined = {"concatenate": keras.layers.Concatenate(), "add": keras.layers.Add()}[merge]
    joint = keras.layers.Conv2D(4, 1, activation="relu", name="joint")
    head = keras.layers.Dense(3, name="head")
    pooled = keras.layers.GlobalAveragePooling2D()(joint(joined([conv_small(small), conv_large(large)])))
    model = keras.Model([small, large], head(pooled), name=f"merge_{merge}")
    x = [RNG.normal(size=(B, 8, 8, 2)).astype("float32"), RNG.normal(size=(B, 14, 14, 2)).astype("float32")]

    # by hand: the merged feature maps, the joint layer's activations, the head's gradient
    features = [conv(conv_small, tf.constant(x[0])), conv(conv_large, tf.constant(x[1]), strides=2)]
    merged = tf.concat(features, axis=-1) if merge == "concatenate" else features[0] + features[1]
    kernel, bias = (tf.constant(w) for w in joint.get_weights())
    A = tf.nn.relu(tf.einsum("bhwi,io->bhwo", merged, kernel[0, 0]) + bias)  # [B, 6, 6, 4]
    for method in ("gradcam", "layercam"):
        e = sk.explain(model, x, method, targets=TARGETS)
        assert e.layer == "joint" and [a.shape for a in e.attributions] == [(B, 2, 8, 8), (B, 2, 14, 14)]
        for k, c in enumerate(TARGETS[0]):
            with tf.GradientTape() as tape:
                tape.watch(A)
                score = tf.reduce_sum(dense(head, tf.reduce_mean(A, axis=[1, 2]))[:, c])
            g = tape.gradient(score, A).numpy().astype(np.float64)
            own = np.maximum(cam_formulas(A.numpy().astype(np.float64), g)[method], 0)  # [B, 6, 6], the layer's space
            assert own.reshape(B, -1).max(axis=1).min() > 0
            np.testing.assert_allclose(e.attributions[0][:, k], upsample(own, (8, 8)), rtol=1e-4, atol=1e-6)
            np.testing.assert_allclose(e.attributions[1][:, k], upsample(own, (14, 14)), rtol=1e-4, atol=1e-6)


# -- a layer called twice on one input's path ---------------------------------------------------------------
def test_a_layer_called_twice_on_one_inputs_path_is_refused():
    keras.utils.set_random_seed(13)
    shared = keras.layers.Conv2D(2, 3, padding="same", name="shared")
    head = keras.layers.Dense(3, name="head")
    image = keras.Input((6, 6, 2), name="image")
    pooled = keras.layers.GlobalAveragePooling2D()(shared(shared(image)))
    twice = keras.Model(image, keras.layers.Dense(3)(pooled), name="twice")
    x = RNG.normal(size=(B, 6, 6, 2)).astype("float32")
    for method in ("gradcam", "scorecam"):
        with pytest.raises(ValueError, match="'shared' is called more than once in model 'twice'"):
            sk.explain(twice, x, method, targets=0, layer="shared")

    left, right = keras.Input((6, 6, 2), name="left"), keras.Input((6, 6, 2), name="right")
    pool = keras.layers.GlobalAveragePooling2D()
    z = keras.layers.Concatenate()([pool(shared(shared(left))), pool(shared(right))])
    pair = keras.Model([left, right], head(z), name="pair")
    x = [RNG.normal(size=(B, 6, 6, 2)).astype("float32") for _ in range(2)]
    with pytest.raises(ValueError, match="'shared' is called more than once on the path from input 'left'"):
        sk.explain(pair, x, "gradcam", targets=TARGETS, layer="shared")
    # the right input's path has one call: its map is that call's (the head's gradient is constant)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        e = sk.explain(pair, x, "gradcam", targets=TARGETS, layer="shared", attribute_to="right", relu=False)
    assert e.attributions[0] is None
    kernel, bias = (tf.constant(w) for w in shared.get_weights())
    A = (tf.nn.conv2d(tf.constant(x[1]), kernel, 1, "SAME") + bias).numpy().astype(np.float64)
    W = head.get_weights()[0]
    for k, c in enumerate(TARGETS[0]):
        g = np.broadcast_to(W[2:4, c] / 36.0, A.shape)
        np.testing.assert_allclose(e.attributions[1][:, k], cam_formulas(A, g)["gradcam"], rtol=1e-4, atol=1e-6)
