"""A KerasHub BERT classifier (multi-input: token ids, padding mask, segment ids): token ids are
explained in the token embedding's output space, the mask and segment ids are held.

Checked against references built outside saliency_kit: integrated gradients by hand with
``tf.GradientTape`` through a twin of the classifier that starts from the token embeddings (the
backbone's own layers called one by one), and occlusion against replacing a token id and
running the classifier itself."""

import keras
import keras_hub
import numpy as np
import pytest
import tensorflow as tf

import saliency_kit as sk

B, T, HIDDEN, VOCAB = 3, 10, 8, 50
LENGTHS = (10, 7, 4)  # rows 1 and 2 end in padding
STEPS = 64
EG_BASELINES = 4
GRADIENT_METHODS = {
    "gradient": {},
    "gradient_x_input": {},
    "integrated_gradients": {"steps": STEPS},
    "smoothgrad": {"samples": 4, "seed": 0},
    "expected_gradients": {"samples": 8, "seed": 0},  # baselines: token ids, added in the fixture
    "occlusion": {},
}
REWRITING_METHODS = ("deeplift", "lrp")


@pytest.fixture(scope="module")
def bert():
    """The classifier with random weights, its inputs and its weights before any explanation.

    KerasHub initialises kernels and embedding tables with std 0.02, which leaves every logit
    below 0.01; they are scaled to std 0.5 so the logits (and attributions) are of order one."""
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
    clf = keras_hub.models.BertTextClassifier(backbone, num_classes=3, preprocessor=None, dropout=0.0)
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
    for method, options in GRADIENT_METHODS.items():
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


@pytest.mark.parametrize("method", GRADIENT_METHODS)
def test_each_method_explains_only_the_token_ids_in_embedding_space(explained, method):
    e = explained[method]
    assert isinstance(e.attributions, dict) and isinstance(e.maps, dict)
    assert set(e.attributions) == set(e.maps) == {"token_ids"}
    assert e.parts == {"token_ids": "embedding"}
    assert e.attributions["token_ids"].shape == (B, 1, T, HIDDEN)
    assert e.maps["token_ids"].shape == (B, 1, T)
    assert e.targets.shape == (B, 1)
    assert np.all(np.isfinite(e.attributions["token_ids"])) and np.any(e.attributions["token_ids"] != 0)
    assert (e.completeness_gap is not None) == (method == "integrated_gradients")


@pytest.mark.parametrize("method", REWRITING_METHODS)
def test_lrp_and_deeplift_refuse_the_transformer_with_a_clear_error(bert, method):
    """No LRP/DeepLIFT rule covers the backbone's position embedding, layer normalisation or
    attention: the refusal names the first such layer and points to the gradient methods."""
    clf, x, _, _ = bert
    layer = rf"'{clf.backbone.name}/\w+' \(\w+\)"
    with pytest.raises(ValueError, match=rf"cannot rewrite layer {layer} for LRP/DeepLIFT.*gradient method"):
        sk.explain(clf, x, method, "top1")


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
    options = {**GRADIENT_METHODS["expected_gradients"], "baselines": embed(clf, baseline_ids)}
    e = sk.explain(clf, x, "expected_gradients", explained["expected_gradients"].targets, **options)
    np.testing.assert_allclose(
        e.attributions["token_ids"], explained["expected_gradients"].attributions["token_ids"], atol=1e-6
    )


@pytest.mark.parametrize("method", ["gradient", "integrated_gradients"])
def test_rows_one_at_a_time_and_batch_sizes_give_the_batch_result(bert, explained, method):
    clf, x, _, _ = bert
    e = explained[method]
    options = GRADIENT_METHODS[method]
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
    for method in REWRITING_METHODS:
        with pytest.raises(ValueError):
            sk.explain(clf, x, method, "top1")
    after = clf.get_weights()
    assert len(after) == len(before)
    for old, new in zip(before, after):
        np.testing.assert_array_equal(new, old)
