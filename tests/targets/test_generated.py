"""``sk.targets.generated``: gradients against a ``tf.GradientTape`` on a twin fed the embeddings,
every method, batches, lists of targets, KerasHub's GPT-2, and the errors."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from causal_lm_support import T, attention_lm, log_softmax, prefix_mean_lm, tiny_gpt2

import saliency_kit as sk

IDS = np.array([[3, 1, 4, 1, 5, 9, 2], [6, 5, 3, 5, 8, 9, 7], [2, 7, 1, 8, 2, 8, 1]], np.int32)
START = 2


@pytest.fixture(scope="module")
def attention():
    return attention_lm(seed=3)


def tape_gradients(twin, table, ids, position, token):
    """``[T, D]``: the gradient of ``log p(token)`` at ``position`` with respect to the embeddings."""
    vectors = tf.constant(table[ids][None])
    with tf.GradientTape() as tape:
        tape.watch(vectors)
        score = tf.nn.log_softmax(twin(vectors)[0, position - 1])[token]
    return tape.gradient(score, vectors)[0].numpy()


def test_gradients_match_a_tape_on_the_twin_fed_embeddings(attention):
    model, twin = attention
    table = model.get_layer("embedding").get_weights()[0]
    e = sk.explain(model, IDS, method="gradient", targets=sk.targets.generated(IDS, start=START))
    for b, ids in enumerate(IDS):
        for k, p in enumerate(range(START, T)):
            want = tape_gradients(twin, table, ids, p, ids[p])
            want[p:] = 0.0
            np.testing.assert_allclose(e.attributions[b, k], want, rtol=1e-4, atol=1e-6)
    log_p = log_softmax(np.asarray(model(IDS), np.float64))
    want_scores = [[log_p[b, p - 1, IDS[b, p]] for p in range(START, T)] for b in range(len(IDS))]
    np.testing.assert_allclose(e.scores, want_scores, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "method, options",
    [
        ("gradient_x_input", {}),
        ("integrated_gradients", {"steps": 4}),
        ("smoothgrad", {"samples": 3, "seed": 1}),
        ("occlusion", {"window": 1}),
    ],
)
def test_every_method_takes_the_target_and_hides_each_future(attention, method, options):
    model, _ = attention
    e = sk.explain(model, IDS, method=method, targets=sk.targets.generated(IDS, start=START), **options)
    K = T - START
    assert e.maps.shape == (3, K, T)
    for k in range(K):
        assert not e.maps[:, k, START + k :].any()
    assert np.abs(e.maps).sum() > 0


def test_a_batch_is_each_input_alone_and_one_row_serves_every_input(attention):
    model, _ = attention
    target = sk.targets.generated(IDS, start=START)
    whole = sk.explain(model, IDS, method="integrated_gradients", steps=4, targets=target, batch_size=5)
    for b in range(len(IDS)):
        one = sk.targets.generated(IDS[b], start=START)
        alone = sk.explain(model, IDS[b : b + 1], method="integrated_gradients", steps=4, targets=one)
        np.testing.assert_allclose(whole.attributions[b], alone.attributions[0], rtol=1e-5, atol=1e-7)


def test_a_list_of_targets_hides_each_column_s_own_future(attention):
    model, _ = attention
    both = [sk.targets.generated(IDS, start=5), sk.targets.contrast(3, token=1, foil=2)]
    e = sk.explain(model, IDS, method="gradient", targets=both)
    assert e.maps.shape == (3, 3, T)
    assert not e.maps[:, 0, 5:].any() and not e.maps[:, 1, 6:].any() and not e.maps[:, 2, 3:].any()
    assert e.maps[:, 2, :3].any() and e.maps[:, 1, :6].any()
    assert [info["kind"] for info in e.target_info[0]] == ["generated", "generated", "contrast"]


def test_keras_hub_gpt2_scores_and_its_embedding_gradients():
    lm = tiny_gpt2(seed=4)
    ids = np.array([[0, 5, 3, 8, 1, 2, 7]], np.int32)
    inputs = {"token_ids": ids, "padding_mask": np.ones_like(ids)}
    e = sk.explain(lm, inputs, method="gradient", targets=sk.targets.generated(ids, start=3))
    log_p = log_softmax(np.asarray(lm(inputs), np.float64))
    np.testing.assert_allclose(e.scores[0], [log_p[0, p - 1, ids[0, p]] for p in range(3, 7)], rtol=1e-4, atol=1e-4)
    attributions = e.attributions["token_ids"]
    assert attributions.shape == (1, 4, 7, 8)
    backbone = lm.backbone
    vectors = tf.constant(backbone.token_embedding(ids))
    with tf.GradientTape() as tape:
        tape.watch(vectors)
        hidden = backbone.embeddings_add([vectors, backbone.position_embedding(vectors)])
        mask = tf.ones_like(ids, dtype="bool")
        for block in backbone.transformer_layers:
            hidden = block(hidden, decoder_padding_mask=mask)
        hidden = backbone.layer_norm(hidden)
        logits = backbone.token_embedding(hidden, reverse=True)
        score = tf.nn.log_softmax(logits[0, 4])[ids[0, 5]]
    want = tape.gradient(score, vectors)[0].numpy()
    want[5:] = 0.0
    np.testing.assert_allclose(attributions[0, 2], want, rtol=1e-3, atol=1e-5)


def test_wrong_requests_fail_before_any_work():
    model, _, _ = prefix_mean_lm()
    with pytest.raises(ValueError, match="start"):
        sk.targets.generated(IDS, start=T)
    with pytest.raises(ValueError, match="start"):
        sk.targets.generated(IDS, start=0)
    with pytest.raises(ValueError, match="token ids"):
        sk.targets.generated(IDS.astype("float32"), start=2)
    with pytest.raises(ValueError, match="2 rows"):
        sk.explain(model, IDS[:1].repeat(3, 0), targets=sk.targets.generated(IDS[:2], start=2))
    with pytest.raises(ValueError, match=r"\[0, 10\]"):
        sk.explain(model, IDS, targets=sk.targets.generated(IDS + 5, start=2))
    features = keras.Input((4,))
    classifier = keras.Model(features, keras.layers.Dense(3)(features))
    with pytest.raises(ValueError, match=r"\[B, T, V\]"):
        sk.explain(classifier, np.ones((1, 4), "float32"), targets=sk.targets.generated(IDS[:1], start=2))
