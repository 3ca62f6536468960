"""The table of input kinds: an image with tabular metadata (two inputs), a siamese pair sharing
its weights, a dict-input text classifier fed token ids and an integer padding mask, a Conv1D
time-series net and a Conv3D volume net.

For each kind: the gradient family and guided backprop/deconvnet equal a hand-built twin (the
same forward pass in plain TensorFlow ops with ReLUs whose backward rules are written by hand in
``twin_support.py``; the text twin takes the embeddings precomputed), and every registered
method gives the same attributions for the whole batch, with ``batch_size=1`` and for one input
alone, or is refused before any work where it does not apply (XRAI and RISE need images, Blur IG
images or sequences)."""

import os
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras
import numpy as np
import pytest
import tensorflow as tf
from method_support import input_methods, small_options
from twin_support import RELU, dense, twin_activation

import saliency_kit as sk

RNG = np.random.default_rng(23)
B, T, VOCAB = 3, 7, 20
TARGETS = np.tile([0, 2], (B, 1))


# -- the kinds: (model, inputs [B rows], twin(x, values, act) -> [B, 3], values(x) -> what the twin differentiates)
def conv_relu(layer, x, act, rank):
    kernel, bias = (tf.constant(w) for w in layer.get_weights())
    convolve = {1: tf.nn.conv1d, 2: tf.nn.conv2d, 3: tf.nn.conv3d}[rank]
    return act(convolve(x, kernel, [1] * (rank + 2) if rank == 3 else 1, "VALID") + bias, RELU)


def image_meta():
    image, meta = keras.Input((8, 8, 3), name="image"), keras.Input((5,), name="meta")
    conv = keras.layers.Conv2D(4, 3, activation="relu", name="conv")
    meta_dense = keras.layers.Dense(
        8, activation="relu", bias_initializer=keras.initializers.Constant(0.5), name="meta_dense"
    )
    head = keras.layers.Dense(3, name="head")
    z = keras.layers.Concatenate()([keras.layers.GlobalAveragePooling2D()(conv(image)), meta_dense(meta)])
    model = keras.Model([image, meta], head(z), name="image_meta")
    x = [RNG.normal(size=(B, 8, 8, 3)).astype("float32"), RNG.normal(size=(B, 5)).astype("float32")]

    def twin(x, values, act):
        pooled = tf.reduce_mean(conv_relu(conv, values[0], act, 2), axis=[1, 2])
        return dense(head, tf.concat([pooled, act(dense(meta_dense, values[1]), RELU)], axis=1))

    return model, x, twin, lambda x: x


def siamese():
    conv = keras.layers.Conv2D(3, 3, activation="relu", name="conv")
    branch = keras.Sequential([keras.Input((6, 6, 2)), conv, keras.layers.Flatten()], name="branch")
    left, right = keras.Input((6, 6, 2), name="left"), keras.Input((6, 6, 2), name="right")
    head = keras.layers.Dense(3, name="head")
    model = keras.Model([left, right], head(keras.layers.Subtract()([branch(left), branch(right)])), name="siamese")
    x = [RNG.normal(size=(B, 6, 6, 2)).astype("float32") for _ in range(2)]

    def twin(x, values, act):
        flat = [tf.reshape(conv_relu(conv, v, act, 2), [B, -1]) for v in values]
        return dense(head, flat[0] - flat[1])

    return model, x, twin, lambda x: x


def text():
    ids, mask = (
        keras.Input((T,), dtype="int32", name="token_ids"),
        keras.Input((T,), dtype="int32", name="padding_mask"),
    )
    embedding = keras.layers.Embedding(VOCAB, 6, name="embedding")
    hidden = keras.layers.Dense(5, activation="relu", name="hidden")
    head = keras.layers.Dense(3, name="head")
    kept = hidden(embedding(ids)) * keras.ops.expand_dims(keras.ops.cast(mask, "float32"), -1)
    model = keras.Model({"token_ids": ids, "padding_mask": mask}, head(keras.layers.GlobalAveragePooling1D()(kept)))
    padding = np.ones((B, T), "int32")
    padding[0, 5:] = padding[2, 4:] = 0
    x = {"token_ids": RNG.integers(1, VOCAB, (B, T)).astype("int32") * padding, "padding_mask": padding}

    def twin(x, values, act):
        kept = act(dense(hidden, values[0]), RELU) * x["padding_mask"][..., None].astype("float32")
        return dense(head, tf.reduce_mean(kept, axis=1))

    return model, x, twin, lambda x: [embedding.get_weights()[0][x["token_ids"]]]


def series():
    conv, head = keras.layers.Conv1D(4, 3, activation="relu"), keras.layers.Dense(3)
    model = keras.Sequential([keras.Input((12, 2)), conv, keras.layers.GlobalAveragePooling1D(), head], name="series")

    def twin(x, values, act):
        return dense(head, tf.reduce_mean(conv_relu(conv, values[0], act, 1), axis=1))

    return model, RNG.normal(size=(B, 12, 2)).astype("float32"), twin, lambda x: [x]


def volume():
    conv, head = keras.layers.Conv3D(4, 3, activation="relu"), keras.layers.Dense(3)
    model = keras.Sequential([keras.Input((4, 5, 5, 2)), conv, keras.layers.GlobalAveragePooling3D(), head])

    def twin(x, values, act):
        return dense(head, tf.reduce_mean(conv_relu(conv, values[0], act, 3), axis=[1, 2, 3]))

    return model, RNG.normal(size=(B, 4, 5, 5, 2)).astype("float32"), twin, lambda x: [x]


KINDS = {"image_meta": image_meta, "siamese": siamese, "text": text, "series": series, "volume": volume}
# Methods a kind is refused, with a ValueError before any work.
REFUSED = {"text": {"xrai", "rise"}, "series": {"xrai", "rise"}, "volume": {"xrai", "rise", "blur_ig"}}


@pytest.fixture(params=list(KINDS), scope="module")
def kind(request):
    keras.utils.set_random_seed(4)
    return request.param, *KINDS[request.param]()


def per_input(attributions):
    """The attributions of each explained input, in the twin's order."""
    if isinstance(attributions, dict):
        return list(attributions.values())
    return list(attributions) if isinstance(attributions, (list, tuple)) else [attributions]


def rows(x, i):
    if isinstance(x, dict):
        return {k: v[i : i + 1] for k, v in x.items()}
    return [a[i : i + 1] for a in x] if isinstance(x, list) else x[i : i + 1]


def twin_gradients(twin, x, values, rule):
    """``[K][input] -> [B, ...]``: the twin's gradients of the classes of ``TARGETS``."""
    out = []
    for c in TARGETS[0]:
        tensors = [tf.constant(v) for v in values]
        with tf.GradientTape() as tape:
            tape.watch(tensors)
            score = tf.reduce_sum(twin(x, tensors, twin_activation(rule))[:, c])
        out.append([g.numpy() for g in tape.gradient(score, tensors)])
    return out


@pytest.mark.parametrize(
    "method, rule",
    [("gradient", "plain"), ("gradient_x_input", "plain"), ("guided_backprop", "guided"), ("deconvnet", "deconv")],
)
def test_the_gradient_family_and_guided_maps_equal_the_hand_built_twin(kind, method, rule):
    name, model, x, twin, values_of = kind
    values = values_of(x)
    np.testing.assert_allclose(
        np.asarray(model(x)), twin(x, [tf.constant(v) for v in values], twin_activation("plain")), rtol=1e-5, atol=1e-6
    )  # the twin is the model
    expected = twin_gradients(twin, x, values, rule)
    if rule != "plain":
        plain = twin_gradients(twin, x, values, "plain")
        assert any(np.abs(e - p).max() > 1e-4 for k in range(2) for e, p in zip(expected[k], plain[k])), "rule matters"
    got = per_input(sk.explain(model, x, method, targets=TARGETS).attributions)
    assert len(got) == len(values)
    for i, (attributions, value) in enumerate(zip(got, values)):
        for k in range(2):
            want = expected[k][i] * (value if method == "gradient_x_input" else 1)
            assert (np.abs(want).reshape(B, -1).max(axis=1) > 0).sum() >= B - 1, "maps alive"
            np.testing.assert_allclose(attributions[:, k], want, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("method", input_methods())
def test_every_method_is_batch_and_batch_size_invariant_or_refused(kind, method):
    name, model, x, _, _ = kind
    options = small_options(method, (1,))
    if method == "expected_gradients":
        references = {
            "image_meta": lambda: [RNG.normal(size=(2, *a.shape[1:])).astype("float32") for a in x],
            "siamese": lambda: [RNG.normal(size=(2, *a.shape[1:])).astype("float32") for a in x],
            "text": lambda: {"token_ids": RNG.integers(0, VOCAB, (2, T)).astype("int32")},
        }
        options["baselines"] = references.get(name, lambda: RNG.normal(size=(2, *x.shape[1:])).astype("float32"))()
    if method == "occlusion":
        options = {}
    if method in REFUSED.get(name, ()):
        with pytest.raises(ValueError, match="received shape"):
            sk.explain(model, x, method, targets=TARGETS, **options)
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # CAM methods say they leave the metadata out
        whole = per_input(sk.explain(model, x, method, targets=TARGETS, batch_size=64, **options).attributions)
        small = per_input(sk.explain(model, x, method, targets=TARGETS, batch_size=1, **options).attributions)
        alone = per_input(
            sk.explain(model, rows(x, 1), method, targets=TARGETS[1:2], input_keys=[1], **options).attributions
        )
    explained = {i: a for i, a in enumerate(whole) if a is not None}
    assert explained and all(np.isfinite(a).all() for a in explained.values())
    for i, a in explained.items():  # each input's own maps, not the batch's across inputs
        alive = np.abs(a).reshape(len(a), -1).max(axis=1) > 0
        assert alive.sum() >= B - 1, f"{method}: the maps of input {i} are zero for rows {np.flatnonzero(~alive)}"
    for got, one_by_one, row in zip(whole, small, alone):
        if got is None:
            continue
        _same_maps(method, one_by_one, got)
        _same_maps(method, row[0], got[1])


def _same_maps(method, got, want):
    """Equal to float32 rounding. Guided IG moves, at each step, the features whose gradient is
    smallest: where two sit at the step's quantile, the rounding of a batch of 1 against a batch of 4
    (BLAS takes other kernels; seen on an AMD EPYC) can swap them, moving those elements by a step's
    share; a map mixed across rows would differ almost everywhere. So there, at most 1% may differ."""
    if method != "guided_ig":
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-5)
        return
    close = np.isclose(got, want, rtol=1e-5, atol=2e-5)
    assert close.mean() >= 0.99, f"{(~close).sum()} of {close.size} elements differ"
