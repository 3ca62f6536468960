"""Attributions checked against answers computed independently: closed forms on a linear model,
hand-computed guided/deconv gradients, hand-computed Grad-CAM and Grad-CAM++, integrated-gradients
completeness on a small CNN, occlusion by hand."""
import keras
import numpy as np
import pytest
import tensorflow as tf

import saliency_kit as sk
from saliency_kit.methods.integrated_gradients import RULES, quadrature

B = 3


@pytest.fixture(scope="module")
def linear_image():
    """logits = flatten(x) · W + b on 6×5×2 "images": every gradient is a reshaped column of W."""
    keras.utils.set_random_seed(11)
    inputs = keras.Input((6, 5, 2))
    logits = keras.layers.Dense(4, name="dense")(keras.layers.Flatten()(inputs))
    model = keras.Model(inputs, keras.layers.Softmax()(logits))
    x = np.random.default_rng(0).uniform(-1, 2, size=(B, 6, 5, 2)).astype("float32")
    w = model.get_layer("dense").kernel.numpy().T.reshape(4, 6, 5, 2)  # w[k] = ∂z_k/∂x
    return model, x, w


def test_gradient_is_w(linear_image):
    model, x, w = linear_image
    expl = sk.explain(model, x, "gradient", [[0, 3]] * B)
    np.testing.assert_allclose(expl.attributions, np.broadcast_to(w[[0, 3]], (B, 2, 6, 5, 2)), atol=1e-6)
    np.testing.assert_allclose(expl.maps, np.abs(expl.attributions).max(-1))


def test_gradient_x_input_is_w_times_x(linear_image):
    model, x, w = linear_image
    expl = sk.explain(model, x, "gradient_x_input", 2)
    np.testing.assert_allclose(expl.attributions[:, 0], x * w[2], atol=1e-6)
    np.testing.assert_allclose(expl.maps[:, 0], (x * w[2]).sum(-1), atol=1e-5)


@pytest.mark.parametrize("rule", RULES)
def test_integrated_gradients_of_a_linear_model_is_w_times_x(linear_image, rule):
    model, x, w = linear_image
    expl = sk.explain(model, x, "integrated_gradients", 1, steps=7, rule=rule)
    np.testing.assert_allclose(expl.attributions[:, 0], x * w[1], atol=1e-5)
    np.testing.assert_allclose(expl.completeness_gap, 0.0, atol=1e-4)


def test_integrated_gradients_from_a_baseline(linear_image):
    model, x, w = linear_image
    baseline = np.linspace(-1, 1, 2, dtype="float32")  # one value per channel, broadcast
    expl = sk.explain(model, x, "integrated_gradients", 0, steps=4, baseline=baseline, batch_size=5)
    np.testing.assert_allclose(expl.attributions[:, 0], (x - baseline) * w[0], atol=1e-5)
    with pytest.raises(ValueError, match="broadcastable"):
        sk.explain(model, x, "integrated_gradients", 0, baseline=np.zeros(3))


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("steps", [2, 5, 16])
def test_quadrature_points_and_weights(rule, steps):
    alphas, weights = quadrature(rule, steps)
    assert len(alphas) == len(weights) == steps
    assert np.all((alphas >= 0) & (alphas <= 1))
    np.testing.assert_allclose(weights.sum(), 1.0, atol=1e-12)
    if rule == "gausslegendre":  # exact for polynomials of degree 2n−1: ∫₀¹ t^(2n−1) dt
        np.testing.assert_allclose((weights * alphas ** (2 * steps - 1)).sum(), 1 / (2 * steps), rtol=1e-10)
    if rule == "riemann_trapezoid":
        assert alphas[0] == 0 and alphas[-1] == 1


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
    np.testing.assert_allclose(coarse.attributions[:, 0][region], np.broadcast_to(
        expected[:, None, None, None], (B, 2, 2, 2)), atol=1e-5)


def test_occlusion_of_tabular_inputs_is_feature_ablation():
    keras.utils.set_random_seed(2)
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(2, name="dense")])
    x = np.random.default_rng(3).normal(size=(4, 6)).astype("float32")
    expl = sk.explain(model, x, "occlusion", 1)
    np.testing.assert_allclose(expl.attributions[:, 0], x * model.get_layer("dense").kernel.numpy()[:, 1], atol=1e-5)
    assert expl.maps.shape == (4, 1)  # reduced over the last axis, as API.md says


# -- guided backprop and deconvnet on a net small enough to do by hand ----------------------------
@pytest.fixture(scope="module")
def two_layer():
    """s = v · relu(W x): v has both signs, so guided backprop differs from the gradient."""
    inputs = keras.Input((3,))
    hidden = keras.layers.Dense(4, activation="relu", use_bias=False, name="hidden")(inputs)
    model = keras.Model(inputs, keras.layers.Dense(1, use_bias=False, name="out")(hidden))
    W = np.array([[1.0, -2.0, 0.5, 1.5], [0.5, 1.0, -1.0, 2.0], [-1.0, 0.5, 2.0, -0.5]], "float32")
    v = np.array([[2.0], [-1.0], [1.5], [-3.0]], "float32")
    model.get_layer("hidden").set_weights([W])
    model.get_layer("out").set_weights([v])
    x = np.array([[1.0, 1.0, 1.0], [2.0, -1.0, 0.5], [-1.0, 2.0, 1.0]], "float32")
    return model, x, W, v[:, 0]


@pytest.mark.filterwarnings("ignore:guided_backprop.*all zero")  # input 2: every active unit has v < 0
def test_guided_and_deconv_by_hand(two_layer):
    model, x, W, v = two_layer
    active = (x @ W > 0).astype("float32")  # [B, 4]
    plain = (active * v) @ W.T
    guided = (active * v * (v > 0)) @ W.T
    deconv = np.tile(np.maximum(v, 0) @ W.T, (len(x), 1))
    np.testing.assert_allclose(sk.explain(model, x, "gradient", 0).attributions[:, 0], plain, atol=1e-6)
    np.testing.assert_allclose(sk.explain(model, x, "guided_backprop", 0).attributions[:, 0], guided, atol=1e-6)
    np.testing.assert_allclose(sk.explain(model, x, "deconvnet", 0).attributions[:, 0], deconv, atol=1e-6)
    assert not np.allclose(plain, guided) and not np.allclose(guided, deconv)
    np.testing.assert_allclose(sk.jacobian(model, x, rule="guided")[:, 0], guided, atol=1e-6)
    # and the plain gradient is still plain afterwards
    np.testing.assert_allclose(sk.jacobian(model, x)[:, 0], plain, atol=1e-6)


# -- Grad-CAM by hand -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_cnn():
    """conv (stride 2, relu) → global average pool → dense: ∂z_k/∂A[i, j, c] = W[c, k] / (h w)."""
    keras.utils.set_random_seed(5)
    inputs = keras.Input((8, 8, 2))
    a = keras.layers.Conv2D(3, 3, strides=2, padding="same", activation="relu", name="conv")(inputs)
    z = keras.layers.Dense(2, name="dense")(keras.layers.GlobalAveragePooling2D()(a))
    model = keras.Model(inputs, keras.layers.Softmax()(z))
    dense = model.get_layer("dense")
    dense.set_weights([np.array([[1.0, -1.0], [-2.0, 2.0], [1.5, -1.0]], "float32"), np.zeros(2, "float32")])
    x = np.random.default_rng(4).normal(size=(2, 8, 8, 2)).astype("float32")
    A = keras.Model(inputs, a)(x).numpy()  # [2, 4, 4, 3]
    return model, x, A, model.get_layer("dense").kernel.numpy()


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


# -- integrated-gradients completeness on a small CNN --------------------------------------------
def test_integrated_gradients_completeness_on_a_cnn():
    keras.utils.set_random_seed(9)
    init = {"kernel_initializer": "he_normal", "bias_initializer": "zeros"}
    model = keras.Sequential([
        keras.Input((12, 12, 3)),
        keras.layers.Conv2D(8, 3, activation="relu", **init),
        keras.layers.MaxPooling2D(),
        keras.layers.Conv2D(8, 3, activation="relu", **init),
        keras.layers.Flatten(),
        keras.layers.Dense(16, activation="relu", **init),
        keras.layers.Dense(3, activation="softmax", **init),
    ])
    x = np.random.default_rng(6).uniform(0, 1, size=(2, 12, 12, 3)).astype("float32")
    targets = [[0, 1]] * 2
    expl = sk.explain(model, x, "integrated_gradients", targets, steps=256, batch_size=128)
    at_baseline = sk.engine.forward_scores(model, np.zeros_like(x), expl.targets)
    change = expl.scores - at_baseline
    assert np.all(np.abs(change) > 0.05), change
    assert np.all(np.abs(expl.completeness_gap) <= 0.01 * np.abs(change)), (expl.completeness_gap, change)
    total = expl.attributions.reshape(2, 2, -1).sum(-1)
    np.testing.assert_allclose(total - change, expl.completeness_gap, atol=1e-4)
    # the gap is a quadrature error: with 4 steps it is visibly larger
    rough = sk.explain(model, x, "integrated_gradients", targets, steps=4)
    assert np.abs(rough.completeness_gap).max() > np.abs(expl.completeness_gap).max()
