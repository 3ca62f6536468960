"""Attention rollout and transformer attribution on JAX: the tiny vision transformer's maps
against NumPy from the attention probabilities of its twin (gradients by ``jax.vjp`` on the
twin), the same numbers as on TensorFlow; the model untouched."""

import keras
import pytest

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "jax", reason="runs in the JAX process: KERAS_BACKEND=jax pytest tests/backends"
)

import numpy as np  # noqa: E402
from attention_support import attribution_reference, images, rollout_reference, tiny_vit, twin  # noqa: E402

import saliency_kit as sk  # noqa: E402


@pytest.fixture(scope="module")
def model():
    return tiny_vit()


@pytest.mark.parametrize("head_fusion,discard_ratio", [("mean", 0.0), ("max", 0.0), ("min", 0.6)])
def test_rollout_against_numpy(model, head_fusion, discard_ratio):
    x = images()
    expl = sk.explain(model, x, "attention_rollout", [[0, 2]] * 2, head_fusion=head_fusion, discard_ratio=discard_ratio)
    _, probabilities = twin(model, x)
    expected = rollout_reference([np.asarray(p) for p in probabilities], head_fusion, discard_ratio)
    for column in range(2):
        np.testing.assert_allclose(expl.attributions[:, column], expected, rtol=1e-4, atol=1e-6)


def test_transformer_attribution_against_a_vjp_on_the_twin(model):
    import jax
    import jax.numpy as jnp

    x, classes = images(), (0, 2)
    expl = sk.explain(model, x, "transformer_attribution", [list(classes)] * 2)
    for column, k in enumerate(classes):

        def score(shifts, k=k):
            logits, probabilities = twin(model, jnp.asarray(x), shifts)
            return jnp.sum(logits[:, k]), probabilities

        gradients, probabilities = jax.grad(score, has_aux=True)([jnp.zeros((2, 2, 17, 17))] * 2)
        expected = attribution_reference([np.asarray(p) for p in probabilities], [np.asarray(g) for g in gradients])
        np.testing.assert_allclose(expl.attributions[:, column], expected, rtol=1e-4, atol=1e-6)


def test_the_model_is_untouched(model):
    x = images(1)
    config, weights, before = model.get_config(), [w.copy() for w in model.get_weights()], np.asarray(model(x))
    for method in ("attention_rollout", "transformer_attribution"):
        sk.explain(model, x, method, 1)
    assert model.get_config() == config
    assert all(np.array_equal(a, b) for a, b in zip(model.get_weights(), weights))
    np.testing.assert_array_equal(np.asarray(model(x)), before)
