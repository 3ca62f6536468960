"""Models with several inputs: an image with tabular metadata, a siamese pair sharing its weights,
a subclassed two-input model, two input branches merged by Concatenate or Add. Every explained
input gets its own attributions, checked against gradients taken with tf.GradientTape on the
model itself, a guided twin built with tf.custom_gradient, integrated gradients and expected
gradients computed by hand over the joint path (the draws reproduced from their documented keys),
occlusion by hand with each input's own fill value, and LRP-ε and DeepLIFT's Rescale rule written
in NumPy; results do not depend on the batch or on batch_size."""

import os
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras
import numpy as np
import pytest
import tensorflow as tf
from method_support import ForwardCounter, small_options, uniform_draws

import saliency_kit as sk

RNG = np.random.default_rng(5)


def image_and_metadata(activation="relu", name="image_meta"):
    image = keras.Input((8, 8, 3), name="image")
    meta = keras.Input((5,), name="meta")
    h = keras.layers.Conv2D(4, 3, activation=activation, name="conv")(image)
    h = keras.layers.GlobalAveragePooling2D(name="pool")(h)
    m = keras.layers.Dense(4, activation=activation, name="meta_dense")(meta)
    z = keras.layers.Concatenate(name="merge")([h, m])
    return keras.Model([image, meta], keras.layers.Dense(3, name="head")(z), name=name)


def siamese():
    branch = keras.Sequential(
        [keras.Input((6, 6, 2)), keras.layers.Conv2D(3, 3, activation="relu"), keras.layers.Flatten()], name="branch"
    )
    a, b = keras.Input((6, 6, 2), name="left"), keras.Input((6, 6, 2), name="right")
    d = keras.layers.Subtract(name="difference")([branch(a), branch(b)])
    return keras.Model([a, b], keras.layers.Dense(2, name="head")(d), name="siamese")


class TwoInputs(keras.Model):
    def __init__(self):
        super().__init__(name="two_inputs_subclassed")
        self.a = keras.layers.Dense(4, activation="relu")
        self.b = keras.layers.Dense(4, activation="relu")
        self.out = keras.layers.Dense(3)

    def call(self, inputs):
        left, right = inputs
        return self.out(self.a(left) * self.b(right))


@pytest.fixture(scope="module")
def models():
    keras.utils.set_random_seed(0)  # the same weights whichever tests ran before
    sub = TwoInputs()
    sub([np.zeros((1, 4), "float32"), np.zeros((1, 6), "float32")])
    return {"image_meta": image_and_metadata(), "siamese": siamese(), "subclassed": sub}


def inputs_of(model, batch=3):
    inputs = getattr(model, "inputs", None)
    shapes = [tuple(t.shape[1:]) for t in inputs] if inputs else [(4,), (6,)]
    return [RNG.normal(size=(batch, *s)).astype("float32") for s in shapes]


def tape_gradients(model, x, classes):
    tensors = [tf.constant(a) for a in x]
    with tf.GradientTape() as tape:
        tape.watch(tensors)
        scores = tf.gather(model(tensors, training=False), classes, batch_dims=1)
    return [g.numpy() for g in tape.gradient(scores, tensors)]


@pytest.mark.parametrize("kind", ["image_meta", "siamese", "subclassed"])
def test_gradient_of_every_input_is_the_tape_gradient(models, kind):
    model = models[kind]
    x = inputs_of(model)
    classes = [0, 1, 0]
    e = sk.explain(model, x, "gradient", targets=classes)
    assert isinstance(e.attributions, list) and len(e.attributions) == 2
    for got, want in zip(e.attributions, tape_gradients(model, x, classes)):
        np.testing.assert_allclose(got[:, 0], want, atol=1e-6)
    assert e.parts == dict.fromkeys([t for t in e.parts], "input") and len(e.parts) == 2


def test_dict_inputs_give_dict_attributions_keyed_by_name(models):
    model = models["image_meta"]
    image, meta = inputs_of(model)
    e = sk.explain(model, {"meta": meta, "image": image}, "gradient_x_input", targets=2)
    assert set(e.attributions) == {"image", "meta"}
    want = tape_gradients(model, [image, meta], [2, 2, 2])
    np.testing.assert_allclose(e.attributions["image"][:, 0], image * want[0], atol=1e-6)
    np.testing.assert_allclose(e.attributions["meta"][:, 0], meta * want[1], atol=1e-6)
    np.testing.assert_allclose(e.maps["image"], e.attributions["image"].sum(-1), atol=1e-6)
    assert e.maps["meta"].shape == (3, 1)


def test_attribute_to_one_input_holds_the_other(models):
    model = models["image_meta"]
    x = inputs_of(model)
    e = sk.explain(model, x, "gradient", targets=0, attribute_to="meta")
    assert e.attributions[0] is None and e.parts == {"meta": "input"}
    np.testing.assert_allclose(e.attributions[1][:, 0], tape_gradients(model, x, [0, 0, 0])[1], atol=1e-6)


def _guided_twin(model):
    @tf.custom_gradient
    def guided_relu(t):
        y = tf.nn.relu(t)
        return y, lambda dy: dy * tf.cast(t > 0, dy.dtype) * tf.cast(dy > 0, dy.dtype)

    twin = image_and_metadata(activation=guided_relu, name="guided_twin")
    twin.set_weights(model.get_weights())
    return twin


def test_guided_backprop_through_a_merge_matches_a_custom_gradient_twin(models):
    model = models["image_meta"]
    x = inputs_of(model)
    e = sk.explain(model, x, "guided_backprop", targets=1)
    for got, want in zip(e.attributions, tape_gradients(_guided_twin(model), x, [1, 1, 1])):
        np.testing.assert_allclose(got[:, 0], want, atol=1e-6)
        assert np.any(got != 0)


def test_integrated_gradients_moves_every_input_on_one_path(models):
    """Per-input baselines in the inputs' structure; the path, the attributions and the
    completeness gap are over both inputs together, as a hand-written trapezoid IG gives them."""
    model = models["image_meta"]
    x = inputs_of(model)
    baselines = [np.full((8, 8, 3), 0.25, "float32"), np.linspace(-1, 1, 5).astype("float32")]
    steps = 16
    e = sk.explain(model, x, "integrated_gradients", targets=0, steps=steps, baseline=baselines)
    alphas = np.linspace(0, 1, steps)
    weights = np.full(steps, 1 / (steps - 1))
    weights[[0, -1]] /= 2
    total = [np.zeros_like(a) for a in x]
    for alpha, w in zip(alphas, weights):
        point = [b + alpha * (a - b) for a, b in zip(x, baselines)]
        for t, g in zip(total, tape_gradients(model, point, [0, 0, 0])):
            t += w * g
    for got, a, b, t in zip(e.attributions, x, baselines, total):
        np.testing.assert_allclose(got[:, 0], (a - b) * t, atol=1e-5)
    s_x = model([tf.constant(a) for a in x]).numpy()[:, 0]
    s_b = model([tf.constant(np.broadcast_to(b, a.shape)) for a, b in zip(x, baselines)]).numpy()[:, 0]
    summed = sum(a.reshape(3, -1).sum(1) for a in (got[:, 0] for got in e.attributions))
    np.testing.assert_allclose(e.completeness_gap[:, 0], summed - (s_x - s_b), atol=1e-5)


def test_occlusion_of_the_metadata_is_the_score_drop_of_each_feature(models):
    model = models["image_meta"]
    x = inputs_of(model)
    e = sk.explain(model, x, "occlusion", targets=2)
    clean = model(x).numpy()[:, 2]
    for f in range(5):
        meta = x[1].copy()
        meta[:, f] = 0.0
        np.testing.assert_allclose(e.attributions[1][:, 0, f], clean - model([x[0], meta]).numpy()[:, 2], atol=1e-5)


@pytest.mark.parametrize("per_input", ["list", "dict"])
def test_occlusion_value_given_per_input_fills_each_inputs_windows_with_its_own(models, per_input):
    """The image's 1 × 1 windows (its default) take one value per channel, the metadata's
    features one value each; an input the dict leaves out takes the default 0."""
    model = models["image_meta"]
    x = inputs_of(model)
    fill_image, fill_meta = np.array([0.5, -1.0, 2.0], "float32"), np.linspace(-2, 2, 5).astype("float32")
    value = [fill_image, fill_meta] if per_input == "list" else {"meta": fill_meta}
    if per_input == "dict":
        fill_image = np.zeros(3, "float32")
    classes = [0, 1, 2]
    e = sk.explain(model, x, "occlusion", targets=classes, value=value)

    def scores(image, meta):
        return tf.gather(model([image, meta]), classes, batch_dims=1).numpy()

    clean = scores(*x)
    for h, w in np.ndindex(8, 8):
        image = x[0].copy()
        image[:, h, w, :] = fill_image
        drop = clean - scores(image, x[1])
        np.testing.assert_allclose(e.attributions[0][:, 0, h, w], np.repeat(drop[:, None], 3, 1), atol=1e-5)
    for f in range(5):
        meta = x[1].copy()
        meta[:, f] = fill_meta[f]
        np.testing.assert_allclose(e.attributions[1][:, 0, f], clean - scores(x[0], meta), atol=1e-5)


def test_expected_gradients_with_per_input_baselines_draws_one_reference_row_for_both(models):
    """Baselines given per input ``[N, ...]`` each: draw s of row b takes the same reference row
    ⌊u₀ · N⌋ of both inputs and one α = u₁ on the joint path (the uniform generator keyed by
    (seed, −1 − (b · samples + s)))."""
    model = models["image_meta"]
    x = inputs_of(model)
    rng = np.random.default_rng(1)
    references = [rng.normal(size=(4, 8, 8, 3)).astype("float32"), rng.normal(size=(4, 5)).astype("float32")]
    classes, samples, seed = [2, 0, 1], 6, 2
    e = sk.explain(model, x, "expected_gradients", targets=classes, samples=samples, seed=seed, baselines=references)
    for b, cls in enumerate(classes):
        u = uniform_draws(seed, b, samples, range(samples), [2], "float64")
        which, alpha = np.minimum(np.floor(u[:, 0] * 4).astype(int), 3), u[:, 1].astype("float32")
        deltas = [a[b] - r[which] for a, r in zip(x, references)]
        points = [r[which] + alpha.reshape(-1, *[1] * (r.ndim - 1)) * d for r, d in zip(references, deltas)]
        for j, g in enumerate(tape_gradients(model, points, [cls] * samples)):
            np.testing.assert_allclose(e.attributions[j][b, 0], (deltas[j] * g).mean(axis=0), rtol=1e-5, atol=1e-7)


def test_cam_maps_only_the_input_its_layer_is_on_the_path_of(models):
    model = models["image_meta"]
    with pytest.warns(RuntimeWarning, match="does not explain input 'meta'"):
        e = sk.explain(model, inputs_of(model), "gradcam", targets=0)
    assert e.attributions[0].shape == (3, 1, 8, 8) and e.attributions[1] is None and e.layer == "conv"
    a, b = keras.Input((6, 6, 1), name="a"), keras.Input((6, 6, 1), name="b")
    ha = keras.layers.Conv2D(2, 3, name="conv_a")(a)
    hb = keras.layers.Conv2D(2, 3, name="conv_b")(b)
    z = keras.layers.Concatenate()([keras.layers.Flatten()(ha), keras.layers.Flatten()(hb)])
    pair = keras.Model([a, b], keras.layers.Dense(2)(z))
    x = [RNG.normal(size=(2, 6, 6, 1)).astype("float32") for _ in range(2)]
    with pytest.raises(ValueError, match="no path from input 'b'"):
        sk.explain(pair, x, "gradcam", targets=0, layer="conv_a", attribute_to="b")
    with pytest.warns(RuntimeWarning, match="does not explain input 'b'"):
        only_a = sk.explain(pair, x, "gradcam", targets=0, layer="conv_a")
    assert only_a.attributions[1] is None and only_a.attributions[0].shape == (2, 1, 6, 6)


def test_an_input_the_score_ignores_gets_zeros_and_a_warning():
    image = keras.Input((4,), name="used")
    ignored = keras.Input((3,), name="ignored")
    dead = keras.layers.Lambda(lambda t: 0.0 * t)(ignored)
    z = keras.layers.Concatenate()([image, dead])
    model = keras.Model([image, ignored], keras.layers.Dense(2)(z))
    x = [RNG.normal(size=(2, 4)).astype("float32"), RNG.normal(size=(2, 3)).astype("float32")]
    with pytest.warns(RuntimeWarning, match="'ignored' is zero"):
        e = sk.explain(model, x, "gradient", targets=0)
    assert not np.any(e.attributions[1]) and np.any(e.attributions[0])


METHODS = [
    "gradient",
    "gradient_x_input",
    "guided_backprop",
    "deconvnet",
    "integrated_gradients",
    "smoothgrad",
    "vargrad",
    "expected_gradients",
    "deeplift",
    "lrp",
    "guided_ig",
    "occlusion",
    "gradcam",
    "layercam",
]


@pytest.mark.parametrize("method", METHODS)
def test_batch_and_batch_size_invariance(models, method):
    model = models["image_meta"]
    x = inputs_of(model, batch=3)
    options = small_options(method, (1,))
    if method == "expected_gradients":
        options["baselines"] = [RNG.normal(size=(2, 8, 8, 3)).astype("float32"), RNG.normal(size=(2, 5))]
    if method == "occlusion":
        options = {}
    weights = [w.copy() for w in model.get_weights()]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        whole = sk.explain(model, x, method, targets=[0, 1, 2], batch_size=64, **options)
        small = sk.explain(model, x, method, targets=[0, 1, 2], batch_size=1, **options)
        alone = [
            sk.explain(model, [a[i : i + 1] for a in x], method, targets=[[0], [1], [2]][i], input_keys=[i], **options)
            for i in range(3)
        ]
    for j, got in enumerate(whole.attributions):
        if got is None:
            continue
        np.testing.assert_allclose(small.attributions[j], got, atol=2e-5)
        np.testing.assert_allclose(np.concatenate([e.attributions[j] for e in alone]), got, atol=2e-5)
    for before, after in zip(weights, model.get_weights()):
        np.testing.assert_array_equal(before, after)


def test_smoothgrad_noise_scales_with_each_inputs_own_range(models):
    """VarGrad of a linear score is the variance of a constant gradient: zero; SmoothGrad of
    gradient × input with noise scaled per input: each input's spread is its own."""
    model = models["image_meta"]
    image, meta = inputs_of(model)
    meta = meta * 1000.0  # a range a thousand times the image's
    e = sk.explain(model, [image, meta], "smoothgrad", targets=0, base="gradient_x_input", samples=4, seed=0, noise=0.1)
    plain = sk.explain(model, [image, meta], "gradient_x_input", targets=0)
    # noise of 10% of the image's range moves its products by about that much, not by 100 × meta's range
    assert np.abs(e.attributions[0] - plain.attributions[0]).max() < 10 * np.abs(plain.attributions[0]).max()


@pytest.mark.parametrize("noise", [{"meta": 0.0}, [0.2, 0.0]])
def test_smoothgrad_noise_given_per_input(models, noise):
    """The metadata branch meets the image's only at a linear head, so with no noise on the
    metadata its SmoothGrad is its plain gradient exactly, while the image's is smoothed."""
    model = models["image_meta"]
    x = inputs_of(model)
    e = sk.explain(model, x, "smoothgrad", targets=[0, 1, 2], samples=6, seed=3, noise=noise)
    plain = sk.explain(model, x, "gradient", targets=[0, 1, 2])
    np.testing.assert_allclose(e.attributions[1], plain.attributions[1], rtol=1e-6, atol=1e-7)
    assert np.abs(e.attributions[0] - plain.attributions[0]).max() > 1e-4
    assert e.options["noise"] == noise


def test_smoothgrad_noise_as_an_array_is_a_fraction_per_element():
    """Noise zero on every element but one: the gradient changes only through that element."""
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="relu"), keras.layers.Dense(2)])
    x = RNG.normal(size=(2, 4)).astype("float32")
    zero = sk.explain(model, x, "smoothgrad", targets=0, samples=5, seed=1, noise=np.zeros(4))
    np.testing.assert_allclose(zero.attributions, sk.explain(model, x, "gradient", targets=0).attributions, rtol=1e-6)
    with pytest.raises(ValueError, match="broadcastable to one row of what is explained"):
        sk.explain(model, x, "smoothgrad", targets=0, samples=2, noise=np.zeros(3))
    with pytest.raises(ValueError, match="non-negative"):
        sk.explain(model, x, "smoothgrad", targets=0, samples=2, noise=np.full(4, -0.1))


@pytest.mark.parametrize(
    "inputs, match",
    [
        (lambda x: {"image": x[0]}, "missing \\['meta'\\]"),
        (lambda x: {"image": x[0], "meta": x[1], "other": x[1]}, "unknown \\['other'\\]"),
        (lambda x: [x[0]], "one array per model input \\(2"),
        (lambda x: [x[0], x[1][:, :3]], "input 'meta' must have shape \\[B, 5\\]"),
        (lambda x: [x[0], x[1][:2]], "same number of rows"),
        (lambda x: x[0], "give inputs as a list, tuple or dict"),
    ],
)
def test_malformed_inputs_are_refused_with_what_was_expected(models, inputs, match):
    model = models["image_meta"]
    with pytest.raises(ValueError, match=match):
        sk.explain(model, inputs(inputs_of(model)), "gradient")


def test_attribute_to_a_shared_layer_or_an_unknown_name_is_refused(models):
    model = models["siamese"]
    with pytest.raises(ValueError, match="called 2 times"):
        sk.explain(model, inputs_of(model), "gradient", attribute_to="branch")
    with pytest.raises(ValueError, match="no_such_layer"):
        sk.explain(model, inputs_of(model), "gradient", attribute_to="no_such_layer")
    with pytest.raises(ValueError, match="attribute_to=LAYER takes"):
        sk.explain(model, inputs_of(model), "occlusion", attribute_to="difference")


def test_smoothgrad_without_scores_runs_the_model_once(models):
    """SmoothGrad never evaluates the clean inputs; ``with_scores=False`` skips the pass that
    would, and leaves the attributions of every input as they were."""
    image, meta = keras.Input((8, 8, 3), name="image"), keras.Input((5,), name="meta")
    counter = ForwardCounter(name="counter")
    model = keras.Model([image, meta], models["image_meta"]([counter(image), meta]))
    x = inputs_of(model)
    runs = []
    for with_scores in (True, False):
        before = int(counter.runs.numpy())
        e = sk.explain(model, x, "smoothgrad", [0, 1, 2], samples=4, seed=1, batch_size=64, with_scores=with_scores)
        runs.append((int(counter.runs.numpy()) - before, e))
    (scored_runs, scored), (bare_runs, bare) = runs
    assert (scored_runs, bare_runs) == (2, 1)
    assert bare.scores is None
    np.testing.assert_allclose(scored.scores[:, 0], tf.gather(model(x), [0, 1, 2], batch_dims=1).numpy(), atol=1e-5)
    for got, want in zip(bare.attributions, scored.attributions):
        np.testing.assert_array_equal(got, want)


# ------------------------------------------------------------------ two branches merged: LRP, DeepLIFT
def two_branches(merge: str, bias: bool, seed: int) -> keras.Model:
    """left [3] → a = relu(Dense 4), right [4] → b = relu(Dense 4 for Add, 3 for Concatenate),
    merged, → h = relu(Dense 5) → o = Dense 3; weights N(0, 1), biases N(0, 0.3²) or none."""
    rng = np.random.default_rng(seed)
    left, right = keras.Input((3,), name="left"), keras.Input((4,), name="right")
    a = keras.layers.Dense(4, activation="relu", use_bias=bias, name="a")(left)
    b = keras.layers.Dense(4 if merge == "add" else 3, activation="relu", use_bias=bias, name="b")(right)
    m = (keras.layers.Add() if merge == "add" else keras.layers.Concatenate())([a, b])
    h = keras.layers.Dense(5, activation="relu", use_bias=bias, name="h")(m)
    model = keras.Model([left, right], keras.layers.Dense(3, use_bias=bias, name="o")(h))
    for name in "abho":
        layer = model.get_layer(name)
        layer.kernel.assign(rng.normal(size=layer.kernel.shape))
        if bias:
            layer.bias.assign(rng.normal(size=layer.bias.shape) * 0.3)
    return model


def _weights(model):
    out = {}
    for name in "abho":
        layer = model.get_layer(name)
        bias = layer.bias.numpy().astype(np.float64) if layer.use_bias else 0.0
        out[name] = (layer.kernel.numpy().astype(np.float64), bias)
    return out


def _forward(P, merge, left, right):
    za, zb = left @ P["a"][0] + P["a"][1], right @ P["b"][0] + P["b"][1]
    a, b = np.maximum(za, 0), np.maximum(zb, 0)
    m = a + b if merge == "add" else np.concatenate([a, b])
    zh = m @ P["h"][0] + P["h"][1]
    return za, a, zb, b, m, zh, np.maximum(zh, 0) @ P["o"][0] + P["o"][1]


def numpy_lrp_epsilon_two_branches(model, merge, left, right, cls, eps):
    """LRP-ε of one row: each Dense by the ε-rule, ReLUs pass relevance unchanged, Concatenate
    splits it by position, Add in proportion to what each summand contributed."""
    P = _weights(model)

    def stab(z):
        return z + eps * np.where(z >= 0, 1.0, -1.0)

    za, a, zb, b, m, zh, zo = _forward(P, merge, left, right)
    Ro = np.where(np.arange(3) == cls, zo, 0.0)
    Rh = np.maximum(zh, 0) * (P["o"][0] @ (Ro / stab(zo)))
    Rm = m * (P["h"][0] @ (Rh / stab(zh)))
    if merge == "add":
        share = np.divide(Rm, m, out=np.zeros_like(m), where=m != 0)
        Ra, Rb = a * share, b * share
    else:
        Ra, Rb = Rm[: len(a)], Rm[len(a) :]
    return left * (P["a"][0] @ (Ra / stab(za))), right * (P["b"][0] @ (Rb / stab(zb)))


def numpy_deeplift_two_branches(model, merge, left, right, left0, right0, cls):
    """DeepLIFT Rescale of one row against its references: each ReLU's multiplier
    ``Δrelu(z) / Δz`` (its derivative where Δz ≈ 0), linear layers their weights, Concatenate
    splits by position, Add gives both summands the sum's multiplier. ``(left, right, Δs)``."""
    P = _weights(model)
    za, _, zb, _, _, zh, so = _forward(P, merge, left, right)
    za0, _, zb0, _, _, zh0, so0 = _forward(P, merge, left0, right0)

    def rescale(z, z0):
        d = z - z0
        near = np.abs(d) < 1e-7
        return np.where(near, (z > 0) * 1.0, (np.maximum(z, 0) - np.maximum(z0, 0)) / np.where(near, 1.0, d))

    mm = P["h"][0] @ (P["o"][0][:, cls] * rescale(zh, zh0))
    ma, mb = (mm, mm) if merge == "add" else (mm[: len(za)], mm[len(za) :])
    m_left = P["a"][0] @ (ma * rescale(za, za0))
    m_right = P["b"][0] @ (mb * rescale(zb, zb0))
    return (left - left0) * m_left, (right - right0) * m_right, so[cls] - so0[cls]


@pytest.mark.parametrize("merge", ["concatenate", "add"])
def test_lrp_epsilon_through_a_merge_of_two_inputs_matches_numpy_and_conserves(merge):
    """Without biases and with ε → 0 the two inputs' relevance sums to the logit; with biases and
    ε = 0.1 (relevance absorbed on the way) each input's matches NumPy all the same."""
    x = [RNG.normal(size=(4, 3)).astype("float32"), RNG.normal(size=(4, 4)).astype("float32")]
    classes = [0, 1, 2, 1]
    for bias, eps in ((False, 1e-6), (True, 0.1)):
        model = two_branches(merge, bias, seed=21)
        e = sk.explain(model, x, "lrp", targets=classes, composite="epsilon", epsilon=eps)
        for r, cls in enumerate(classes):
            want = numpy_lrp_epsilon_two_branches(model, merge, *(a[r].astype(np.float64) for a in x), cls, eps)
            for j in range(2):
                np.testing.assert_allclose(e.attributions[j][r, 0], want[j], rtol=1e-5, atol=1e-5)
        assert min(np.abs(a).max() for a in e.attributions) > 0.1  # both inputs carry relevance
        if not bias:
            logits = tf.gather(model(x), classes, batch_dims=1).numpy()
            total = e.attributions[0].sum(axis=-1) + e.attributions[1].sum(axis=-1)
            np.testing.assert_allclose(total[:, 0], logits, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("merge", ["concatenate", "add"])
def test_deeplift_through_a_merge_of_two_inputs_matches_numpy_rescale_and_sums_to_delta(merge):
    x = [RNG.normal(size=(4, 3)).astype("float32"), RNG.normal(size=(4, 4)).astype("float32")]
    baseline = [np.array([0.2, -0.3, 0.1], "float32"), np.array([0.5, 0.0, -0.4, 0.3], "float32")]
    classes = [0, 1, 2, 1]
    model = two_branches(merge, True, seed=22)
    e = sk.explain(model, x, "deeplift", targets=classes, baseline=baseline)
    for r, cls in enumerate(classes):
        rows = [a[r].astype(np.float64) for a in x] + [b.astype(np.float64) for b in baseline]
        left, right, change = numpy_deeplift_two_branches(model, merge, *rows, cls)
        np.testing.assert_allclose(e.attributions[0][r, 0], left, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(e.attributions[1][r, 0], right, rtol=1e-5, atol=1e-5)
        total = e.attributions[0][r, 0].sum() + e.attributions[1][r, 0].sum()
        np.testing.assert_allclose(total, change, rtol=1e-5, atol=1e-5)  # summation to delta over both inputs
        np.testing.assert_allclose(e.completeness_gap[r, 0], total - change, atol=1e-5)
