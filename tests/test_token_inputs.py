"""Token ids explained in embedding space, inner layers (``attribute_to=LAYER``) and conductance.

The references are independent of saliency_kit: a twin model that takes precomputed embeddings
(the same layer objects after the embedding), gradients of a model split at a layer taken with
tf.GradientTape, integrated gradients written out by hand, and the score drop of each token
replaced by the padding id computed with the model."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras
import numpy as np
import pytest
import tensorflow as tf

import saliency_kit as sk

T, V, D = 7, 20, 6
RNG = np.random.default_rng(11)


class MaskedMean(keras.layers.Layer):
    def call(self, values, mask):
        m = keras.ops.cast(mask, values.dtype)[..., None]
        return keras.ops.sum(values * m, axis=1) / keras.ops.maximum(keras.ops.sum(m, axis=1), 1.0)


@pytest.fixture(scope="module")
def text():
    """A dict-input text classifier, its layers after the embedding, and a twin on embeddings."""
    tokens = keras.Input((T,), dtype="int32", name="token_ids")
    mask = keras.Input((T,), dtype="int32", name="padding_mask")
    embedding = keras.layers.Embedding(V, D, name="token_embedding")
    hidden = keras.layers.Dense(8, activation="tanh", name="hidden")
    pool, head = MaskedMean(name="pool"), keras.layers.Dense(3, name="head")
    model = keras.Model({"token_ids": tokens, "padding_mask": mask}, head(pool(hidden(embedding(tokens)), mask)))
    embedded, mask2 = keras.Input((T, D)), keras.Input((T,), dtype="int32")
    twin = keras.Model([embedded, mask2], head(pool(hidden(embedded), mask2)))
    ids = RNG.integers(1, V, (4, T)).astype("int32")
    masks = np.ones((4, T), "int32")
    masks[1, 5:] = 0
    ids[1, 5:] = 0
    return model, twin, embedding, {"token_ids": ids, "padding_mask": masks}


def _twin_ig(twin, e, e0, mask, cls, steps):
    weights = np.full(steps, 1 / (steps - 1))
    weights[[0, -1]] /= 2
    total = np.zeros_like(e)
    for alpha, w in zip(np.linspace(0, 1, steps), weights):
        point = tf.constant((e0 + alpha * (e - e0)).astype("float32"))
        with tf.GradientTape() as tape:
            tape.watch(point)
            score = twin([point, tf.constant(mask)])[:, cls]
        total += w * tape.gradient(score, point).numpy()
    return (e - e0) * total


def test_ig_on_the_embedding_equals_ig_on_a_twin_fed_embeddings(text):
    model, twin, embedding, x = text
    e = sk.explain(model, x, "integrated_gradients", targets=1, steps=24)
    assert e.parts == {"token_ids": "embedding"}  # the mask is held, not explained
    assert set(e.attributions) == {"token_ids"} and e.attributions["token_ids"].shape == (4, 1, T, D)
    assert e.maps["token_ids"].shape == (4, 1, T)
    emb = embedding(x["token_ids"]).numpy()
    e0 = np.broadcast_to(embedding(np.zeros((1, T), "int32")).numpy(), emb.shape)  # token 0: the padding id
    want = _twin_ig(twin, emb, e0, x["padding_mask"], 1, 24)
    np.testing.assert_allclose(e.attributions["token_ids"][:, 0], want, atol=1e-5)
    np.testing.assert_allclose(e.maps["token_ids"][:, 0], want.sum(-1), atol=1e-5)
    via_twin = sk.explain(
        twin, [emb, x["padding_mask"]], "integrated_gradients", targets=1, steps=24, baseline=[e0[0], 0]
    )
    np.testing.assert_allclose(e.attributions["token_ids"], via_twin.attributions[0], atol=1e-5)
    assert np.abs(e.completeness_gap).max() < 1e-4


def test_baseline_token_and_gradient_family_in_embedding_space(text):
    model, twin, embedding, x = text
    emb = embedding(x["token_ids"]).numpy()
    point = tf.constant(emb)
    with tf.GradientTape() as tape:
        tape.watch(point)
        score = twin([point, tf.constant(x["padding_mask"])])[:, 2]
    grad = tape.gradient(score, point).numpy()
    g = sk.explain(model, x, "gradient_x_input", targets=2)
    np.testing.assert_allclose(g.attributions["token_ids"][:, 0], emb * grad, atol=1e-6)
    three = sk.explain(model, x, "integrated_gradients", targets=2, steps=12, baseline_token=3)
    e3 = np.broadcast_to(embedding(np.full((1, T), 3, "int32")).numpy(), emb.shape)
    np.testing.assert_allclose(
        three.attributions["token_ids"][:, 0], _twin_ig(twin, emb, e3, x["padding_mask"], 2, 12), atol=1e-5
    )


def test_occlusion_replaces_one_token_at_a_time_by_the_padding_id(text):
    model, _, _, x = text
    e = sk.explain(model, x, "occlusion", targets=0)
    clean = model(x).numpy()[:, 0]
    for t in range(T):
        ids = x["token_ids"].copy()
        ids[:, t] = 0
        drop = clean - model({"token_ids": ids, "padding_mask": x["padding_mask"]}).numpy()[:, 0]
        np.testing.assert_allclose(e.maps["token_ids"][:, 0, t], drop, atol=1e-5)


@pytest.mark.parametrize("method", ["smoothgrad", "expected_gradients"])
def test_noisy_and_sampled_methods_run_in_embedding_space(text, method):
    model, _, _, x = text
    options = {"samples": 3, "seed": 0}
    if method == "expected_gradients":
        options["baselines"] = {"token_ids": RNG.integers(0, V, (3, T)).astype("int32")}  # embedded for you
    e = sk.explain(model, x, method, targets=[0, 1, 2, 0], **options)
    assert e.attributions["token_ids"].shape == (4, 1, T, D) and np.all(np.isfinite(e.attributions["token_ids"]))


@pytest.mark.parametrize("method", ["deeplift", "lrp"])
def test_rewriting_methods_run_in_embedding_space_and_conserve(method):
    tokens = keras.Input((T,), dtype="int32", name="token_ids")
    h = keras.layers.Dense(5, activation="relu")(keras.layers.Embedding(V, D, name="emb")(tokens))
    model = keras.Model(tokens, keras.layers.Dense(3)(keras.layers.GlobalAveragePooling1D()(h)))
    ids = RNG.integers(1, V, (3, T)).astype("int32")
    e = sk.explain(model, ids, method, targets=1, **({"composite": "epsilon"} if method == "lrp" else {}))
    assert e.parts == {"token_ids": "embedding"} and e.attributions.shape == (3, 1, T, D)
    if method == "deeplift":  # Σ attributions = s(x) − s(baseline token's embedding)
        assert np.abs(e.completeness_gap).max() < 1e-5
    else:
        assert np.all(np.isfinite(e.attributions)) and np.any(e.attributions)


def test_token_explanations_render_as_escaped_html(text):
    model, _, _, x = text
    e = sk.explain(model, x, "gradient_x_input", targets=0)
    page = sk.render.tokens_html(e, [["<script>alert(1)</script>"] + ["w"] * (T - 1)] * 4)
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert e.with_tokens([["a"] * T] * 4)._repr_html_()


def test_attribute_to_a_layer_gives_the_gradient_at_its_output(text):
    model, _, embedding, x = text
    hidden, pool, head = (model.get_layer(n) for n in ("hidden", "pool", "head"))
    mask = tf.constant(x["padding_mask"])
    point = tf.constant(hidden(embedding(x["token_ids"])).numpy())
    with tf.GradientTape() as tape:
        tape.watch(point)
        score = head(pool(point, mask))[:, 1]
    h, grad = point.numpy(), tape.gradient(score, point).numpy()
    for layer in ("hidden", hidden):
        e = sk.explain(model, x, "gradient_x_input", targets=1, attribute_to=layer)
        assert e.parts == {"hidden": "layer"}
        np.testing.assert_allclose(e.attributions[:, 0], h * grad, atol=1e-6)  # one layer: one array
    ig = sk.explain(model, x, "integrated_gradients", targets=1, attribute_to="hidden", steps=32)
    assert ig.attributions.shape == (4, 1, T, 8) and np.abs(ig.completeness_gap).max() < 1e-3


def test_conductance_of_a_linear_first_layer_sums_to_integrated_gradients():
    """y = Wx + b: conductance summed over the layer is IG summed over the input, exactly."""
    x_in = keras.Input((5,))
    first = keras.layers.Dense(6, name="first")(x_in)
    out = keras.layers.Dense(2)(keras.layers.Activation("tanh")(keras.layers.Dense(4, activation="relu")(first)))
    model = keras.Model(x_in, out)
    x = RNG.normal(size=(3, 5)).astype("float32")
    c = sk.explain(model, x, "conductance", targets=1, attribute_to="first", steps=16, baseline=0.2)
    ig = sk.explain(model, x, "integrated_gradients", targets=1, steps=16, baseline=0.2)
    assert c.attributions.shape == (3, 1, 6) and c.layer == "first"
    np.testing.assert_allclose(c.attributions.sum(-1), ig.attributions.sum(-1), atol=1e-5)
    np.testing.assert_allclose(c.completeness_gap, ig.completeness_gap, atol=1e-5)


def test_conductance_of_a_nonlinear_layer_is_complete_as_steps_grow():
    x_in = keras.Input((4,))
    h = keras.layers.Dense(5, activation="tanh", name="hidden")(x_in)
    model = keras.Model(x_in, keras.layers.Dense(2)(keras.layers.Dense(3, activation="tanh")(h)))
    x = RNG.normal(size=(2, 4)).astype("float32")
    gaps = [
        np.abs(sk.explain(model, x, "conductance", targets=0, attribute_to="hidden", steps=s).completeness_gap).max()
        for s in (4, 64)
    ]
    assert gaps[1] < 1e-4 and gaps[1] < gaps[0]


def test_integer_inputs_without_an_embedding_are_refused_with_what_to_do():
    ids = keras.Input((4,), dtype="int32", name="codes")
    model = keras.Model(ids, keras.layers.Dense(2)(keras.ops.cast(ids, "float32")))
    with pytest.raises(ValueError, match="feed no Embedding"):
        sk.explain(model, np.ones((2, 4), "int32"), "gradient")
    with pytest.raises(ValueError, match="conductance attributes to an inner layer"):
        sk.explain(model, np.ones((2, 4), "float32"), "conductance")


@pytest.mark.parametrize("bad", [V, -1])
def test_token_ids_outside_the_vocabulary_are_refused_with_where(text, bad):
    model, _, _, inputs = text
    ids = inputs["token_ids"].copy()
    ids[2, 3] = bad
    with pytest.raises(
        ValueError, match=rf"must lie in \[0, {V}\), its vocabulary; received {bad} at position \[2, 3\]"
    ):
        sk.explain(model, {**inputs, "token_ids": ids}, "gradient", 0)
    with pytest.raises(ValueError, match="its vocabulary"):
        sk.explain(model, inputs, "integrated_gradients", 0, baseline_token=V + 5)
