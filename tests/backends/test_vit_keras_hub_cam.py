"""Grad-CAM on KerasHub's vision transformer (a tiny random ``ViTImageClassifier``, no download),
on each backend, with no option: the layer is the last block's first layer norm, a layer inside
KerasHub's custom ``ViTEncoderBlock`` (no node of the functional graph), and the map equals a
hand computation — the head written as a function of those tokens, differentiated by the
backend's own autodiff, the class token dropped, the 4×4 patch grid weighted in NumPy and
upsampled by ``scipy.ndimage.zoom``."""

import keras
import numpy as np
import pytest
from scipy import ndimage

import saliency_kit as sk

keras_hub = pytest.importorskip("keras_hub")

SIZE, PATCH, GRID = 32, 8, 4
BLOCK = "vi_t_backbone/vit_encoder/transformer_block_2"


@pytest.fixture(scope="module")
def vit():
    backbone = keras_hub.models.ViTBackbone(
        image_shape=(SIZE, SIZE, 3), patch_size=PATCH, num_layers=2, num_heads=2, hidden_dim=16, mlp_dim=32,
        dropout_rate=0.0, attention_dropout=0.0,
    )  # fmt: skip
    model = keras_hub.models.ViTImageClassifier(backbone=backbone, num_classes=3, preprocessor=None)
    rng = np.random.default_rng(5)
    for variable in model.weights:
        value = rng.normal(scale=0.3, size=variable.shape)
        if variable.path.endswith("gamma"):
            value = 1.0 + 0.1 * value
        variable.assign(value.astype(np.float32))
    return model


def _head_gradient(model, x, k):
    """``(A [n, N, C], ∂ logit_k / ∂A)`` at the last block's first layer norm, ``A`` computed by
    running the blocks one by one and the gradient by TensorFlow's tape, ``jax.grad`` or PyTorch's autograd."""
    backbone = model.backbone
    encoder = backbone.get_layer("vit_encoder")
    first, last = encoder.encoder_layers
    residual = first(backbone.get_layer("vit_patching_and_embedding")(x))
    tokens = last.layer_norm_1(residual)
    predictions = model.get_layer("predictions")

    def score(tokens):
        mid = last.mha(tokens, tokens) + residual
        out = encoder.layer_norm(mid + last.mlp(last.layer_norm_2(mid)))
        return keras.ops.sum(predictions(out[:, 0])[:, k])

    if keras.backend.backend() == "jax":
        import jax

        return np.asarray(tokens), np.asarray(jax.grad(score)(tokens))
    if keras.backend.backend() == "torch":
        import torch

        leaf = tokens.detach().requires_grad_(True)
        (grad,) = torch.autograd.grad(score(leaf), leaf)
        return leaf.detach().numpy(), grad.numpy()
    import tensorflow as tf

    with tf.GradientTape() as tape:
        tape.watch(tokens)
        value = score(tokens)
    return tokens.numpy(), tape.gradient(value, tokens).numpy()


def _hand_gradcam(model, x, k):
    A, g = _head_gradient(model, keras.ops.convert_to_tensor(x), k)
    A = A[:, 1:].reshape(len(x), GRID, GRID, -1)
    g = g[:, 1:].reshape(len(x), GRID, GRID, -1)
    cam = np.maximum((A * g.mean(axis=(1, 2), keepdims=True)).sum(-1), 0.0)
    return np.stack([ndimage.zoom(c, PATCH, order=1, grid_mode=True, mode="nearest") for c in cam])


def test_gradcam_with_no_option_matches_the_hand_computation(vit):
    assert vit.get_layer("predictions").activation in (None, keras.activations.linear)
    x = np.random.default_rng(0).normal(size=(2, SIZE, SIZE, 3)).astype("float32")
    expl = sk.explain(vit, x, method="gradcam", targets=[[0, 2]] * 2)
    assert expl.layer == f"{BLOCK}/ln_1"
    assert expl.attributions.shape == (2, 2, SIZE, SIZE)
    for column, k in enumerate((0, 2)):
        hand = _hand_gradcam(vit, x, k)
        assert hand.max() > 0
        np.testing.assert_allclose(expl.attributions[:, column], hand, rtol=1e-4, atol=1e-5)


def test_a_named_layer_inside_a_block_is_tapped(vit):
    x = np.random.default_rng(1).normal(size=(1, SIZE, SIZE, 3)).astype("float32")
    by_default = sk.explain(vit, x, method="gradcam", targets=1)
    for name in (f"{BLOCK}/ln_1", "transformer_block_2/ln_1"):
        named = sk.explain(vit, x, method="gradcam", targets=1, layer=name)
        assert named.layer == f"{BLOCK}/ln_1"
        np.testing.assert_array_equal(named.attributions, by_default.attributions)
    earlier = sk.explain(vit, x, method="layercam", targets=1, layer="transformer_block_1/ln_2")
    assert earlier.attributions.shape == (1, 1, SIZE, SIZE) and np.abs(earlier.attributions).max() > 0


@pytest.mark.parametrize("layer", ["vi_t_backbone/vit_encoder/ln", "transformer_block_2/ln_2"])
def test_a_layer_after_the_last_attention_is_refused_naming_one_that_works(vit, layer):
    x = np.random.default_rng(2).normal(size=(1, SIZE, SIZE, 3)).astype("float32")
    with pytest.raises(ValueError, match=rf"patch tokens.*layer='{BLOCK}/ln_1'"):
        sk.explain(vit, x, method="gradcam", targets=0, layer=layer)


def test_an_unknown_layer_is_refused_naming_the_attention_input(vit):
    x = np.random.default_rng(3).normal(size=(1, SIZE, SIZE, 3)).astype("float32")
    with pytest.raises(ValueError, match=rf"not in model.*'{BLOCK}/ln_1'"):
        sk.explain(vit, x, method="gradcam", targets=0, layer=f"{BLOCK}/no_such_norm")


def test_a_layer_inside_a_custom_layer_is_left_as_it_was(vit):
    """The intercept lives only while the model runs: the class's ``call`` is its own again."""
    norm = type(vit.backbone.get_layer("vit_encoder").encoder_layers[1].layer_norm_1)
    before = norm.__dict__.get("call")
    sk.explain(vit, np.zeros((1, SIZE, SIZE, 3), "float32"), method="gradcam", targets=0)
    assert norm.__dict__.get("call") is before
