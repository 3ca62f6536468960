"""LRP and DeepLIFT on KerasHub's vision transformer (a tiny random ``ViTImageClassifier``, no
download), on each backend: LRP-ε conserves the score when nothing absorbs relevance (biases,
class token and position embeddings zero), DeepLIFT sums to ``s(x) − s(baseline)``."""

import keras
import numpy as np
import pytest

import saliency_kit as sk

keras_hub = pytest.importorskip("keras_hub")


def _vit(seed: int, absorbing: bool):
    """``absorbing=False``: every bias, ``β``, the class token and the position embeddings zero."""
    backbone = keras_hub.models.ViTBackbone(
        image_shape=(16, 16, 3), patch_size=4, num_layers=2, num_heads=2, hidden_dim=8, mlp_dim=16,
        dropout_rate=0.0, attention_dropout=0.0,
    )  # fmt: skip
    model = keras_hub.models.ViTImageClassifier(backbone=backbone, num_classes=3, preprocessor=None)
    rng = np.random.default_rng(seed)
    for variable in model.weights:
        value = rng.normal(scale=0.3, size=variable.shape)
        bias_like = any(part in variable.path for part in ("bias", "beta", "class_token", "position"))
        if bias_like and not absorbing:
            value = np.zeros(variable.shape)
        if variable.path.endswith("gamma"):
            value = 1.0 + 0.1 * value
        variable.assign(value.astype(np.float32))
    return model


def test_lrp_conserves_the_score_on_a_vision_transformer():
    model = _vit(1, absorbing=False)
    x = np.random.default_rng(2).uniform(-1, 1, size=(2, 16, 16, 3)).astype(np.float32)
    explanation = sk.explain(model, x, method="lrp", composite="epsilon", epsilon=1e-9, targets=[0, 2])
    scores = keras.ops.convert_to_numpy(model(x))[[0, 1], [0, 2]]
    np.testing.assert_allclose(explanation.attributions.reshape(2, -1).sum(-1), scores, rtol=2e-3, atol=1e-5)
    assert explanation.maps.shape == (2, 1, 16, 16)


def test_deeplift_sums_to_delta_on_a_vision_transformer():
    model = _vit(3, absorbing=True)
    x = np.random.default_rng(4).uniform(-1, 1, size=(2, 16, 16, 3)).astype(np.float32)
    baseline = np.zeros((16, 16, 3), np.float32)
    explanation = sk.explain(model, x, method="deeplift", targets=[1, 0], baseline=baseline)
    delta = keras.ops.convert_to_numpy(model(x)) - keras.ops.convert_to_numpy(model(np.zeros_like(x)))
    sums = explanation.attributions.reshape(2, -1).sum(-1)
    np.testing.assert_allclose(sums, delta[[0, 1], [1, 0]], rtol=1e-3, atol=1e-4)
