"""The engine on the models people really write: mixed precision with several classes,
subclassed models, a model edited between calls, channels-first convolutions, and bounded
kernel caches (a new lambda or rule per call, many input sizes)."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from method_support import input_methods, small_options

import saliency_kit as sk
from saliency_kit import engine

IMAGE_METHODS = [
    name
    for name in input_methods()
    if name
    in (
        "gradient",
        "gradient_x_input",
        "guided_backprop",
        "deconvnet",
        "integrated_gradients",
        "smoothgrad",
        "gradcam",
        "gradcam_plus_plus",
        "guided_gradcam",
        "occlusion",
    )
]


def _cnn(name="cnn"):
    inputs = keras.Input((8, 8, 3))
    h = keras.layers.Conv2D(4, 3, activation="relu", name="conv")(inputs)
    h = keras.layers.GlobalAveragePooling2D()(h)
    return keras.Model(inputs, keras.layers.Dense(4, activation="softmax", name="dense")(h), name=name)


@pytest.fixture(scope="module")
def pair():
    keras.utils.set_random_seed(3)
    full = _cnn()
    keras.mixed_precision.set_dtype_policy("mixed_float16")
    try:
        half = _cnn("half")
    finally:
        keras.mixed_precision.set_dtype_policy("float32")
    half.set_weights(full.get_weights())
    x = np.random.default_rng(0).uniform(-1, 1, size=(2, 8, 8, 3)).astype("float32")
    return full, half, x


@pytest.mark.parametrize("method", IMAGE_METHODS)
def test_mixed_float16_with_three_classes(pair, method):
    full, half, x = pair
    targets = [[0, 1, 3]] * 2
    a = sk.explain(full, x, method, targets, **small_options(method, x.shape[1:]))
    b = sk.explain(half, x, method, targets, **small_options(method, x.shape[1:]))
    assert b.attributions.shape == a.attributions.shape and b.attributions.dtype == np.float32
    assert np.all(np.isfinite(b.attributions))
    scale = np.abs(a.attributions).max()
    # noisy copies near a ReLU's kink may switch it in float16 but not in float32
    np.testing.assert_allclose(b.attributions, a.attributions, atol=(0.1 if method == "smoothgrad" else 0.03) * scale)
    np.testing.assert_allclose(b.scores, a.scores, atol=0.02 * np.abs(a.scores).max())


def test_mixed_float16_jacobian_with_three_classes(pair):
    full, half, x = pair
    a = sk.jacobian(full, x, [0, 2, 3])
    b = sk.jacobian(half, x, [0, 2, 3])
    assert b.shape == (2, 3, 8, 8, 3)
    np.testing.assert_allclose(b, a, atol=0.03 * np.abs(a).max())


# -- subclassed models ---------------------------------------------------------------------------
class Subclassed(keras.Model):
    """dense(relu(conv(x))) written as a subclass: no symbolic inputs or outputs."""

    def __init__(self):
        super().__init__()
        self.conv = keras.layers.Conv2D(4, 3, name="conv")
        self.pool = keras.layers.GlobalAveragePooling2D()
        self.dense = keras.layers.Dense(3, name="dense")

    def call(self, x):
        return self.dense(self.pool(tf.nn.relu(self.conv(x))))


@pytest.fixture(scope="module")
def subclassed():
    keras.utils.set_random_seed(5)
    model = Subclassed()
    x = np.random.default_rng(1).uniform(-1, 1, size=(2, 8, 8, 3)).astype("float32")
    model(x[:1])  # built by calling it once
    twin = _functional_twin(model)
    return model, twin, x


def _functional_twin(model):
    """The same network as a functional model sharing the subclass's layers (an independent
    route to the same gradients)."""
    inputs = keras.Input((8, 8, 3))
    out = model.dense(model.pool(keras.layers.ReLU()(model.conv(inputs))))
    return keras.Model(inputs, out)


@pytest.mark.parametrize("method", ["gradient", "gradient_x_input", "integrated_gradients", "smoothgrad", "occlusion"])
def test_a_subclassed_model_explains_like_its_functional_twin(subclassed, method):
    model, twin, x = subclassed
    a = sk.explain(model, x, method, [[0, 2]] * 2, **small_options(method, x.shape[1:]))
    b = sk.explain(twin, x, method, [[0, 2]] * 2, **small_options(method, x.shape[1:]))
    np.testing.assert_allclose(a.attributions, b.attributions, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(a.scores, b.scores, rtol=1e-5, atol=1e-6)


def test_a_subclassed_model_jacobian_and_top_k(subclassed):
    model, twin, x = subclassed
    np.testing.assert_allclose(sk.jacobian(model, x), sk.jacobian(twin, x), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(
        sk.explain(model, x, "gradient", "top2").targets, sk.explain(twin, x, "gradient", "top2").targets
    )


@pytest.mark.parametrize("model, message", [(None, "received None"), (lambda x: x, "received a function")])
def test_a_model_that_is_not_a_keras_model_is_a_type_error(model, message):
    with pytest.raises(TypeError, match=f"model must be a keras.Model.*{message}"):
        sk.explain(model, np.zeros((1, 3), "float32"))
    with pytest.raises(TypeError, match="model must be a keras.Model"):
        sk.jacobian(model, np.zeros((1, 3), "float32"))


def test_an_unbuilt_subclassed_model_is_asked_to_be_built():
    with pytest.raises(ValueError, match="build it first"):
        sk.explain(Subclassed(), np.zeros((1, 8, 8, 3), "float32"))


# -- a model edited between calls ----------------------------------------------------------------
def test_editing_the_final_activation_between_calls_is_seen():
    keras.utils.set_random_seed(8)
    inputs = keras.Input((5,))
    model = keras.Model(inputs, keras.layers.Dense(3, activation="softmax", name="dense")(inputs))
    x = np.random.default_rng(2).normal(size=(2, 5)).astype("float32")
    w = model.get_layer("dense").kernel.numpy()
    before = sk.explain(model, x, "gradient", 1, score="output")
    model.layers[-1].activation = keras.activations.linear
    after = sk.explain(model, x, "gradient", 1, score="output")
    np.testing.assert_allclose(after.attributions[:, 0], np.tile(w[:, 1], (2, 1)), atol=1e-6)
    assert not np.allclose(before.attributions, after.attributions)
    np.testing.assert_allclose(after.scores[:, 0], x @ w[:, 1] + model.get_layer("dense").bias.numpy()[1], atol=1e-5)
    logits = sk.explain(model, x, "gradient", 1)  # nothing to strip any more: the same
    np.testing.assert_allclose(logits.attributions, after.attributions, atol=1e-6)


# -- bounded caches ------------------------------------------------------------------------------
def _column(k):
    return lambda out: out[:, k]  # a new lambda object on every call


COLUMN = 1


def test_a_new_lambda_per_call_reuses_one_kernel():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    x = np.ones((2, 4), "float32")
    w = model.layers[-1].kernel.numpy()
    sk.explain(model, x, "gradient", _column(1))
    kernels = engine.kernel_count(model)
    for _ in range(5):
        sk.explain(model, x, "gradient", _column(1))
    assert engine.kernel_count(model) == kernels
    two = sk.explain(model, x, "gradient", _column(2))  # another value in its closure: its own kernel
    assert engine.kernel_count(model) == kernels + 1
    np.testing.assert_allclose(two.attributions[:, 0], np.tile(w[:, 2], (2, 1)), atol=1e-6)


def test_a_lambda_reading_a_changed_global_is_not_served_a_stale_kernel():
    global COLUMN
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    x = np.ones((2, 4), "float32")
    w = model.layers[-1].kernel.numpy()
    try:
        for COLUMN in (0, 2):
            expl = sk.explain(model, x, "gradient", lambda out: out[:, COLUMN])
            np.testing.assert_allclose(expl.attributions[:, 0], np.tile(w[:, COLUMN], (2, 1)), atol=1e-6)
    finally:
        COLUMN = 1


def test_many_input_sizes_keep_a_bounded_number_of_kernels():
    model = keras.Sequential([keras.Input((None, 2)), keras.layers.GlobalAveragePooling1D(), keras.layers.Dense(2)])
    for length in range(1, engine.KERNELS_PER_MODEL + 9):
        sk.explain(model, np.ones((1, length, 2), "float32"), "gradient", 0)
    assert engine.kernel_count(model) == engine.KERNELS_PER_MODEL


# -- channels-first ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def channels_first():
    """x [B, C=2, H=6, W=6] → 1×1 conv (3 channels, channels_first) → global mean → dense: linear,
    so ∂s_k/∂x[c, h, w] = G[c, k] = Σ_c' W[c, c'] V[c', k] / (H W) at every position."""
    keras.utils.set_random_seed(12)
    inputs = keras.Input((2, 6, 6))
    a = keras.layers.Conv2D(3, 1, use_bias=False, data_format="channels_first", name="conv")(inputs)
    pooled = keras.layers.GlobalAveragePooling2D(data_format="channels_first")(a)
    model = keras.Model(inputs, keras.layers.Dense(2, name="dense")(pooled))
    W = model.get_layer("conv").kernel.numpy()[0, 0]  # [2, 3]
    V = model.get_layer("dense").kernel.numpy()  # [3, 2]
    x = np.random.default_rng(7).normal(size=(2, 2, 6, 6)).astype("float32")
    A = np.einsum("bchw,cd->bdhw", x, W)  # the conv's activations [B, 3, 6, 6]
    return model, x, W @ V / 36.0, A, V


@pytest.mark.channels_first_convolution
def test_channels_first_maps_reduce_the_channel_axis(channels_first):
    model, x, G, _, _ = channels_first
    expl = sk.explain(model, x, "gradient", [[0, 1]] * 2)
    assert expl.attributions.shape == (2, 2, 2, 6, 6) and expl.maps.shape == (2, 2, 6, 6)
    expected = np.broadcast_to(G.T[None, :, :, None, None], (2, 2, 2, 6, 6))
    np.testing.assert_allclose(expl.attributions, expected, atol=1e-6)
    np.testing.assert_allclose(
        expl.maps, np.broadcast_to(np.abs(G).max(0)[None, :, None, None], (2, 2, 6, 6)), atol=1e-6
    )
    gxi = sk.explain(model, x, "gradient_x_input", 1)
    np.testing.assert_allclose(gxi.maps[:, 0], np.einsum("bchw,c->bhw", x, G[:, 1]), atol=1e-5)


@pytest.mark.channels_first_convolution
def test_channels_first_gradcam_uses_the_real_spatial_axes(channels_first):
    model, x, _, A, V = channels_first
    expl = sk.explain(model, x, "gradcam", [[0, 1]] * 2, layer="conv", relu=False)
    assert expl.attributions.shape == (2, 2, 6, 6)
    for k in range(2):  # weights: the spatial mean of ∂s/∂A = V[c', k] / 36
        np.testing.assert_allclose(expl.maps[:, k], np.einsum("bchw,c->bhw", A, V[:, k] / 36.0), atol=1e-5)
    plus = sk.explain(model, x, "gradcam_plus_plus", 0, layer="conv")
    assert plus.attributions.shape == plus.maps.shape == (2, 1, 6, 6)


@pytest.mark.channels_first_convolution
def test_channels_first_occlusion_slides_over_height_and_width(channels_first):
    model, x, G, _, _ = channels_first
    expl = sk.explain(model, x, "occlusion", 0, window=(3, 3), stride=3)
    assert expl.options["windows"] == 4  # 2 × 2 windows over H and W, each spanning both channels
    for h0 in (0, 3):
        for w0 in (0, 3):
            region = (slice(None), slice(None), slice(h0, h0 + 3), slice(w0, w0 + 3))
            drop = np.einsum("bchw,c->b", x[region], G[:, 0])
            np.testing.assert_allclose(
                expl.attributions[(slice(None), 0, *region[1:])],
                np.broadcast_to(drop[:, None, None, None], (2, 2, 3, 3)),
                atol=1e-5,
            )


def test_a_model_mixing_channel_formats_is_refused():
    inputs = keras.Input((2, 6, 6))
    a = keras.layers.Conv2D(3, 1, data_format="channels_first")(inputs)
    b = keras.layers.Conv2D(3, 1, data_format="channels_last")(a)
    model = keras.Model(inputs, keras.layers.Dense(2)(keras.layers.Flatten()(b)))
    with pytest.raises(ValueError, match="mixes channels_first .* and channels_last"):
        sk.explain(model, np.zeros((1, 2, 6, 6), "float32"), "gradient", 0)


# -- guided backprop through every ReLU op the model runs ----------------------------------------
class ReluInside(keras.layers.Layer):
    """A custom layer computing relu(x W) in its own call: no activation a rewrite could see."""

    def build(self, input_shape):
        self.w = self.add_weight(shape=(input_shape[-1], 4), initializer="glorot_uniform", name="w")

    def call(self, x):
        return tf.nn.relu(tf.matmul(x, self.w))


def test_guided_and_deconv_reach_a_relu_inside_a_custom_layer_call():
    """s = v · relu(W x) with the relu inside a custom layer; guided and deconv by hand."""
    keras.utils.set_random_seed(21)
    inputs = keras.Input((3,))
    hidden = ReluInside(name="hidden")(inputs)
    model = keras.Model(inputs, keras.layers.Dense(1, use_bias=False, name="out")(hidden))
    W = np.array([[1.0, -2.0, 0.5, 1.5], [0.5, 1.0, -1.0, 2.0], [-1.0, 0.5, 2.0, -0.5]], "float32")
    v = np.array([[2.0], [-1.0], [1.5], [-3.0]], "float32")
    model.get_layer("hidden").set_weights([W])
    model.get_layer("out").set_weights([v])
    x = np.array([[1.0, 1.0, 1.0], [2.0, -1.0, 0.5]], "float32")
    active = (x @ W > 0).astype("float32")
    v = v[:, 0]
    np.testing.assert_allclose(sk.explain(model, x, "gradient", 0).attributions[:, 0], (active * v) @ W.T, atol=1e-6)
    np.testing.assert_allclose(
        sk.explain(model, x, "guided_backprop", 0).attributions[:, 0], (active * v * (v > 0)) @ W.T, atol=1e-6
    )
    np.testing.assert_allclose(
        sk.explain(model, x, "deconvnet", 0).attributions[:, 0], np.tile(np.maximum(v, 0) @ W.T, (2, 1)), atol=1e-6
    )
    # the model itself is untouched: its plain gradient afterwards
    np.testing.assert_allclose(sk.jacobian(model, x)[:, 0], (active * v) @ W.T, atol=1e-6)


def test_a_normalization_adapted_again_between_calls_is_seen():
    # Normalization keeps its mean and variance as tensors derived from its variables, which a
    # compiled function captures as constants; a capped ReLU makes guided backprop go through a
    # rewritten copy of the model. After a second adapt, both must use the new statistics.
    keras.utils.set_random_seed(2)
    norm = keras.layers.Normalization(name="norm")
    norm.adapt(np.random.default_rng(0).normal(2.0, 3.0, size=(64, 4)).astype("float32"))
    inputs = keras.Input((4,))
    hidden = keras.layers.Dense(6, name="d1")(norm(inputs))
    scores = keras.layers.Dense(2, name="d2")(keras.layers.ReLU(max_value=4.0, name="capped")(hidden))
    model = keras.Model(inputs, scores)
    x = np.random.default_rng(1).normal(size=(3, 4)).astype("float32")
    W1, b1 = model.get_layer("d1").get_weights()
    W2, _ = model.get_layer("d2").get_weights()

    def by_hand(guided):  # ∂s_0/∂x through (x − μ)/σ, Dense, ReLU capped at 4, Dense: NumPy
        mean, variance = (np.asarray(v, np.float64).reshape(-1) for v in (norm.mean, norm.variance))
        sigma = np.maximum(np.sqrt(variance), keras.backend.epsilon())
        z = ((x - mean) / sigma) @ W1 + b1
        upstream = np.maximum(W2[:, 0], 0.0) if guided else W2[:, 0]
        return (((z > 0) & (z < 4)) * upstream) @ W1.T / sigma

    for method, guided in (("gradient", False), ("guided_backprop", True)):
        first = sk.explain(model, x, method, 0).attributions[:, 0]
        np.testing.assert_allclose(first, by_hand(guided), rtol=1e-4, atol=1e-6)
        norm.adapt(np.random.default_rng(3).normal(-1.0, 0.5, size=(64, 4)).astype("float32"))
        again = sk.explain(model, x, method, 0)
        np.testing.assert_allclose(again.attributions[:, 0], by_hand(guided), rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(again.scores[:, 0], model.predict(x, verbose=0)[:, 0], rtol=1e-5, atol=1e-5)
        assert not np.allclose(first, again.attributions[:, 0])
        norm.adapt(np.random.default_rng(0).normal(2.0, 3.0, size=(64, 4)).astype("float32"))
