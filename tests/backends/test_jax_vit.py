"""Grad-CAM on a small functional vision transformer that classifies from its class token, on
Keras' JAX backend: the default layer (the input of the last block's attention) against a hand
computation (the head rewritten as a function of the tapped tokens, differentiated by jax.grad),
and the refusal of the last block's output, whose patch tokens nothing reads."""

import keras
import pytest

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "jax", reason="runs in the JAX process: KERAS_BACKEND=jax pytest tests/backends"
)


import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import saliency_kit as sk  # noqa: E402

SIZE, PATCH, HIDDEN = 16, 4, 8


class ClassToken(keras.layers.Layer):
    """Prepends a learned class token: ``[B, N, C]`` -> ``[B, 1 + N, C]``."""

    def build(self, input_shape):
        self.token = self.add_weight(shape=(1, 1, input_shape[-1]), initializer="random_normal")

    def call(self, tokens):
        token = keras.ops.broadcast_to(self.token, (keras.ops.shape(tokens)[0], 1, tokens.shape[-1]))
        return keras.ops.concatenate([token, tokens], axis=1)


def class_token_vit():
    """Patch Conv2D, a class token, two pre-norm blocks (attention, ReLU MLP), a classifier on token 0."""
    inputs = keras.Input((SIZE, SIZE, 3))
    x = keras.layers.Conv2D(HIDDEN, PATCH, strides=PATCH, name="patches")(inputs)
    x = ClassToken(name="class_token")(keras.layers.Reshape(((SIZE // PATCH) ** 2, HIDDEN))(x))
    for name in ("block1", "block2"):
        normed = keras.layers.LayerNormalization(name=f"{name}_norm1")(x)
        attended = keras.layers.MultiHeadAttention(2, 4, name=f"{name}_mha")(normed, normed)
        x = keras.layers.Add(name=f"{name}_mid")([x, attended])
        mlp = keras.layers.Dense(HIDDEN, activation="relu", name=f"{name}_mlp")(x)
        x = keras.layers.Add(name=f"{name}_out")([x, mlp])
    model = keras.Model(inputs, keras.layers.Dense(3, name="logits")(x[:, 0]))
    rng = np.random.default_rng(7)  # keras.utils.set_random_seed would import TensorFlow
    model.set_weights([rng.normal(scale=0.4, size=w.shape).astype("float32") for w in model.get_weights()])
    return model


def hand_gradcam(model, x, k):
    """``relu(Σ_c mean_patches(g_c) A_c)`` at ``block2_norm1``, ``g`` by jax.grad of the head written
    as a function of the tapped tokens; the 4×4 map upsampled by half-pixel bilinear resizing."""
    taps = keras.Model(model.inputs, [model.get_layer("block1_out").output, model.get_layer("block2_norm1").output])
    residual, tokens = (jnp.asarray(v) for v in taps(x))
    layer = model.get_layer

    def score(tokens):
        mid = residual + layer("block2_mha")(tokens, tokens)
        mlp = layer("block2_mlp")
        out = mid + jax.nn.relu(mid @ mlp.kernel.value + mlp.bias.value)
        return jnp.sum(out[:, 0] @ layer("logits").kernel.value[:, k] + layer("logits").bias.value[k])

    g = np.asarray(jax.grad(score)(tokens))[:, 1:].reshape(len(x), 4, 4, HIDDEN)
    A = np.asarray(tokens)[:, 1:].reshape(len(x), 4, 4, HIDDEN)
    cam = np.maximum((A * g.mean(axis=(1, 2), keepdims=True)).sum(-1), 0.0)
    return np.asarray(jax.image.resize(jnp.asarray(cam), (len(x), SIZE, SIZE), "linear"))


def test_gradcam_with_no_option_matches_jax_grad_by_hand():
    model = class_token_vit()
    x = np.random.default_rng(0).normal(size=(2, SIZE, SIZE, 3)).astype("float32")
    expl = sk.explain(model, x, "gradcam", [[0, 2]] * 2)
    assert expl.layer == "block2_norm1"
    for column, k in enumerate((0, 2)):
        np.testing.assert_allclose(expl.attributions[:, column], hand_gradcam(model, x, k), atol=1e-5)
    assert np.abs(expl.attributions).max() > 0


def test_the_last_block_output_is_refused_naming_the_default():
    x = np.random.default_rng(1).normal(size=(1, SIZE, SIZE, 3)).astype("float32")
    with pytest.raises(ValueError, match=r"patch tokens.*layer='block2_norm1'"):
        sk.explain(class_token_vit(), x, "gradcam", 0, layer="block2_out")
