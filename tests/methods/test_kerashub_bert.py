"""A KerasHub BERT classifier (multi-input: token ids, padding mask, segment ids): token ids are
explained in the token embedding's output space, the mask and segment ids are held.

Checked against references built outside saliency_kit: the gradient, integrated gradients,
SmoothGrad and expected gradients by hand with ``tf.GradientTape`` through a twin of the
classifier that starts from the token embeddings (the backbone's own layers called one by one;
SmoothGrad's noise and expected gradients' draws reproduced from their documented keys), LRP
against gradient × input of a twin written from the weights with ``tf.stop_gradient`` on what
the conservative rules hold constant, DeepLIFT against its rules computed by hand in NumPy
(``tests/propagation/transformer_reference.py``), and occlusion against replacing a token id and
running the classifier itself."""

import keras
import keras_hub
import numpy as np
import pytest
import tensorflow as tf
from method_support import normal_draws, uniform_draws
from propagation import transformer_reference as reference

import saliency_kit as sk

B, T, HIDDEN, VOCAB = 3, 10, 8, 50
LENGTHS = (10, 7, 4)  # rows 1 and 2 end in padding
STEPS = 64
EG_BASELINES = 4
METHODS = {
    "gradient": {},
    "gradient_x_input": {},
    "integrated_gradients": {"steps": STEPS},
    "smoothgrad": {"samples": 4, "seed": 0},
    "expected_gradients": {"samples": 8, "seed": 0},  # baselines: token ids, added in the fixture
    "deeplift": {},
    "lrp": {},
    "occlusion": {},
}


def make_classifier():
    keras.utils.set_random_seed(0)
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=VOCAB,
        num_layers=1,
        num_heads=2,
        hidden_dim=HIDDEN,
        intermediate_dim=16,
        max_sequence_length=12,
        dropout=0.0,
    )
    return keras_hub.models.BertTextClassifier(backbone, num_classes=3, preprocessor=None, dropout=0.0)


@pytest.fixture(scope="module")
def bert():
    """The classifier with random weights, its inputs and its weights before any explanation.

    KerasHub initialises kernels and embedding tables with std 0.02, which leaves every logit
    below 0.01; they are scaled to std 0.5 so the logits (and attributions) are of order one."""
    clf = make_classifier()
    clf.set_weights([w * 25.0 if w.ndim >= 2 else w for w in clf.get_weights()])
    rng = np.random.default_rng(0)
    mask = (np.arange(T)[None, :] < np.array(LENGTHS)[:, None]).astype("int32")
    tokens = rng.integers(1, VOCAB, (B, T)).astype("int32") * mask  # padding is token 0
    segments = (np.arange(T)[None, :] >= 5).astype("int32") * mask
    inputs = {"token_ids": tokens, "padding_mask": mask, "segment_ids": segments}
    baseline_ids = rng.integers(0, VOCAB, (EG_BASELINES, T)).astype("int32")
    return clf, inputs, baseline_ids, [w.copy() for w in clf.get_weights()]


@pytest.fixture(scope="module")
def explained(bert):
    """Every method that runs on this model, explained once (top-1 class of each row)."""
    clf, x, baseline_ids, _ = bert
    out = {}
    for method, options in METHODS.items():
        if method == "expected_gradients":
            options = {**options, "baselines": baseline_ids}
        out[method] = sk.explain(clf, x, method, "top1", **options)
    return out


def twin_logits(clf, embedded, segment_ids, padding_mask):
    """The classifier's logits from token embeddings ``[N, T, HIDDEN]``: the backbone's layers
    called one by one, as BertBackbone wires them, from after its token embedding."""
    backbone = clf.backbone
    h = backbone.embeddings_add(
        (embedded, backbone.position_embedding(embedded), backbone.segment_embedding(segment_ids))
    )
    h = backbone.embeddings_layer_norm(h)
    for layer in backbone.transformer_layers:
        h = layer(h, padding_mask=padding_mask)
    pooled = backbone.pooled_dense(h[:, 0, :])
    return clf.get_layer("logits")(pooled)


def twin_gradients(clf, x, points, targets):
    """``∂ logit[target] / ∂ embeddings`` at ``points`` ``[S, B, T, HIDDEN]`` (S points per row)."""
    s = len(points)
    flat = tf.constant(points.reshape(s * B, T, HIDDEN), tf.float32)
    segments = np.tile(x["segment_ids"], (s, 1))
    mask = np.tile(x["padding_mask"], (s, 1))
    with tf.GradientTape() as tape:
        tape.watch(flat)
        logits = twin_logits(clf, flat, segments, mask)
        score = tf.reduce_sum(tf.gather(logits, np.tile(targets, s), axis=1, batch_dims=1))
    return tape.gradient(score, flat).numpy().reshape(points.shape)


def embed(clf, token_ids):
    return np.asarray(clf.backbone.token_embedding(token_ids))


def test_the_twin_reproduces_the_classifier(bert):
    clf, x, _, _ = bert
    np.testing.assert_allclose(
        np.asarray(twin_logits(clf, embed(clf, x["token_ids"]), x["segment_ids"], x["padding_mask"])),
        np.asarray(clf(x)),
        atol=1e-5,
    )


@pytest.mark.parametrize("method", METHODS)
def test_each_method_explains_only_the_token_ids_in_embedding_space(explained, method):
    e = explained[method]
    assert isinstance(e.attributions, dict) and isinstance(e.maps, dict)
    assert set(e.attributions) == set(e.maps) == {"token_ids"}
    assert e.parts == {"token_ids": "embedding"}
    assert e.attributions["token_ids"].shape == (B, 1, T, HIDDEN)
    assert e.maps["token_ids"].shape == (B, 1, T)
    assert e.targets.shape == (B, 1)
    assert np.all(np.isfinite(e.attributions["token_ids"])) and np.any(e.attributions["token_ids"] != 0)
    assert (e.completeness_gap is not None) == (method in ("integrated_gradients", "deeplift"))


def test_gradient_and_gradient_x_input_match_the_twin(bert, explained):
    clf, x, _, _ = bert
    targets = explained["gradient"].targets[:, 0]
    embedded = embed(clf, x["token_ids"])
    grad = twin_gradients(clf, x, embedded[None], targets)[0]
    np.testing.assert_allclose(explained["gradient"].attributions["token_ids"][:, 0], grad, atol=1e-5)
    np.testing.assert_allclose(
        explained["gradient_x_input"].attributions["token_ids"][:, 0], grad * embedded, atol=1e-5
    )


def test_integrated_gradients_matches_a_hand_rolled_trapezoid_through_the_twin(bert, explained):
    """Baseline: the embedding of token 0 at every position; trapezoid rule on STEPS points."""
    clf, x, _, _ = bert
    e = explained["integrated_gradients"]
    assert e.options["rule"] == "riemann_trapezoid" and e.options["steps"] == STEPS
    targets = e.targets[:, 0]
    embedded = embed(clf, x["token_ids"])
    baseline = embed(clf, np.zeros_like(x["token_ids"]))
    alphas = np.linspace(0.0, 1.0, STEPS)
    weights = np.full(STEPS, 1.0 / (STEPS - 1))
    weights[[0, -1]] /= 2
    points = baseline[None] + alphas[:, None, None, None] * (embedded - baseline)[None]
    grads = twin_gradients(clf, x, points.astype("float32"), targets)
    reference = (embedded - baseline) * np.tensordot(weights, grads.astype("float64"), axes=1)
    ours = e.attributions["token_ids"][:, 0]
    scale = np.abs(reference).max()
    assert scale > 0.1  # attributions of order one: the comparison below is not vacuous
    assert np.abs(ours - reference).max() <= 1e-5 * scale
    np.testing.assert_allclose(e.maps["token_ids"][:, 0], reference.sum(axis=-1), atol=1e-5 * scale * HIDDEN)
    scores = np.asarray(twin_logits(clf, embedded, x["segment_ids"], x["padding_mask"]))
    np.testing.assert_allclose(e.scores[:, 0], scores[np.arange(B), targets], atol=1e-5)


def test_integrated_gradients_completeness_converges(bert, explained):
    """The gap is the trapezoid rule's error, O(steps⁻²): below 1e-3 at 64 steps (about 1e-4 here,
    with logits of order one), and doubling the steps divides it by about four."""
    clf, x, _, _ = bert
    gap = np.abs(explained["integrated_gradients"].completeness_gap).max()
    assert gap < 1e-3
    doubled = sk.explain(clf, x, "integrated_gradients", explained["integrated_gradients"].targets, steps=2 * STEPS)
    assert np.abs(doubled.completeness_gap).max() < gap / 2


def test_occlusion_is_the_score_drop_of_replacing_each_token_with_token_0(bert, explained):
    clf, x, _, _ = bert
    e = explained["occlusion"]
    rows, targets = np.arange(B), e.targets[:, 0]
    score = np.asarray(clf(x))[rows, targets]
    drops = np.zeros((B, T))
    for t in range(T):
        occluded = x["token_ids"].copy()
        occluded[:, t] = 0
        drops[:, t] = score - np.asarray(clf({**x, "token_ids": occluded}))[rows, targets]
    np.testing.assert_allclose(e.maps["token_ids"][:, 0], drops, atol=1e-5)
    np.testing.assert_allclose(
        e.attributions["token_ids"][:, 0], np.broadcast_to(drops[..., None], (B, T, HIDDEN)), atol=1e-5
    )


def test_expected_gradients_embeds_token_id_baselines(bert, explained):
    """Baselines given as token ids ``[N, T]`` are the same as their embeddings ``[N, T, HIDDEN]``."""
    clf, x, baseline_ids, _ = bert
    options = {**METHODS["expected_gradients"], "baselines": embed(clf, baseline_ids)}
    e = sk.explain(clf, x, "expected_gradients", explained["expected_gradients"].targets, **options)
    np.testing.assert_allclose(
        e.attributions["token_ids"], explained["expected_gradients"].attributions["token_ids"], atol=1e-6
    )


@pytest.mark.parametrize("method", ["gradient", "integrated_gradients"])
def test_rows_one_at_a_time_and_batch_sizes_give_the_batch_result(bert, explained, method):
    clf, x, _, _ = bert
    e = explained[method]
    options = METHODS[method]
    for b in range(B):
        row = {name: value[b : b + 1] for name, value in x.items()}
        alone = sk.explain(clf, row, method, e.targets[b : b + 1], **options)
        np.testing.assert_allclose(alone.attributions["token_ids"], e.attributions["token_ids"][b : b + 1], atol=1e-5)
    for batch_size in (1, 32):
        again = sk.explain(clf, x, method, e.targets, batch_size=batch_size, **options)
        np.testing.assert_allclose(again.attributions["token_ids"], e.attributions["token_ids"], atol=1e-5)
        np.testing.assert_allclose(again.maps["token_ids"], e.maps["token_ids"], atol=1e-5)


def test_explaining_leaves_the_weights_unchanged(bert, explained):
    clf, x, _, before = bert
    assert {"deeplift", "lrp"} <= set(explained)  # the rewriting methods ran on it, and the rest
    after = clf.get_weights()
    assert len(after) == len(before)
    for old, new in zip(before, after):
        np.testing.assert_array_equal(new, old)


# ---------------------------------------------------------------- the sampling methods, draws reproduced


def spread_noise(embedded, b, samples, noise=0.15, seed=0):
    """SmoothGrad's noisy copies of row ``b``: ``σ = noise · (max − min)`` of the row, the normal
    draws of key ``b`` from the stateless generator (``tests/method_support.py``)."""
    sigma = noise * (embedded[b].max() - embedded[b].min())
    return embedded[b] + sigma * normal_draws(seed, b, samples, range(samples), (T, HIDDEN))


def test_smoothgrad_matches_the_twin_at_the_reproduced_noisy_copies(bert, explained):
    clf, x, _, _ = bert
    e = explained["smoothgrad"]
    samples = METHODS["smoothgrad"]["samples"]
    embedded = embed(clf, x["token_ids"])
    copies = np.stack([spread_noise(embedded, b, samples) for b in range(B)], axis=1)  # [S, B, T, H]
    reference_map = twin_gradients(clf, x, copies.astype("float32"), e.targets[:, 0]).mean(axis=0)
    assert np.abs(reference_map).max() > 0.05
    np.testing.assert_allclose(e.attributions["token_ids"][:, 0], reference_map, atol=1e-5)
    # the noise matters: the plain gradient is another map
    assert np.abs(explained["gradient"].attributions["token_ids"][:, 0] - reference_map).max() > 1e-3


def test_expected_gradients_matches_the_twin_at_the_reproduced_draws(bert, explained):
    """Draw ``s`` of row ``b``: baseline ``⌊u₀ · N⌋`` and path point ``α = u₁``, ``u`` the uniform
    draws of key ``b``; the attributions are the mean of ``(x − x′) ⊙ ∂s/∂x`` at those points."""
    clf, x, baseline_ids, _ = bert
    e = explained["expected_gradients"]
    samples, seed = METHODS["expected_gradients"]["samples"], METHODS["expected_gradients"]["seed"]
    embedded, baselines = embed(clf, x["token_ids"]), embed(clf, baseline_ids)
    deltas, points = [], []
    for b in range(B):
        u = uniform_draws(seed, b, samples, range(samples), [2], "float64")
        which, alpha = np.minimum(np.floor(u[:, 0] * EG_BASELINES).astype(int), EG_BASELINES - 1), u[:, 1]
        delta = embedded[b] - baselines[which]  # [S, T, H]
        deltas.append(delta)
        points.append(baselines[which] + alpha[:, None, None] * delta)
    points, deltas = np.stack(points, axis=1), np.stack(deltas, axis=1)  # [S, B, T, H]
    grads = twin_gradients(clf, x, points.astype("float32"), e.targets[:, 0])
    expected = (deltas * grads).mean(axis=0)
    assert np.abs(expected).max() > 0.05
    np.testing.assert_allclose(e.attributions["token_ids"][:, 0], expected, atol=1e-5)


# ---------------------------------------------------------------- LRP and DeepLIFT


def parts(clf, x):
    """``(token embeddings [B, T, H], position + segment embeddings [B, T, H])``: what the
    backbone adds before its first layer norm."""
    backbone = clf.backbone
    positions = np.asarray(backbone.position_embedding.position_embeddings)[:T]
    return embed(clf, x["token_ids"]), positions + np.asarray(backbone.segment_embedding(x["segment_ids"]))


def test_the_hand_written_reference_reproduces_the_classifier(bert):
    clf, x, _, _ = bert
    params = reference.bert_params(clf)
    tokens, added = parts(clf, x)
    logits = np.stack([reference.forward(params, (tokens + added)[b], x["padding_mask"][b])[0] for b in range(B)])
    np.testing.assert_allclose(logits, np.asarray(clf(x)), atol=1e-5)


def stopped_twin_relevance(clf, x, targets):
    """Gradient × input, at the token embeddings, of the twin with the attention probabilities,
    layer norms' ``1/σ`` and the activations' ``f(z)/z`` stopped (``transformer_reference``)."""
    tokens, added = parts(clf, x)
    point = tf.constant(tokens)
    with tf.GradientTape() as tape:
        tape.watch(point)
        logits = reference.stopped_logits(reference.bert_params(clf), point + added, x["padding_mask"])
        score = tf.reduce_sum(tf.gather(logits, targets, axis=1, batch_dims=1))
    return tokens * tape.gradient(score, point).numpy(), logits.numpy()


def test_lrp_is_gradient_times_input_of_the_stop_gradient_twin(bert, explained):
    """LRP-0 (ε = 1e-9) is the twin's gradient × input, biases or not (they absorb their share in
    both); so is, up to ε's absorption (about 1e-5 relative), the default composite, which gives
    the dense layers ε = 1e-6 (no convolution, no first dense layer here: the first layer reads
    the embeddings through a sum). The position and segment embeddings, added to the tokens',
    keep their share."""
    clf, x, _, _ = bert
    e = explained["lrp"]
    relevance, logits = stopped_twin_relevance(clf, x, e.targets[:, 0])
    np.testing.assert_allclose(logits, np.asarray(clf(x)), atol=1e-5)  # the twin computes the classifier
    scale = np.abs(relevance).max()
    assert scale > 0.1
    exact = sk.explain(clf, x, "lrp", e.targets, composite="epsilon", epsilon=1e-9)
    np.testing.assert_allclose(exact.attributions["token_ids"][:, 0], relevance, atol=2e-6 * scale)
    np.testing.assert_allclose(e.attributions["token_ids"][:, 0], relevance, atol=5e-5 * scale)
    # not the plain gradient × input: the stopped quantities matter
    assert np.abs(explained["gradient_x_input"].attributions["token_ids"][:, 0] - relevance).max() > 0.01 * scale


def test_lrp_conserves_the_logit_when_nothing_absorbs(bert):
    """Biases, layer norms' β, the position and segment embeddings at zero, ε tiny: the
    relevance of the token embeddings sums to the logit (conservation)."""
    clf, x, _, _ = bert
    conserving = make_classifier()
    absorbing = ("bias", "beta", "position_embedding", "segment_embedding")
    conserving.set_weights(
        [
            np.zeros_like(w) if any(name in v.path for name in absorbing) else w
            for v, w in zip(clf.weights, clf.get_weights())
        ]
    )
    e = sk.explain(conserving, x, "lrp", "top1", composite="epsilon", epsilon=1e-9)
    logits = np.asarray(conserving(x))[np.arange(B), e.targets[:, 0]]
    assert np.abs(logits).min() > 0.05
    np.testing.assert_allclose(e.attributions["token_ids"][:, 0].sum(axis=(1, 2)), logits, rtol=1e-4)
    np.testing.assert_allclose(e.scores[:, 0], logits, rtol=1e-5)


def test_deeplift_matches_its_rules_by_hand_and_sums_to_the_delta(bert, explained):
    """Baseline: token 0's embedding at every position (the mask and segments held). Every rule
    (Rescale for GELU and tanh, the bilinear split in attention, the rescaled midpoint Jacobian of
    softmax and layer norm) recomputed in NumPy, float64."""
    clf, x, _, _ = bert
    e = explained["deeplift"]
    params = reference.bert_params(clf)
    tokens, added = parts(clf, x)
    baseline = embed(clf, np.zeros_like(x["token_ids"]))
    for b in range(B):
        multipliers = reference.deeplift(
            params, (tokens + added)[b], (baseline + added)[b], x["padding_mask"][b], e.targets[b, 0]
        )
        expected = (tokens[b] - baseline[b]) * multipliers
        scale = np.abs(expected).max()
        assert scale > 0.1
        np.testing.assert_allclose(e.attributions["token_ids"][b, 0], expected, atol=5e-4 * scale)
    baseline_logits = np.asarray(clf({**x, "token_ids": np.zeros_like(x["token_ids"])}))
    delta = e.scores[:, 0] - baseline_logits[np.arange(B), e.targets[:, 0]]
    assert np.abs(delta).min() > 0.01
    np.testing.assert_allclose(e.attributions["token_ids"][:, 0].sum(axis=(1, 2)), delta, rtol=1e-4)
    assert np.abs(e.completeness_gap).max() <= 1e-4 * np.abs(delta).max()
