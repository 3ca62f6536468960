"""CAM methods on a tiny vision transformer's tokens ``[B, N, C]``: the class token dropped, the
patch tokens laid out on the patch grid, checked against Grad-CAM by hand on the reshaped tokens."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import saliency_kit as sk
from saliency_kit.methods._common import token_grid


class ClassToken(keras.layers.Layer):
    """Prepends a learned class token: ``[B, N, C]`` -> ``[B, 1 + N, C]``."""

    def build(self, input_shape):
        self.token = self.add_weight(shape=(1, 1, input_shape[-1]), initializer="random_normal")

    def call(self, tokens):
        token = keras.ops.broadcast_to(self.token, (keras.ops.shape(tokens)[0], 1, tokens.shape[-1]))
        return keras.ops.concatenate([token, tokens], axis=1)


def tiny_vit(height=8, width=12, patch=4, hidden=8):
    """Patch embedding, a class token, one pre-norm attention block with a ReLU MLP, a classifier on the mean token."""
    keras.utils.set_random_seed(3)
    inputs = keras.Input((height, width, 3))
    x = keras.layers.Conv2D(hidden, patch, strides=patch, name="patches")(inputs)
    x = keras.layers.Reshape(((height // patch) * (width // patch), hidden))(x)
    x = ClassToken(name="class_token")(x)
    normed = keras.layers.LayerNormalization(name="norm")(x)
    attended = keras.layers.MultiHeadAttention(2, 4, name="attention")(normed, normed)
    x = keras.layers.Add()([x, attended])
    x = keras.layers.Add()([x, keras.layers.Dense(hidden, activation="relu", name="mlp")(x)])
    x = keras.layers.GlobalAveragePooling1D()(x)
    return keras.Model(inputs, keras.layers.Dense(3, name="logits")(x))


def test_token_grid_drops_the_prefix_tokens_and_keeps_the_aspect_ratio():
    assert token_grid(7, 8, 12) == (1, 2, 3)
    assert token_grid(6, 8, 12) == (0, 2, 3)
    assert token_grid(20, 32, 32) == (4, 4, 4)  # class token and three registers
    with pytest.raises(ValueError, match="patch grid"):
        token_grid(1, 8, 12)


def test_gradcam_on_tokens_by_hand():
    model = tiny_vit()
    x = np.random.default_rng(0).normal(size=(2, 8, 12, 3)).astype("float32")
    expl = sk.explain(model, x, "gradcam", [[0, 2]] * 2, layer="norm", relu=False)
    assert expl.attributions.shape == (2, 2, 8, 12)
    probe = keras.Model(model.inputs, [model.get_layer("norm").output, model.output])
    for column, k in enumerate((0, 2)):
        with tf.GradientTape() as tape:
            tokens, logits = probe(tf.constant(x))
            tape.watch(tokens)
            tokens, logits = probe(tf.constant(x))
            score = tf.reduce_sum(logits[:, k])
        g = tape.gradient(score, tokens).numpy()[:, 1:].reshape(2, 2, 3, 8)
        A = tokens.numpy()[:, 1:].reshape(2, 2, 3, 8)
        cam = (A * g.mean(axis=(1, 2), keepdims=True)).sum(-1)
        up = tf.image.resize(tf.image.resize(cam[..., None], (8, 3), method="bilinear"), (8, 12), method="bilinear")
        np.testing.assert_allclose(expl.attributions[:, column], up.numpy()[..., 0], atol=1e-5)


@pytest.mark.parametrize("method", ["gradcam_plus_plus", "layercam", "scorecam", "guided_gradcam"])
def test_cam_methods_run_on_tokens(method):
    model = tiny_vit()
    x = np.random.default_rng(1).normal(size=(1, 8, 12, 3)).astype("float32")
    expl = sk.explain(model, x, method, 1, layer="norm")
    assert expl.attributions.shape[:4] == (1, 1, 8, 12) and np.isfinite(expl.attributions).all()
