"""The sampling, path and CAM methods on awkward models: a backbone nested in a classifier, a subclassed model,
mixed precision; K classes per input and batch-versus-alone agreement for each."""

import numpy as np
import pytest
from method_support import small_options

import saliency_kit as sk

keras = pytest.importorskip("keras")

METHODS = [
    "blur_ig",
    "guided_ig",
    "expected_gradients",
    "squaregrad",
    "vargrad",
    "scorecam",
    "layercam",
    "rise",
    "xrai",
]


def nested_model():
    inputs = keras.Input((12, 12, 3))
    h = keras.layers.Conv2D(4, 3, padding="same", activation="relu")(inputs)
    h = keras.layers.Conv2D(5, 3, strides=2, padding="same", activation="relu", name="last_conv")(h)
    backbone = keras.Model(inputs, h, name="backbone")
    outer_in = keras.Input((12, 12, 3))
    h = backbone(outer_in)
    h = keras.layers.GlobalAveragePooling2D()(h)
    return keras.Model(outer_in, keras.layers.Dense(4, activation="softmax")(h), name="classifier")


class Subclassed(keras.Model):
    def __init__(self):
        super().__init__()
        self.conv = keras.layers.Conv2D(3, 3, padding="same", activation="tanh")
        self.pool = keras.layers.GlobalAveragePooling2D()
        self.dense = keras.layers.Dense(4)

    def call(self, x):
        return self.dense(self.pool(self.conv(x)))


def mixed_precision_model():
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        inputs = keras.Input((12, 12, 3))
        h = keras.layers.Conv2D(4, 3, padding="same", activation="relu", name="conv")(inputs)
        h = keras.layers.GlobalAveragePooling2D()(h)
        outputs = keras.layers.Dense(4, dtype="float32")(h)
        return keras.Model(inputs, outputs)
    finally:
        keras.mixed_precision.set_global_policy("float32")


def options_for(method, x):
    return small_options(method, x.shape[1:])


@pytest.mark.parametrize("method", METHODS)
def test_nested_backbone_k_classes_batch_equals_alone(method):
    model = nested_model()
    x = np.random.default_rng(0).uniform(0, 1, (3, 12, 12, 3)).astype("float32")
    options = options_for(method, x)
    whole = sk.explain(model, x, method, targets="top2", batch_size=5, input_keys=[4, 8, 15], **options)
    alone = sk.explain(model, x[2:], method, targets=whole.targets[2:], batch_size=2, input_keys=[15], **options)
    assert whole.maps.shape == (3, 2, 12, 12)
    assert np.isfinite(whole.attributions).all()
    np.testing.assert_allclose(alone.attributions[0], whole.attributions[2], rtol=2e-4, atol=1e-6)
    if method in ("scorecam", "layercam"):
        assert whole.layer == "backbone/last_conv"


@pytest.mark.parametrize("method", ["blur_ig", "guided_ig", "expected_gradients", "rise", "scorecam", "layercam"])
def test_subclassed_and_mixed_precision(method):
    x = np.random.default_rng(1).uniform(0, 1, (2, 12, 12, 3)).astype("float32")
    inputs = keras.Input((12, 12, 3))
    wrapped = keras.Model(inputs, Subclassed()(inputs))  # a subclassed model inside a functional one
    for model in (wrapped, mixed_precision_model()):
        if method in ("scorecam", "layercam") and model is wrapped:
            continue  # no 4-D layer to tap outside the subclassed call
        got = sk.explain(model, x, method, targets=[[0, 3], [1, 2]], **options_for(method, x))
        assert got.attributions.dtype == np.float32 and np.isfinite(got.attributions).all()
        assert np.abs(got.attributions).max() > 0


def channels_first_model():
    inputs = keras.Input((3, 12, 12))
    h = keras.layers.Conv2D(4, 3, padding="same", activation="relu", data_format="channels_first", name="conv")(inputs)
    h = keras.layers.GlobalAveragePooling2D(data_format="channels_first")(h)
    return keras.Model(inputs, keras.layers.Dense(3)(h))


@pytest.mark.parametrize("method", ["blur_ig", "rise", "xrai"])
def test_channels_first_is_refused_where_not_supported(method):
    x = np.zeros((1, 3, 12, 12), "float32")
    with pytest.raises(ValueError, match=f"{method} works on channels-last inputs; received a channels-first model"):
        sk.explain(channels_first_model(), x, method, targets=0)


@pytest.mark.channels_first_convolution
@pytest.mark.parametrize("method", ["scorecam", "layercam"])
def test_cams_on_channels_first_equal_channels_last(method):
    first = channels_first_model()
    inputs = keras.Input((12, 12, 3))
    h = keras.layers.Conv2D(4, 3, padding="same", activation="relu", name="conv")(inputs)
    last = keras.Model(inputs, keras.layers.Dense(3)(keras.layers.GlobalAveragePooling2D()(h)))
    last.set_weights(first.get_weights())
    x = np.random.default_rng(0).uniform(0, 1, (2, 12, 12, 3)).astype("float32")
    a = sk.explain(last, x, method, targets=[[0, 2], [1, 0]], layer="conv").attributions
    b = sk.explain(first, np.moveaxis(x, -1, 1), method, targets=[[0, 2], [1, 0]], layer="conv").attributions
    np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-6)
