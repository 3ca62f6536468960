"""The generated-text targets on every backend: the scores of ``generated`` and ``contrast``
against a NumPy ``log_softmax`` and their gradients against the closed form of a prefix-mean
language model, with each column's own and later positions zero.

Run under both backends: ``pytest`` (TensorFlow) and ``KERAS_BACKEND=jax pytest``.
"""

import keras
import numpy as np
import pytest
from causal_lm_support import T, log_softmax, prefix_mean_gradient, prefix_mean_lm

import saliency_kit as sk

IDS = np.array([[3, 1, 4, 1, 5, 9, 2], [6, 5, 3, 5, 8, 9, 7]], np.int32)
START = 3


@pytest.fixture(scope="module")
def lm():
    return prefix_mean_lm(seed=1)


def hand_log_probs(model, ids):
    return log_softmax(np.asarray(keras.ops.convert_to_numpy(model(ids)), np.float64))


def test_generated_scores_are_the_log_probabilities_of_the_sequence(lm):
    model, _, _ = lm
    e = sk.explain(model, IDS, method="gradient", targets=sk.targets.generated(IDS, start=START))
    log_p = hand_log_probs(model, IDS)
    want = np.array([[log_p[b, p - 1, IDS[b, p]] for p in range(START, T)] for b in range(len(IDS))])
    assert e.scores.shape == (2, T - START)
    np.testing.assert_allclose(e.scores, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(e.targets, IDS[:, START:])
    assert e.target_info[1][0] == {"kind": "generated", "position": START, "token": int(IDS[1, START])}


def test_generated_gradients_match_the_closed_form_with_the_future_zero(lm):
    model, table, weight = lm
    e = sk.explain(model, IDS, method="gradient", targets=sk.targets.generated(IDS, start=START))
    assert e.attributions.shape == (2, T - START, T, table.shape[1])
    assert e.maps.shape == (2, T - START, T)
    for b in range(len(IDS)):
        for k, p in enumerate(range(START, T)):
            want = prefix_mean_gradient(IDS[b], table, weight, p, IDS[b, p])
            np.testing.assert_allclose(e.attributions[b, k], want, rtol=1e-4, atol=1e-6)
            assert not e.attributions[b, k, p:].any()


def test_contrast_is_the_difference_of_the_logits(lm):
    model, table, weight = lm
    e = sk.explain(model, IDS, method="gradient", targets=sk.targets.contrast(T, token=2, foil=[0, 7]))
    logits = np.asarray(keras.ops.convert_to_numpy(model(IDS)), np.float64)
    np.testing.assert_allclose(e.scores[:, 0], logits[:, -1, 2] - logits[:, -1, [0, 7]].diagonal(), rtol=1e-5)
    for b, foil in enumerate([0, 7]):
        want = prefix_mean_gradient(IDS[b], table, weight, T, 2) - prefix_mean_gradient(IDS[b], table, weight, T, foil)
        np.testing.assert_allclose(e.attributions[b, 0], want, rtol=1e-4, atol=1e-6)


def test_a_model_that_sees_its_future_is_still_explained_by_the_past_alone():
    model, _, _ = prefix_mean_lm(seed=2, causal=False)
    e = sk.explain(model, IDS, method="integrated_gradients", steps=4, targets=sk.targets.generated(IDS, start=START))
    for k, p in enumerate(range(START, T)):
        assert not e.attributions[:, k, p:].any()
        assert e.attributions[:, k, :p].any()
