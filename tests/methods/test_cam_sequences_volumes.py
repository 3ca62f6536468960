"""CAM methods on time series (``Conv1D``, ``[B, T, F]``) and volumes (``Conv3D``, ``[B, D, H, W, C]``),
against NumPy computed from the layer's activations and gradients taken with a tape on a twin model
``keras.Model(inputs, [layer.output, logits])``, resized by linear interpolation written here
(``np.interp`` along each axis, half-pixel centres, edges held: ``scipy.ndimage.zoom(order=1,
grid_mode=True, mode="nearest")``); and every registered method on both ranks: the right shapes
or a one-line ``ValueError``."""

import keras
import numpy as np
import pytest
import scipy.ndimage
import tensorflow as tf
from method_support import input_methods, small_options

import saliency_kit as sk
from saliency_kit import methods
from saliency_kit.model.walker import default_cam_layer

B = 3
TARGETS = [[0, 2]] * B


def linear_resize(a: np.ndarray, size) -> np.ndarray:
    """``a [*s]`` resized to ``size``: along each axis, position ``i`` reads ``(i + 0.5)·l/L − 0.5``,
    clamped to the ends, interpolated linearly."""
    a = np.asarray(a, np.float64)
    for axis, n in enumerate(size):
        length = a.shape[axis]
        positions = (np.arange(n) + 0.5) * length / n - 0.5
        a = np.apply_along_axis(lambda v: np.interp(positions, np.arange(length), v), axis, a)
    return a


def test_the_reference_resize_is_scipy_zoom_with_half_pixel_centres():
    a = np.random.default_rng(0).normal(size=(3, 4, 5))
    np.testing.assert_allclose(
        linear_resize(a, (6, 8, 8)),
        scipy.ndimage.zoom(a, (2, 2, 8 / 5), order=1, grid_mode=True, mode="nearest"),
        atol=1e-12,
    )


# -- the models ----------------------------------------------------------------------------------
def _classifier(shape, conv, pool, data_format="channels_last"):
    """conv (relu) → conv (stride 2, relu, "c2") → global pool → dense logits ("logits") → softmax."""
    inputs = keras.Input(shape)
    h = conv(4, 3, padding="same", activation="relu", data_format=data_format, name="c1")(inputs)
    h = conv(5, 3, strides=2, padding="same", activation="relu", data_format=data_format, name="c2")(h)
    logits = keras.layers.Dense(3, name="logits")(pool(data_format=data_format)(h))
    return keras.Model(inputs, keras.layers.Softmax()(logits), name=f"{conv.__name__.lower()}_net")


@pytest.fixture(scope="module")
def series_net():
    keras.utils.set_random_seed(21)
    model = _classifier((16, 3), keras.layers.Conv1D, keras.layers.GlobalAveragePooling1D)
    x = np.random.default_rng(1).normal(size=(B, 16, 3)).astype("float32")
    return model, x


@pytest.fixture(scope="module")
def volume_net():
    keras.utils.set_random_seed(22)
    model = _classifier((6, 8, 8, 2), keras.layers.Conv3D, keras.layers.GlobalAveragePooling3D)
    x = np.random.default_rng(2).normal(size=(B, 6, 8, 8, 2)).astype("float32")
    return model, x


NETS = ["series_net", "volume_net"]


def activations_and_gradients(model, x, layer="c2"):
    """``A [B, *s, c]`` and ``g [B, K, *s, c]`` of ``layer`` for the logits of TARGETS, by a tape on a twin."""
    twin = keras.Model(model.inputs[0], [model.get_layer(layer).output, model.get_layer("logits").output])
    grads = []
    for k in range(len(TARGETS[0])):
        with tf.GradientTape() as tape:
            a, logits = twin(tf.constant(x))
            s = tf.reduce_sum(logits[:, TARGETS[0][k]])
        grads.append(tape.gradient(s, a).numpy())
    return a.numpy().astype(np.float64), np.stack(grads, axis=1).astype(np.float64)


def spatial(x):
    return x.shape[1:-1]


# -- the CAM formulas in NumPy ----------------------------------------------------------------------
def numpy_gradcam(A, g, size, relu=True):
    axes = tuple(range(2, g.ndim - 1))
    weights = g.mean(axis=axes)  # [B, K, c]
    cams = np.einsum("bkc,b...c->bk...", weights, A)
    cams = np.maximum(cams, 0) if relu else cams
    return np.stack([[linear_resize(cams[b, k], size) for k in range(cams.shape[1])] for b in range(len(cams))])


def numpy_gradcam_plus_plus(A, g, size):
    axes = tuple(range(1, A.ndim - 1))
    total = A.sum(axis=axes, keepdims=True)[:, None]
    denominator = 2 * g**2 + total * g**3
    alpha = np.where(denominator != 0, g**2 / np.where(denominator != 0, denominator, 1), 0)
    weights = (alpha * np.maximum(g, 0)).sum(axis=tuple(range(2, g.ndim - 1)))
    cams = np.maximum(np.einsum("bkc,b...c->bk...", weights, A), 0)
    return np.stack([[linear_resize(cams[b, k], size) for k in range(cams.shape[1])] for b in range(len(cams))])


def numpy_layercam(A, g, size):
    cams = np.maximum((np.maximum(g, 0) * A[:, None]).sum(-1), 0)
    return np.stack([[linear_resize(cams[b, k], size) for k in range(cams.shape[1])] for b in range(len(cams))])


@pytest.mark.parametrize("net", NETS)
def test_gradcam_equals_numpy_from_the_twin_activations_and_gradients(net, request):
    model, x = request.getfixturevalue(net)
    A, g = activations_and_gradients(model, x)
    assert A.shape[1:-1] != spatial(x), "the layer must be coarser than the input so resizing is tested"
    expl = sk.explain(model, x, "gradcam", TARGETS)
    assert expl.layer == "c2"  # the default: the last layer of the input's rank
    assert expl.attributions.shape == (B, 2, *spatial(x)) and expl.maps.shape == expl.attributions.shape
    np.testing.assert_allclose(expl.attributions, numpy_gradcam(A, g, spatial(x)), rtol=1e-4, atol=1e-6)
    raw = sk.explain(model, x, "gradcam", TARGETS, relu=False)
    np.testing.assert_allclose(raw.maps, numpy_gradcam(A, g, spatial(x), relu=False), rtol=1e-4, atol=1e-6)
    assert (raw.maps < 0).any() and (expl.maps > 0).any()  # the relu really mattered


@pytest.mark.parametrize("net", NETS)
def test_gradcam_plus_plus_and_layercam_equal_numpy(net, request):
    model, x = request.getfixturevalue(net)
    A, g = activations_and_gradients(model, x)
    np.testing.assert_allclose(
        sk.explain(model, x, "gradcam_plus_plus", TARGETS).attributions,
        numpy_gradcam_plus_plus(A, g, spatial(x)),
        rtol=1e-4,
        atol=1e-6,
    )
    A1, g1 = activations_and_gradients(model, x, "c1")  # LayerCAM on the early layer too
    np.testing.assert_allclose(
        sk.explain(model, x, "layercam", TARGETS, layer="c1").attributions,
        numpy_layercam(A1, g1, spatial(x)),
        rtol=1e-4,
        atol=1e-6,
    )
    np.testing.assert_allclose(
        sk.explain(model, x, "layercam", TARGETS).attributions, numpy_layercam(A, g, spatial(x)), rtol=1e-4, atol=1e-6
    )


@pytest.mark.parametrize("net", NETS)
def test_scorecam_equals_numpy_with_masked_forward_passes(net, request):
    model, x = request.getfixturevalue(net)
    A, _ = activations_and_gradients(model, x)
    got = sk.explain(model, x, "scorecam", TARGETS)
    to_logits = keras.Model(model.inputs[0], model.get_layer("logits").output)
    expected = np.zeros((B, 2, *A.shape[1:-1]))
    for b in range(B):
        for c in range(A.shape[-1]):
            up = linear_resize(A[b, ..., c], spatial(x))
            mask = ((up - up.min()) / (up.max() - up.min() + 1e-7)).astype("float32")
            logits = to_logits(x[b : b + 1] * mask[..., None])
            probabilities = tf.nn.softmax(logits).numpy()[0]
            for k, target in enumerate(TARGETS[b]):
                expected[b, k] += probabilities[target] * A[b, ..., c]
    expected = np.stack(
        [[linear_resize(np.maximum(expected[b, k], 0), spatial(x)) for k in range(2)] for b in range(B)]
    )
    np.testing.assert_allclose(got.attributions, expected, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("net", NETS)
def test_guided_gradcam_is_guided_backprop_times_the_resized_cam(net, request):
    model, x = request.getfixturevalue(net)
    A, g = activations_and_gradients(model, x)
    guided = sk.explain(model, x, "guided_backprop", TARGETS).attributions
    both = sk.explain(model, x, "guided_gradcam", TARGETS)
    assert both.attributions.shape == (B, 2, *x.shape[1:]) and both.maps.shape == (B, 2, *spatial(x))
    np.testing.assert_allclose(
        both.attributions, guided * numpy_gradcam(A, g, spatial(x))[..., None], rtol=1e-4, atol=1e-6
    )


CAMS = ["gradcam", "gradcam_plus_plus", "guided_gradcam", "layercam", "scorecam"]


@pytest.mark.parametrize("net", NETS)
def test_batch_size_one_and_64_give_the_same_maps(net, request):
    model, x = request.getfixturevalue(net)
    for method in CAMS:
        one = sk.explain(model, x, method, TARGETS, batch_size=1)
        many = sk.explain(model, x, method, TARGETS, batch_size=64)
        np.testing.assert_allclose(one.attributions, many.attributions, rtol=1e-5, atol=1e-7, err_msg=method)
        alone = sk.explain(model, x[1:2], method, TARGETS[:1])  # and an input's maps do not depend on its batch
        np.testing.assert_allclose(alone.attributions[0], many.attributions[1], rtol=1e-5, atol=1e-7, err_msg=method)


# -- the default layer --------------------------------------------------------------------------
def test_the_default_layer_is_the_last_of_the_input_rank_nested_models_included():
    inputs = keras.Input((12, 2))
    h = keras.layers.Conv1D(3, 3, activation="relu", name="early")(inputs)
    h = keras.layers.LSTM(4, return_sequences=True, name="lstm")(h)  # [B, t, 4]: still a sequence
    h = keras.layers.Dense(5, name="per_step")(h)  # [B, t, 5]
    series = keras.Model(inputs, keras.layers.Dense(2)(keras.layers.Flatten()(h)))
    assert default_cam_layer(series, 3) == "per_step"
    with pytest.raises(ValueError, match=r"no layer with a 5-D \[batch, depth, height, width, channels\] output"):
        default_cam_layer(series, 5)

    inner_in = keras.Input((4, 6, 6, 1))
    backbone = keras.Model(
        inner_in,
        keras.layers.Conv3D(2, 3, activation="relu", name="deep")(keras.layers.Conv3D(2, 1, name="shallow")(inner_in)),
        name="backbone",
    )
    outer_in = keras.Input((4, 6, 6, 1))
    volume = keras.Model(outer_in, keras.layers.Dense(2)(keras.layers.GlobalMaxPooling3D()(backbone(outer_in))))
    assert default_cam_layer(volume, 5) == "backbone/deep"
    x = np.random.default_rng(3).normal(size=(2, 4, 6, 6, 1)).astype("float32")
    expl = sk.explain(volume, x, "gradcam", 0)
    assert expl.layer == "backbone/deep" and expl.maps.shape == (2, 1, 4, 6, 6)


def test_a_layer_of_another_rank_and_inputs_of_no_spatial_rank_are_refused_in_one_line(series_net, volume_net):
    model, x = series_net
    with pytest.raises(ValueError, match=r"need a 3-D \[batch, time, channels\] layer .*received 'logits'\.$") as err:
        sk.explain(model, x, "gradcam", 0, layer="logits")
    assert "\n" not in str(err.value)
    model, x = volume_net
    with pytest.raises(ValueError, match=r"need a 5-D \[batch, depth, height, width, channels\] layer") as err:
        sk.explain(model, x, "layercam", 0, layer="logits")
    assert "\n" not in str(err.value)
    flat = keras.Sequential([keras.Input((5,)), keras.layers.Dense(2)])
    with pytest.raises(ValueError, match=r"sequences \[B, T, F\] or volumes \[B, D, H, W, C\].*shape \(1, 5\)"):
        sk.explain(flat, np.zeros((1, 5), "float32"), "gradcam", 0)


# -- channels first ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "conv, pool, shape",
    [
        pytest.param(
            keras.layers.Conv1D,
            keras.layers.GlobalAveragePooling1D,
            (16, 3),
            marks=pytest.mark.channels_first_convolution,
        ),
        (keras.layers.Conv3D, keras.layers.GlobalAveragePooling3D, (6, 8, 8, 2)),
    ],
)
def test_channels_first_models_give_the_maps_of_their_channels_last_twin(conv, pool, shape):
    keras.utils.set_random_seed(23)
    last = _classifier(shape, conv, pool)
    first = _classifier((shape[-1], *shape[:-1]), conv, pool, data_format="channels_first")
    first.set_weights(last.get_weights())  # kernels are [*window, in, out] in both formats
    x = np.random.default_rng(4).normal(size=(2, *shape)).astype("float32")
    x_first = np.moveaxis(x, -1, 1)
    np.testing.assert_allclose(np.asarray(first(x_first)), np.asarray(last(x)), rtol=1e-5, atol=1e-6)
    for method in ("gradcam", "layercam", "scorecam"):  # the three ways a CAM reads the layer
        a = sk.explain(last, x, method, [[1, 2]] * 2)
        b = sk.explain(first, x_first, method, [[1, 2]] * 2)
        assert b.maps.shape == (2, 2, *shape[:-1]), method
        np.testing.assert_allclose(b.maps, a.maps, rtol=1e-4, atol=1e-6, err_msg=method)


# -- every registered method on both ranks ------------------------------------------------------------
#: The registered methods that assume images (or 2-D blurs) and refuse these ranks in one line.
REFUSED = {"series_net": {"xrai", "rise"}, "volume_net": {"xrai", "rise", "blur_ig"}}


@pytest.mark.parametrize("net", NETS)
@pytest.mark.parametrize("method", input_methods())
def test_every_registered_method_gives_the_right_shapes_or_refuses_in_one_line(net, method, request):
    model, x = request.getfixturevalue(net)
    options = small_options(method, x.shape[1:])
    try:
        expl = sk.explain(model, x[:2], method, "top2", batch_size=64, **options)
    except ValueError as err:
        message = str(err)
        assert method in REFUSED[net], f"{method} refused {net}: {message}"
        assert "\n" not in message and message.endswith(".") and "received" in message, message
        return
    assert method not in REFUSED[net], f"{method} now runs on {net}: update REFUSED"
    cam = methods.get(method).reduction(options) == "none"
    assert expl.attributions.shape == (2, 2, *(spatial(x) if cam else x.shape[1:]))
    assert expl.maps.shape == (2, 2, *spatial(x))
    assert np.all(np.isfinite(expl.attributions)) and np.all(np.isfinite(expl.maps))
    again = sk.explain(model, x[:2], method, expl.targets, batch_size=1, **options)
    np.testing.assert_allclose(again.attributions, expl.attributions, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("net", NETS)
def test_deeplift_on_conv1d_and_conv3d_sums_to_the_change_of_the_logit(net, request):
    """DeepLIFT's summation-to-delta through Conv1D/Conv3D layers: Σ attributions = s(x) − s(0)."""
    model, x = request.getfixturevalue(net)
    expl = sk.explain(model, x, "deeplift", TARGETS)
    logits = keras.Model(model.inputs[0], model.get_layer("logits").output)
    change = np.take_along_axis(np.asarray(logits(x)) - np.asarray(logits(np.zeros_like(x))), np.array(TARGETS), 1)
    np.testing.assert_allclose(expl.attributions.reshape(B, 2, -1).sum(-1), change, rtol=1e-3, atol=1e-4)
