"""``sk.explain_generation`` on JAX: greedy tokens and gradients of a prefix-mean language model
against NumPy (its logits and their closed-form gradients). (That it imports no TensorFlow is
checked in a fresh process: test_jax_no_tensorflow.py.)"""

import keras
import numpy as np
import pytest
from causal_lm_support import prefix_mean_gradient, prefix_mean_lm

import saliency_kit as sk

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "jax", reason="runs in the JAX process: KERAS_BACKEND=jax pytest tests/backends"
)


def test_greedy_tokens_and_gradients_against_numpy():
    model, table, weight = prefix_mean_lm(seed=4)
    prompt = [3, 1, 4]
    sequence = list(prompt)
    for _ in range(4):
        mean = table[sequence].mean(axis=0)
        sequence.append(int(np.argmax(mean @ weight)))
    e = sk.explain_generation(model, np.array(prompt), max_new_tokens=4, method="gradient")
    np.testing.assert_array_equal(e.targets[0], sequence[3:])
    assert e.tokens[0] == [str(i) for i in sequence] and e.backend == "jax"
    for k, p in enumerate(range(3, 7)):
        want = prefix_mean_gradient(np.array(sequence), table, weight, p, sequence[p])
        np.testing.assert_allclose(e.attributions[0, k], want, rtol=1e-4, atol=1e-6)
