"""Attention rollout and transformer attribution on a tiny vision transformer, against NumPy from
the attention probabilities of a twin written from the model's weights (gradients by a
``GradientTape`` on the twin); the model is never touched; a model without attention is refused."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from attention_support import attribution_reference, images, rollout_reference, tiny_vit, twin

import saliency_kit as sk


@pytest.fixture(scope="module")
def model():
    return tiny_vit()


def test_the_twin_is_the_model(model):
    x = images()
    logits, _ = twin(model, tf.constant(x))
    np.testing.assert_allclose(logits.numpy(), model.predict(x, verbose=0), atol=1e-5)


@pytest.mark.parametrize("head_fusion,discard_ratio", [("mean", 0.0), ("max", 0.0), ("min", 0.0), ("mean", 0.6)])
def test_rollout_against_numpy(model, head_fusion, discard_ratio):
    x = images()
    expl = sk.explain(model, x, "attention_rollout", [[0, 2]] * 2, head_fusion=head_fusion, discard_ratio=discard_ratio)
    _, probabilities = twin(model, tf.constant(x))
    expected = rollout_reference([p.numpy() for p in probabilities], head_fusion, discard_ratio)
    assert expl.attributions.shape == (2, 2, 32, 32)
    for column in range(2):  # not class-specific
        np.testing.assert_allclose(expl.attributions[:, column], expected, rtol=1e-4, atol=1e-6)


def test_transformer_attribution_against_a_tape_on_the_twin(model):
    x, classes = images(), (0, 2)
    expl = sk.explain(model, x, "transformer_attribution", [list(classes)] * 2)
    for column, k in enumerate(classes):
        shifts = [tf.zeros((2, 2, 17, 17)) for _ in range(2)]
        with tf.GradientTape() as tape:
            tape.watch(shifts)
            logits, probabilities = twin(model, tf.constant(x), shifts)
            score = tf.reduce_sum(logits[:, k])
        gradients = tape.gradient(score, shifts)
        expected = attribution_reference([p.numpy() for p in probabilities], [g.numpy() for g in gradients])
        np.testing.assert_allclose(expl.attributions[:, column], expected, rtol=1e-4, atol=1e-6)
    assert not np.allclose(expl.attributions[:, 0], expl.attributions[:, 1])  # class-specific


def test_the_model_is_untouched(model):
    x = images(1)
    config, weights, before = model.get_config(), [w.copy() for w in model.get_weights()], model.predict(x, verbose=0)
    attributes = {layer.name: dict(vars(layer)).keys() for layer in model.layers}
    attention = keras.layers.MultiHeadAttention
    methods = attention._compute_attention, attention._masked_softmax
    for method in ("attention_rollout", "transformer_attribution"):
        sk.explain(model, x, method, 1)
    assert model.get_config() == config
    assert all(np.array_equal(a, b) for a, b in zip(model.get_weights(), weights))
    assert {layer.name: dict(vars(layer)).keys() for layer in model.layers} == attributes
    np.testing.assert_array_equal(model.predict(x, verbose=0), before)
    assert (attention._compute_attention, attention._masked_softmax) == methods  # the intercept is gone
    np.testing.assert_allclose(model(x).numpy(), before, rtol=1e-5)  # eager against compiled


@pytest.mark.parametrize("method", ["attention_rollout", "transformer_attribution"])
def test_a_model_without_attention_is_refused(method):
    inputs = keras.Input((8, 8, 3))
    plain = keras.Model(inputs, keras.layers.Dense(2)(keras.layers.GlobalAveragePooling2D()(inputs)))
    with pytest.raises(ValueError, match=f"^{method} needs a model with attention layers .*; this model has none"):
        sk.explain(plain, np.zeros((1, 8, 8, 3), "float32"), method, 0)


def test_keras_hub_vit_needs_no_option():
    keras_hub = pytest.importorskip("keras_hub")
    keras.utils.set_random_seed(0)
    backbone = keras_hub.models.ViTBackbone(
        image_shape=(32, 32, 3), patch_size=8, num_layers=2, num_heads=2, hidden_dim=16, mlp_dim=32
    )
    model = keras_hub.models.ViTImageClassifier(backbone=backbone, num_classes=3, preprocessor=None)
    for method in ("attention_rollout", "transformer_attribution"):
        maps = sk.explain(model, images(), method, [[0, 2]] * 2).attributions
        assert maps.shape == (2, 2, 32, 32) and np.isfinite(maps).all() and maps.min() >= 0 and maps.max() > 0
        assert 0 < maps.max() < 10
