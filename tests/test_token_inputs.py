"""Token ids explained in embedding space, inner layers (``attribute_to=LAYER``) and conductance.

The references are independent of saliency_kit: a twin model that takes precomputed embeddings
(the same layer objects after the embedding), gradients of a model split at a layer taken with
tf.GradientTape, integrated gradients, SmoothGrad, expected gradients and conductance written out
by hand on the twin (their noise and draws reproduced from the documented keys with TensorFlow's
stateless generators), LRP-ε written in NumPy, and the score drop of each token replaced by the
padding id computed with the model."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras
import numpy as np
import pytest
import tensorflow as tf
from method_support import normal_draws, uniform_draws

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


def test_a_table_assigned_between_calls_is_read_afresh_by_the_same_kernel(text):
    """The token rows and the baseline token's row are read from the embedding's current weights
    at every call: after ``assign``, integrated gradients and occlusion match the twin fed the new
    embeddings, from the kernels compiled for the old weights (no new trace)."""
    model, twin, embedding, x = text
    old = embedding.embeddings.numpy()
    try:
        before = sk.explain(model, x, "integrated_gradients", targets=1, steps=8)
        sk.explain(model, x, "occlusion", targets=0)
        traces = sk.engine.trace_count()
        embedding.embeddings.assign(np.random.default_rng(7).normal(size=old.shape).astype("float32"))
        after = sk.explain(model, x, "integrated_gradients", targets=1, steps=8)
        occluded = sk.explain(model, x, "occlusion", targets=0)
        assert sk.engine.trace_count() == traces  # the same kernels, reading the new table
        new = embedding.embeddings.numpy()
        emb, e0 = new[x["token_ids"]], np.broadcast_to(new[0], (4, T, D))
        want = _twin_ig(twin, emb, e0, x["padding_mask"], 1, 8)
        np.testing.assert_allclose(after.attributions["token_ids"][:, 0], want, atol=1e-5)
        assert np.abs(before.attributions["token_ids"] - after.attributions["token_ids"]).max() > 1e-2
        clean = twin([emb, x["padding_mask"]]).numpy()[:, 0]
        for t in range(T):  # the score drop with token t's row replaced by token 0's new row
            replaced = emb.copy()
            replaced[:, t] = new[0]
            drop = clean - twin([replaced, x["padding_mask"]]).numpy()[:, 0]
            np.testing.assert_allclose(occluded.maps["token_ids"][:, 0, t], drop, atol=1e-5)
    finally:
        embedding.embeddings.assign(old)


def test_a_baseline_given_as_one_token_id_is_that_tokens_embedding_and_recorded_as_the_id(text):
    model, twin, embedding, x = text
    given = sk.explain(model, x, "integrated_gradients", targets=2, steps=10, baseline={"token_ids": 5})
    default = sk.explain(model, x, "integrated_gradients", targets=2, steps=10, baseline_token=5)
    emb = embedding(x["token_ids"]).numpy()
    e5 = np.broadcast_to(embedding(np.full((1, T), 5, "int32")).numpy(), emb.shape)
    want = _twin_ig(twin, emb, e5, x["padding_mask"], 2, 10)
    np.testing.assert_allclose(given.attributions["token_ids"][:, 0], want, atol=1e-5)
    np.testing.assert_allclose(default.attributions["token_ids"][:, 0], want, atol=1e-5)
    assert default.options["baseline"] == 5 and given.options["baseline"] == {"token_ids": 5}
    with pytest.raises(ValueError, match=rf"must lie in \[0, {V}\), its vocabulary; received {V}"):
        sk.explain(model, x, "integrated_gradients", targets=2, baseline={"token_ids": V})


def test_token_ids_explained_together_with_a_float_input_match_a_twin():
    """Token ids and a float input packed in one integrated-gradients path (the baseline: token
    0's embedding and 0.5) against the same path written out on a twin fed the embeddings."""
    tokens, features = keras.Input((T,), dtype="int32", name="token_ids"), keras.Input((3,), name="features")
    embedding = keras.layers.Embedding(V, D, name="emb")
    hidden, side, head = keras.layers.Dense(4, activation="tanh"), keras.layers.Dense(4), keras.layers.Dense(2)
    pool, join = keras.layers.GlobalAveragePooling1D(), keras.layers.Concatenate()
    model = keras.Model([tokens, features], head(join([pool(hidden(embedding(tokens))), side(features)])))
    embedded = keras.Input((T, D))
    twin = keras.Model([embedded, features], head(join([pool(hidden(embedded)), side(features)])))
    ids, f = RNG.integers(1, V, (3, T)).astype("int32"), RNG.normal(size=(3, 3)).astype("float32")
    e = sk.explain(model, [ids, f], "integrated_gradients", targets=1, steps=16, baseline=[0, 0.5])
    assert e.parts == {"token_ids": "embedding", "features": "input"}
    emb = embedding(ids).numpy()
    e0, f0 = np.broadcast_to(embedding.embeddings.numpy()[0], emb.shape), np.full_like(f, 0.5)
    weights = np.full(16, 1 / 15)
    weights[[0, -1]] /= 2
    total_e, total_f = np.zeros_like(emb), np.zeros_like(f)
    for alpha, w in zip(np.linspace(0, 1, 16), weights):
        points = [tf.constant((e0 + alpha * (emb - e0)).astype("float32")), tf.constant(f0 + alpha * (f - f0))]
        with tf.GradientTape() as tape:
            tape.watch(points)
            score = twin(points)[:, 1]
        g_e, g_f = tape.gradient(score, points)
        total_e += w * g_e.numpy()
        total_f += w * g_f.numpy()
    np.testing.assert_allclose(e.attributions[0][:, 0], (emb - e0) * total_e, atol=1e-5)
    np.testing.assert_allclose(e.attributions[1][:, 0], (f - f0) * total_f, atol=1e-5)


def _twin_gradients(twin, points, mask, cls):
    """``∂s_cls/∂e`` of the twin at embeddings ``points [N, T, D]`` with ``mask [N, T]``."""
    point = tf.constant(np.asarray(points, "float32"))
    with tf.GradientTape() as tape:
        tape.watch(point)
        score = twin([point, tf.constant(mask)])[:, cls]
    return tape.gradient(score, point).numpy()


def test_smoothgrad_on_token_ids_is_the_twins_gradient_averaged_over_the_same_noise(text):
    """The noise is drawn in embedding space, σ = noise × (max − min) of each row's embeddings
    ``[T, D]`` (padding positions included), copy s of row b drawn from the stateless normal
    generator keyed by (seed, b · samples + s); the mask is held at each row's own."""
    model, twin, embedding, x = text
    classes, samples, seed, noise = [0, 1, 2, 0], 5, 4, 1.0
    e = sk.explain(model, x, "smoothgrad", targets=classes, samples=samples, seed=seed, noise=noise)
    assert e.parts == {"token_ids": "embedding"} and e.attributions["token_ids"].shape == (4, 1, T, D)
    emb = embedding(x["token_ids"]).numpy()
    for b, cls in enumerate(classes):
        sigma = noise * (emb[b].max() - emb[b].min())
        copies = emb[b] + sigma * normal_draws(seed, b, samples, range(samples), (T, D))
        masks = np.repeat(x["padding_mask"][b : b + 1], samples, axis=0)
        want = _twin_gradients(twin, copies, masks, cls).mean(axis=0)
        np.testing.assert_allclose(e.attributions["token_ids"][b, 0], want, rtol=1e-5, atol=1e-7)
    plain = _twin_gradients(twin, emb, x["padding_mask"], 0)
    # the noise moved it, by 100 × the tolerance
    assert np.abs(e.attributions["token_ids"][0, 0] - plain[0]).max() > 1e-4


def test_smoothgrad_without_noise_is_the_plain_embedding_gradient(text):
    model, twin, embedding, x = text
    e = sk.explain(model, x, "smoothgrad", targets=[2, 0, 1, 2], samples=3, seed=1, noise=0.0)
    emb = embedding(x["token_ids"]).numpy()
    want = np.stack(
        [_twin_gradients(twin, emb[b : b + 1], x["padding_mask"][b : b + 1], c)[0] for b, c in enumerate([2, 0, 1, 2])]
    )
    np.testing.assert_allclose(e.attributions["token_ids"][:, 0], want, rtol=1e-5, atol=1e-8)


def test_expected_gradients_on_token_ids_with_token_id_baselines_matches_the_twin(text):
    """Baselines given as token ids are embedded; draw s of row b picks the baseline ⌊u₀ · N⌋
    and the path point α = u₁ from the uniform generator keyed by (seed, −1 − (b · samples + s))."""
    model, twin, embedding, x = text
    references = np.random.default_rng(4).integers(0, V, (3, T)).astype("int32")
    classes, samples, seed = [0, 1, 2, 0], 6, 2
    e = sk.explain(
        model, x, "expected_gradients", targets=classes, samples=samples, seed=seed, baselines={"token_ids": references}
    )
    assert e.attributions["token_ids"].shape == (4, 1, T, D)
    emb, embedded_references = embedding(x["token_ids"]).numpy(), embedding(references).numpy()
    for b, cls in enumerate(classes):
        u = uniform_draws(seed, b, samples, range(samples), [2], "float64")
        which, alpha = np.minimum(np.floor(u[:, 0] * 3).astype(int), 2), u[:, 1]
        delta = emb[b] - embedded_references[which]  # [samples, T, D]
        points = embedded_references[which] + alpha[:, None, None] * delta
        masks = np.repeat(x["padding_mask"][b : b + 1], samples, axis=0)
        want = (delta * _twin_gradients(twin, points, masks, cls)).mean(axis=0)
        np.testing.assert_allclose(e.attributions["token_ids"][b, 0], want, rtol=1e-5, atol=1e-8)


def test_deeplift_runs_in_embedding_space_and_sums_to_delta():
    tokens = keras.Input((T,), dtype="int32", name="token_ids")
    h = keras.layers.Dense(5, activation="relu")(keras.layers.Embedding(V, D, name="emb")(tokens))
    model = keras.Model(tokens, keras.layers.Dense(3)(keras.layers.GlobalAveragePooling1D()(h)))
    ids = RNG.integers(1, V, (3, T)).astype("int32")
    e = sk.explain(model, ids, "deeplift", targets=1)
    assert e.parts == {"token_ids": "embedding"} and e.attributions.shape == (3, 1, T, D)
    assert np.abs(e.completeness_gap).max() < 1e-5  # Σ attributions = s(x) − s(baseline token's embedding)


def _token_relu_model(bias: bool, seed: int):
    """ids → Embedding(V, D) → Dense(5, relu) → mean over T → Dense(3): the layers, and the model."""
    rng = np.random.default_rng(seed)
    tokens = keras.Input((T,), dtype="int32", name="token_ids")
    embedding = keras.layers.Embedding(V, D, name="emb")
    dense = keras.layers.Dense(5, activation="relu", use_bias=bias, name="dense")
    head = keras.layers.Dense(3, use_bias=bias, name="head")
    model = keras.Model(tokens, head(keras.layers.GlobalAveragePooling1D()(dense(embedding(tokens)))))
    embedding.embeddings.assign(rng.normal(size=(V, D)))  # scores of order 1, not 1e-2
    for layer in (dense, head):
        layer.kernel.assign(rng.normal(size=layer.kernel.shape))
        if bias:
            layer.bias.assign(rng.normal(size=layer.bias.shape) * 0.3)
    return model, embedding, dense, head


def _numpy_lrp_epsilon(e, dense, head, cls, epsilon, pooling_epsilon=1e-6):
    """LRP-ε of one row's embeddings ``e [T, D]`` through Dense-ReLU, the mean over T (a linear
    layer of weights 1/T, with its own stabiliser) and the head: relevance ``[T, D]``."""

    def stab(z, eps):
        return z + eps * np.where(z >= 0, 1.0, -1.0)

    W1, W2 = dense.kernel.numpy().astype(np.float64), head.kernel.numpy().astype(np.float64)
    b1 = dense.bias.numpy().astype(np.float64) if dense.use_bias else 0.0
    b2 = head.bias.numpy().astype(np.float64) if head.use_bias else 0.0
    z1 = e @ W1 + b1
    a1 = np.maximum(z1, 0)
    p = a1.mean(axis=0)
    z2 = p @ W2 + b2
    R2 = np.where(np.arange(len(z2)) == cls, z2, 0.0)
    Rp = p * (W2 @ (R2 / stab(z2, epsilon)))
    Ra1 = (a1 / len(e)) * (Rp / stab(p, pooling_epsilon))  # the ReLU passes relevance unchanged
    return e * ((Ra1 / stab(z1, epsilon)) @ W1.T)


def test_lrp_on_token_ids_matches_numpy_lrp_epsilon_and_conserves_without_biases():
    ids = RNG.integers(1, V, (3, T)).astype("int32")
    classes = [0, 1, 2]
    for bias in (False, True):
        model, embedding, dense, head = _token_relu_model(bias, seed=5)
        emb = embedding(ids).numpy().astype(np.float64)
        for epsilon in (1e-6, 0.1):
            e = sk.explain(model, ids, "lrp", targets=classes, composite="epsilon", epsilon=epsilon)
            assert e.parts == {"token_ids": "embedding"} and e.attributions.shape == (3, 1, T, D)
            for b, cls in enumerate(classes):
                want = _numpy_lrp_epsilon(emb[b], dense, head, cls, epsilon)
                np.testing.assert_allclose(e.attributions[b, 0], want, rtol=1e-4, atol=1e-6)
            if not bias and epsilon == 1e-6:  # no bias, ε → 0: the embeddings' relevance sums to the logit
                logits = tf.gather(model(ids), classes, batch_dims=1).numpy()
                assert np.abs(logits).min() > 1e-2
                np.testing.assert_allclose(e.attributions.sum(axis=(2, 3))[:, 0], logits, rtol=1e-4, atol=1e-5)


def test_lrp_zero_on_a_relu_network_of_token_ids_is_gradient_times_embedding():
    """LRP-0 (ε → 0) of a ReLU network with biases equals gradient × input in embedding space,
    the gradient taken on a twin fed the embeddings."""
    model, embedding, dense, head = _token_relu_model(True, seed=6)
    embedded = keras.Input((T, D))
    twin = keras.Model(embedded, head(keras.layers.GlobalAveragePooling1D()(dense(embedded))))
    ids = RNG.integers(1, V, (4, T)).astype("int32")
    emb = embedding(ids).numpy()
    point = tf.constant(emb)
    with tf.GradientTape() as tape:
        tape.watch(point)
        score = twin(point)[:, 2]
    want = emb * tape.gradient(score, point).numpy()
    e = sk.explain(model, ids, "lrp", targets=2, composite="epsilon", epsilon=1e-7)
    np.testing.assert_allclose(e.attributions[:, 0], want, rtol=1e-4, atol=1e-5)
    assert np.abs(want).max() > 0.1


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


def test_conductance_of_a_layer_of_a_token_model_runs_its_path_in_embedding_space(text):
    """Conductance at the tanh ``hidden`` layer: the path runs from the padding token's embedding
    to the tokens', the mask held; each unit's share written out with the model split at the
    layer (the trapezoid of the layer gradient times the layer's change on each interval)."""
    model, _, embedding, x = text
    hidden, pool, head = (model.get_layer(n) for n in ("hidden", "pool", "head"))
    steps = 6
    c = sk.explain(model, x, "conductance", targets=[0, 2, 1, 1], attribute_to="hidden", steps=steps)
    assert c.attributions.shape == (4, 1, T, 8) and c.layer == "hidden"
    emb = embedding(x["token_ids"]).numpy()
    e0 = embedding(np.zeros((1, T), "int32")).numpy()[0]
    for b, cls in enumerate([0, 2, 1, 1]):
        alphas = np.linspace(0, 1, steps)[:, None, None]
        y = tf.constant(hidden(e0 + alphas * (emb[b] - e0)).numpy())  # [steps, T, 8]
        with tf.GradientTape() as tape:
            tape.watch(y)
            score = head(pool(y, tf.constant(np.repeat(x["padding_mask"][b : b + 1], steps, axis=0))))[:, cls]
        g, y = tape.gradient(score, y).numpy(), y.numpy()
        want = (0.5 * (g[1:] + g[:-1]) * (y[1:] - y[:-1])).sum(axis=0)
        np.testing.assert_allclose(c.attributions[b, 0], want, rtol=1e-5, atol=1e-7)


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
