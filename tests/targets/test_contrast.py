"""``sk.targets.contrast``: the score of one token against a foil, its gradients against a tape
on a twin fed the embeddings, the position after the sequence, and the errors."""

import numpy as np
import pytest
import tensorflow as tf
from causal_lm_support import T, V, attention_lm

import saliency_kit as sk

IDS = np.array([[3, 1, 4, 1, 5, 9, 2], [6, 5, 3, 5, 8, 9, 7]], np.int32)


def test_contrast_against_a_tape_on_the_twin_at_every_position():
    model, twin = attention_lm(seed=5)
    table = model.get_layer("embedding").get_weights()[0]
    for position in (1, 4, T):
        e = sk.explain(model, IDS, method="gradient", targets=sk.targets.contrast(position, token=[2, 3], foil=4))
        vectors = tf.constant(table[IDS])
        with tf.GradientTape() as tape:
            tape.watch(vectors)
            logits = tf.nn.log_softmax(twin(vectors)[:, position - 1])
            score = logits[:, 2] * [1.0, 0.0] + logits[:, 3] * [0.0, 1.0] - logits[:, 4]
        want = tape.gradient(score, vectors).numpy()
        want[:, position:] = 0.0
        np.testing.assert_allclose(e.attributions[:, 0], want, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(e.scores[:, 0], score.numpy(), rtol=1e-5, atol=1e-5)
        assert e.target_info[1] == [{"kind": "contrast", "position": position, "token": 3, "foil": 4}]


def test_wrong_requests_fail_before_any_work():
    model, _ = attention_lm(seed=5)
    with pytest.raises(ValueError, match=r"\[1, 7\]"):
        sk.explain(model, IDS, targets=sk.targets.contrast(0, token=1, foil=2))
    with pytest.raises(ValueError, match=r"\[1, 7\]"):
        sk.explain(model, IDS, targets=sk.targets.contrast(T + 1, token=1, foil=2))
    with pytest.raises(ValueError, match=rf"foil must lie in \[0, {V - 1}\]"):
        sk.explain(model, IDS, targets=sk.targets.contrast(2, token=1, foil=V))
    with pytest.raises(ValueError, match="one int per input"):
        sk.explain(model, IDS, targets=sk.targets.contrast(2, token=[1, 2, 3], foil=0))
    with pytest.raises(ValueError, match="position must be an int"):
        sk.targets.contrast(2.0, token=1, foil=0)
