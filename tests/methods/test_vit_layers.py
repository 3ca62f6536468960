"""CAM methods on a small functional vision transformer that classifies from its class token:
the default layer (the input of the last block's attention), Grad-CAM there against a hand
computation on a twin of the model's head, the refusal of a layer whose patch tokens nothing reads,
and the token grid and prefix tokens, inferred from the patch embedding or given."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import saliency_kit as sk
from saliency_kit.methods._common import token_grid
from saliency_kit.model.walker import default_cam_layer, patch_size

SIZE, PATCH, HIDDEN = 16, 4, 8


class PrefixTokens(keras.layers.Layer):
    """Prepends ``count`` learned tokens (a class token, then registers): ``[B, N, C]`` -> ``[B, count + N, C]``."""

    def __init__(self, count=1, **kwargs):
        super().__init__(**kwargs)
        self.count = count

    def build(self, input_shape):
        self.tokens = self.add_weight(shape=(1, self.count, input_shape[-1]), initializer="random_normal")

    def call(self, tokens):
        prefix = keras.ops.broadcast_to(self.tokens, (keras.ops.shape(tokens)[0], self.count, tokens.shape[-1]))
        return keras.ops.concatenate([prefix, tokens], axis=1)


def block(x, name, activation):
    """A pre-norm encoder block: LayerNorm, attention, residual; LayerNorm, MLP, residual."""
    normed = keras.layers.LayerNormalization(name=f"{name}_norm1")(x)
    x = keras.layers.Add(name=f"{name}_mid")(
        [x, keras.layers.MultiHeadAttention(2, 4, name=f"{name}_mha")(normed, normed)]
    )
    hidden = keras.layers.Dense(16, activation=activation, name=f"{name}_fc1")(
        keras.layers.LayerNormalization(name=f"{name}_norm2")(x)
    )
    return keras.layers.Add(name=f"{name}_out")([x, keras.layers.Dense(HIDDEN, name=f"{name}_fc2")(hidden)])


def class_token_vit(prefix=1, seed=5, activation="gelu"):
    """Patch Conv2D (stride = kernel = 4), ``prefix`` prefix tokens, two blocks (a GELU MLP), a classifier
    on token 0."""
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((SIZE, SIZE, 3))
    x = keras.layers.Conv2D(HIDDEN, PATCH, strides=PATCH, name="patches")(inputs)
    x = keras.layers.Reshape(((SIZE // PATCH) ** 2, HIDDEN))(x)
    x = PrefixTokens(prefix, name="prefix")(x)
    x = block(block(x, "block1", activation), "block2", activation)
    x = keras.layers.LayerNormalization(name="final_norm")(x)
    return keras.Model(inputs, keras.layers.Dense(3, name="logits")(x[:, 0]))


def images(n=2, seed=0):
    return np.random.default_rng(seed).normal(size=(n, SIZE, SIZE, 3)).astype("float32")


def hand_gradcam(model, x, k, prefix):
    """Grad-CAM at ``block2_norm1`` by hand: the tokens and the residual stream tapped, the rest of the
    model rewritten as a TensorFlow function of them, its gradient taken with a tape, the patch tokens
    reshaped to 4×4, ``relu(Σ_c mean(g_c) A_c)`` upsampled bilinearly to 16×16."""
    taps = keras.Model(model.inputs, [model.get_layer("block1_out").output, model.get_layer("block2_norm1").output])
    residual, tokens = (tf.constant(v) for v in taps(tf.constant(x)))
    layer = model.get_layer
    with tf.GradientTape() as tape:
        tape.watch(tokens)
        mid = residual + layer("block2_mha")(tokens, tokens)
        fc1, fc2 = layer("block2_fc1"), layer("block2_fc2")
        hidden = tf.nn.gelu(layer("block2_norm2")(mid) @ fc1.kernel + fc1.bias, approximate=False)
        out = mid + hidden @ fc2.kernel + fc2.bias
        logits = layer("final_norm")(out)[:, 0] @ layer("logits").kernel + layer("logits").bias
        score = tf.reduce_sum(logits[:, k])
    g = tape.gradient(score, tokens).numpy()[:, prefix:].reshape(len(x), 4, 4, HIDDEN)
    A = tokens.numpy()[:, prefix:].reshape(len(x), 4, 4, HIDDEN)
    cam = np.maximum((A * g.mean(axis=(1, 2), keepdims=True)).sum(-1), 0.0)
    return tf.image.resize(cam[..., None], (SIZE, SIZE), method="bilinear").numpy()[..., 0]


def test_patch_size_and_default_layer():
    model = class_token_vit()
    assert patch_size(model) == (PATCH, PATCH)
    assert default_cam_layer(model, 4) == "block2_norm1"


def test_gradcam_with_no_option_matches_the_hand_computation():
    model = class_token_vit()
    x = images()
    expl = sk.explain(model, x, "gradcam", [[0, 2]] * 2)
    assert expl.layer == "block2_norm1"
    assert expl.attributions.shape == (2, 2, SIZE, SIZE)
    for column, k in enumerate((0, 2)):
        np.testing.assert_allclose(expl.attributions[:, column], hand_gradcam(model, x, k, 1), atol=1e-5)
    assert np.abs(expl.attributions).max() > 0


def test_a_layer_after_the_last_attention_is_refused_naming_one_that_works():
    model = class_token_vit()
    for method in ("gradcam", "layercam", "scorecam"):
        with pytest.raises(ValueError, match=r"patch tokens.*layer='block2_norm1'"):
            sk.explain(model, images(1), method, 0, layer="block2_out")


def test_a_token_layer_that_is_read_is_not_refused():
    model = class_token_vit()
    expl = sk.explain(model, images(1), "gradcam", 0, layer="block1_out", relu=False)
    assert np.abs(expl.attributions).max() > 0


def test_registers_the_tokens_alone_cannot_tell_are_found_from_the_patch_embedding():
    model = class_token_vit(prefix=9)  # a class token and 8 registers: 25 tokens, which alone read as 5×5 patches
    assert token_grid(25, SIZE, SIZE) == (0, 5, 5)
    x = images()
    inferred = sk.explain(model, x, "gradcam", 1).attributions
    np.testing.assert_allclose(inferred[:, 0], hand_gradcam(model, x, 1, 9), atol=1e-5)
    for given in ({"token_grid": (4, 4), "prefix_tokens": 9}, {"token_grid": 4}, {"prefix_tokens": 9}):
        np.testing.assert_allclose(sk.explain(model, x, "gradcam", 1, **given).attributions, inferred, atol=1e-6)


def test_token_options_are_checked():
    model = class_token_vit()
    with pytest.raises(ValueError, match="make 10 tokens, but the layer has 17"):
        sk.explain(model, images(1), "gradcam", 0, token_grid=(3, 3), prefix_tokens=1)
    with pytest.raises(ValueError, match="make 25 tokens, but the layer has 17"):
        sk.explain(model, images(1), "gradcam", 0, token_grid=5)
    with pytest.raises(ValueError, match="token_grid must be"):
        sk.explain(model, images(1), "gradcam", 0, token_grid=(4, 4, 1))
    with pytest.raises(ValueError, match="apply to a transformer's token layer"):
        sk.explain(model, images(1), "gradcam", 0, layer="patches", prefix_tokens=1)


@pytest.mark.parametrize("method", ["gradcam_plus_plus", "layercam", "scorecam", "guided_gradcam"])
def test_every_cam_method_takes_the_default_token_layer(method):
    expl = sk.explain(class_token_vit(activation="relu"), images(1), method, 1)  # guided backprop needs ReLUs
    assert expl.layer == "block2_norm1" and expl.attributions.shape[:4] == (1, 1, SIZE, SIZE)
    assert np.isfinite(expl.attributions).all()
