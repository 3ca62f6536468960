"""The model facts read from the traced program hold on every backend with the same answers:
the logits behind a final softmax/sigmoid (checked against NumPy with the weights), a tap on the
stripped layer, and which input axis holds the channels."""

import keras
import numpy as np
import pytest

from saliency_kit.model.input_axes import traced_channel_axis
from saliency_kit.model.scores import ScoreView, callable_columns, score_columns

RNG = np.random.default_rng(11)
X = RNG.normal(size=(4, 5)).astype("float32")
ops = keras.ops


def _softmax_by_hand(t):
    exp = ops.exp(t - ops.max(t, axis=-1, keepdims=True))
    return exp / ops.sum(exp, axis=-1, keepdims=True)


HEADS = {
    "fused_softmax": lambda h: keras.layers.Dense(3, activation="softmax", name="head")(h),
    "activation_sigmoid": lambda h: keras.layers.Activation("sigmoid")(keras.layers.Dense(3, name="head")(h)),
    "softmax_then_flatten": lambda h: keras.layers.Flatten()(
        keras.layers.Softmax()(keras.layers.Dense(3, name="head")(h))
    ),
    "sigmoid_by_hand": lambda h: keras.layers.Lambda(lambda t: 1.0 / (1.0 + ops.exp(-t)))(
        keras.layers.Dense(3, name="head")(h)
    ),
    "stable_softmax_by_hand": lambda h: keras.layers.Lambda(_softmax_by_hand)(keras.layers.Dense(3, name="head")(h)),
}


@pytest.mark.parametrize("kind", list(HEADS))
def test_the_logits_are_the_head_layers_affine_values(kind):
    inputs = keras.Input((5,))
    model = keras.Model(inputs, HEADS[kind](inputs))
    head = model.get_layer("head")
    kernel, bias = (np.asarray(w) for w in head.get_weights())
    view = ScoreView(model, "logits")
    assert view.strips_activation
    np.testing.assert_allclose(ops.convert_to_numpy(view(X)), X @ kernel + bias, rtol=1e-5, atol=1e-6)
    _, tapped = view(X, tap="head")
    np.testing.assert_allclose(ops.convert_to_numpy(tapped), X @ kernel + bias, rtol=1e-5, atol=1e-6)
    assert score_columns(model) == 3
    assert callable_columns(model, lambda out: out[:, 1:]) == 2


def _conv_net(shape, front):
    inputs = keras.Input(shape)
    h = inputs
    for layer in [*front, keras.layers.Conv2D(2, 3), keras.layers.GlobalAveragePooling2D()]:
        h = layer(h)
    return keras.Model(inputs, h)


@pytest.mark.parametrize(
    "front, shape, axis, moved",
    [
        ((), (6, 6, 3), 3, False),
        ((keras.layers.Permute((2, 3, 1)),), (3, 6, 6), 1, True),
        ((keras.layers.Lambda(lambda t: ops.transpose(t, (0, 2, 3, 1)) - 0.5),), (3, 6, 6), 1, True),
    ],
    ids=["channels_last", "permute", "lambda_transpose"],
)
def test_the_channel_axis_is_the_same_on_every_backend(front, shape, axis, moved):
    found = traced_channel_axis(_conv_net(shape, front), shape, "float32")
    assert (found.axis, found.moved, found.unsure) == (axis, moved, False)


def test_a_channels_first_convolution_takes_its_channels_from_axis_one():
    inputs = keras.Input((3, 6, 6))
    model = keras.Model(inputs, keras.layers.Conv2D(2, 3, data_format="channels_first")(inputs))
    assert traced_channel_axis(model, (3, 6, 6), "float32").axis == 1
