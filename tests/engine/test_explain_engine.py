"""One table of (method, options) gives every method the same shape, batching, invariance and
clean-up tests; then the engine's own promises: compiled once and reused, chunked, models
untouched, any input rank, zero maps with a warning, mixed precision."""

import gc
import weakref

import keras
import numpy as np
import pytest
import tensorflow as tf
from method_support import input_methods, small_options

import saliency_kit as sk
from saliency_kit import engine, methods

# Every registered method is in the table (derived from the registry, a method registered from
# outside included), with the shared small settings, plus variants.
VARIANTS = [
    ("integrated_gradients", {"steps": 5, "rule": "gausslegendre", "baseline": 0.5}),
    ("smoothgrad", {"samples": 5, "seed": 3, "base": "integrated_gradients", "steps": 3, "aggregate": "variance"}),
    ("smoothgrad", {"samples": 3, "seed": 4, "base": "guided_backprop", "aggregate": "square", "noise": 0.3}),
]
OUTSIDE = "outside_power"  # a method registered from outside the package, for this module's tests
CASES = [(name, small_options(name, (12, 12, 3))) for name in input_methods() + [OUTSIDE]] + VARIANTS
IDS = [f"{m}-{i}" for i, (m, _) in enumerate(CASES)]


def outside_power(ctx, power):
    return tf.abs(ctx.gradients(ctx.inputs)) ** power


@pytest.fixture(scope="module", autouse=True)
def outside_method():
    """The table covers a method registered from outside; it is unregistered afterwards, so other
    modules (and the command line's listing) see the registry as it was."""
    methods.register(OUTSIDE, summary="|∂s/∂x| to a power", options={"power": 2.0}, reduce="sum")(outside_power)
    yield
    methods.unregister(OUTSIDE)


def _classifier():
    """A backbone model (conv, BatchNorm, conv) nested in a classifier with Dropout and a softmax."""
    backbone_in = keras.Input((12, 12, 3))
    h = keras.layers.Conv2D(6, 3, activation="relu", name="first_conv")(backbone_in)
    h = keras.layers.BatchNormalization(name="bn")(h)
    h = keras.layers.Conv2D(8, 3, strides=2, activation="relu", name="last_conv")(h)
    backbone = keras.Model(backbone_in, h, name="backbone")
    inputs = keras.Input((12, 12, 3))
    z = keras.layers.GlobalAveragePooling2D()(backbone(inputs))
    z = keras.layers.Dropout(0.5)(z)
    model = keras.Model(inputs, keras.layers.Dense(4, activation="softmax", name="dense")(z))
    bn = backbone.get_layer("bn")
    rng = np.random.default_rng(1)
    bn.moving_mean.assign(rng.normal(size=6).astype("float32"))
    bn.moving_variance.assign(rng.uniform(0.5, 2, size=6).astype("float32"))
    return model


@pytest.fixture(scope="module")
def cnn():
    keras.utils.set_random_seed(31)
    model = _classifier()
    x = np.random.default_rng(0).uniform(-1, 1, size=(3, 12, 12, 3)).astype("float32")
    return model, x


def test_every_method_is_in_the_table_and_described():
    assert {m for m, _ in CASES} == set(input_methods()) and len(methods.names()) >= 10
    assert OUTSIDE in methods.names()
    described = dict(methods.describe())
    assert set(described) == set(methods.names()) and all(isinstance(s, str) and s for s in described.values())


@pytest.mark.parametrize("method, options", CASES, ids=IDS)
def test_shapes_and_fields(cnn, method, options):
    model, x = cnn
    expl = sk.explain(model, x, method, "top2", **options)
    cam = methods.get(method).cam
    assert expl.attributions.shape == ((3, 2, 12, 12) if cam else (3, 2, 12, 12, 3))
    assert expl.maps.shape == (3, 2, 12, 12)
    assert expl.attributions.dtype == expl.maps.dtype == expl.scores.dtype == np.float32
    assert expl.targets.shape == (3, 2) and np.issubdtype(expl.targets.dtype, np.integer)
    assert expl.method == method and set(options) <= set(expl.options)
    assert (expl.layer == "backbone/last_conv") == ("layer" in methods.get(method).defaults)
    assert (expl.completeness_gap is not None) == (method in ("integrated_gradients", "deeplift"))
    np.testing.assert_allclose(expl.scores, engine.forward_scores(model, x, expl.targets), atol=1e-5)
    assert np.all(np.isfinite(expl.attributions)) and np.any(expl.attributions != 0)


@pytest.mark.parametrize("method, options", CASES, ids=IDS)
def test_batch_and_batch_size_invariance(cnn, method, options):
    model, x = cnn
    targets = [[0, 3], [1, 2], [3, 1]]
    reference = sk.explain(model, x, method, targets, batch_size=64, **options)
    chunked = sk.explain(model, x, method, targets, batch_size=3, **options)
    np.testing.assert_allclose(chunked.attributions, reference.attributions, rtol=1e-4, atol=1e-5)
    # an input alone gives what it gave in the batch (seeded draws keyed by its own key)
    keyed = sk.explain(model, x, method, targets, batch_size=64, input_keys=[5, 6, 7], **options)
    alone = sk.explain(model, x[1:2], method, targets[1:2], batch_size=1, input_keys=[6], **options)
    np.testing.assert_allclose(alone.attributions, keyed.attributions[1:2], rtol=1e-4, atol=1e-5)
    # two targets give two different maps
    assert not np.allclose(reference.attributions[:, 0], reference.attributions[:, 1])


@pytest.mark.parametrize("method, options", CASES, ids=IDS)
def test_compiled_once_and_reused(cnn, method, options):
    model, x = cnn
    sk.explain(model, x, method, [0, 1, 2], **options)
    traces = engine.trace_count()
    other = np.random.default_rng(5).normal(size=x.shape).astype("float32")
    sk.explain(model, other, method, [2, 2, 1], **options)  # new data, same shapes: no tracing
    assert engine.trace_count() == traces


@pytest.mark.parametrize("method, options", CASES, ids=IDS)
def test_without_scores_the_same_attributions_and_no_pass_for_them(cnn, method, options):
    model, x = cnn
    targets = [[0, 3], [1, 2], [3, 1]]
    calls = engine.call_count()
    scored = sk.explain(model, x, method, targets, **options)
    with_scores = engine.call_count() - calls
    calls = engine.call_count()
    bare = sk.explain(model, x, method, targets, with_scores=False, **options)
    without = engine.call_count() - calls
    assert bare.scores is None and scored.scores.shape == (3, 2)
    np.testing.assert_array_equal(bare.attributions, scored.attributions)
    np.testing.assert_array_equal(bare.maps, scored.maps)
    # a kernel that meets the scores on its way gives them in its own call; the others needed one more
    assert without == with_scores - (0 if _scores_on_the_way(method, options) else 1)


def _scores_on_the_way(method, options):
    """Whether the method's kernel evaluates the target scores at the inputs themselves (vargrad
    does: its variance is summed about its base method's attributions at the inputs)."""
    base = options.get("base")
    noisy_or_pathed = ("smoothgrad", "squaregrad", "guided_ig", "blur_ig", "expected_gradients", "xrai")
    return method not in noisy_or_pathed + ("rise",) and base is None


def test_with_scores_must_be_a_flag(cnn):
    model, x = cnn
    with pytest.raises(TypeError, match="with_scores must be True or False; received 'no'"):
        sk.explain(model, x, "gradient", 0, with_scores="no")


def test_no_retracing_for_a_new_batch_size_of_the_same_chunking(cnn):
    model, x = cnn
    big = np.concatenate([x, x, x])  # 9 inputs
    sk.explain(model, big[:5], "gradient", 0, batch_size=4)  # chunks of 4, the last one padded
    traces, calls = engine.trace_count(), engine.call_count()
    sk.explain(model, big[:7], "gradient", 0, batch_size=4)
    sk.explain(model, big[:8], "gradient", 0, batch_size=4)
    assert engine.trace_count() == traces
    assert engine.call_count() - calls == 4  # 2 chunks each; top-K would add forward calls


def test_work_is_chunked_within_batch_size(cnn):
    model, x = cnn
    # 3 inputs × 2 classes × 8 steps = 48 rows at most 16 per call: 16 rows = 1 input × 2 × 8
    calls = engine.call_count()
    trapezoid = sk.explain(model, x, "integrated_gradients", [[0, 1]] * 3, steps=8, batch_size=16)
    assert engine.call_count() - calls == 3  # the path's ends give s(x) and s(x′) for free
    calls = engine.call_count()
    middle = sk.explain(model, x, "integrated_gradients", [[0, 1]] * 3, steps=8, batch_size=16, rule="riemann_middle")
    assert engine.call_count() - calls == 3  # s(x) and s(x′) are forward passes inside the same calls
    np.testing.assert_allclose(trapezoid.scores, middle.scores, atol=1e-5)
    np.testing.assert_allclose(
        trapezoid.scores - trapezoid.attributions.reshape(3, 2, -1).sum(-1) + trapezoid.completeness_gap,
        middle.scores - middle.attributions.reshape(3, 2, -1).sum(-1) + middle.completeness_gap,
        atol=1e-4,
    )  # both give the same s(x′)


def test_seeded_smoothgrad(cnn):
    model, x = cnn
    a = sk.explain(model, x, "smoothgrad", 0, samples=7, seed=5, batch_size=4).attributions
    b = sk.explain(model, x, "smoothgrad", 0, samples=7, seed=5, batch_size=20).attributions
    c = sk.explain(model, x, "smoothgrad", 0, samples=7, seed=6).attributions
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    assert not np.allclose(a, c)
    drawn = sk.explain(model, x, "smoothgrad", 0, samples=3)
    again = sk.explain(model, x, "smoothgrad", 0, samples=3, seed=drawn.options["seed"])
    np.testing.assert_allclose(drawn.attributions, again.attributions, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize(
    "name, options",
    [
        ("smoothgrad", {"samples": 5, "seed": 2}),
        ("vargrad", {"samples": 3, "seed": 2, "base": "integrated_gradients", "steps": 3}),
        (
            "expected_gradients",
            {
                "samples": 3,
                "seed": 2,
                "baselines": np.random.default_rng(3).uniform(-1, 1, (4, 12, 12, 3)).astype("float32"),
            },
        ),
    ],
)
def test_input_keys_key_the_noise_by_input_not_by_position(cnn, name, options):
    model, x = cnn  # three inputs
    keys = [11, 2**31 - 1, 0]
    together = sk.explain(model, x, name, 0, input_keys=keys, batch_size=8, **options).attributions
    # Reordered, alone, in another batch size: each input keeps its own noise.
    order = [2, 0, 1]
    reordered = sk.explain(model, x[order], name, 0, input_keys=[keys[i] for i in order], batch_size=3, **options)
    np.testing.assert_allclose(reordered.attributions, together[order], rtol=1e-5, atol=1e-7)
    alone = sk.explain(model, x[1:2], name, 0, input_keys=keys[1:2], **options).attributions
    np.testing.assert_allclose(alone[0], together[1], rtol=1e-5, atol=1e-7)
    # Without keys an input's noise follows its position; keys 0..B-1 are that default.
    default = sk.explain(model, x, name, 0, batch_size=8, **options).attributions
    positions = sk.explain(model, x, name, 0, input_keys=np.arange(3), batch_size=8, **options).attributions
    np.testing.assert_array_equal(default, positions)
    assert not np.allclose(default[0], together[0])  # another key, other noise
    shifted = sk.explain(model, x[1:], name, 0, batch_size=8, **options).attributions
    assert not np.allclose(shifted[0], default[1])


def test_bad_input_keys_are_refused_before_any_work(cnn):
    model, x = cnn
    calls = engine.call_count()
    with pytest.raises(ValueError, match=r"one int per input \(3\); received shape \(2,\)"):
        sk.explain(model, x, "smoothgrad", 0, input_keys=[1, 2], seed=1)
    with pytest.raises(ValueError, match=r"\[0, 2\*\*31\); received values from -1"):
        sk.explain(model, x, "smoothgrad", 0, input_keys=[-1, 2, 3], seed=1)
    with pytest.raises(ValueError, match=r"received values from 0 to 2147483648"):
        sk.explain(model, x, "smoothgrad", 0, input_keys=[0, 1, 2**31], seed=1)
    with pytest.raises(TypeError, match="sequence of ints.*received dtype float64"):
        sk.explain(model, x, "smoothgrad", 0, input_keys=[0.5, 1.0, 2.0], seed=1)
    with pytest.raises(TypeError, match="sequence of ints.*received 'abc'"):
        sk.explain(model, x, "smoothgrad", 0, input_keys="abc", seed=1)
    assert engine.call_count() == calls
    assert "input_keys" in methods.RESERVED_OPTION_NAMES  # explain's keyword: no method option may take it


def test_model_weights_and_batchnorm_statistics_are_untouched(cnn):
    model, x = cnn
    before = [w.copy() for w in model.get_weights()]  # includes BatchNorm moving statistics
    for method, options in CASES:
        sk.explain(model, x, method, "top1", **options)
    sk.jacobian(model, x, rule="guided")
    for a, b in zip(before, model.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_dropout_is_inactive(cnn):
    model, x = cnn
    first = sk.explain(model, x, "gradient", 1).attributions
    second = sk.explain(model, x, "gradient", 1).attributions
    np.testing.assert_array_equal(first, second)
    dense = model.get_layer("dense")
    xt = tf.constant(x)
    with tf.GradientTape() as tape:  # independent reference, training=False
        tape.watch(xt)
        features = keras.Model(model.inputs, dense.input)(xt, training=False)
        logit = tf.reduce_sum((tf.matmul(features, dense.kernel) + dense.bias)[:, 1])
    np.testing.assert_allclose(first[:, 0], tape.gradient(logit, xt).numpy(), atol=1e-6)


def test_gradcam_finds_and_names_a_layer_inside_a_nested_backbone(cnn):
    model, x = cnn
    default = sk.explain(model, x, "gradcam", [[0, 2]] * 3)
    assert default.layer == "backbone/last_conv"
    for name in ("last_conv", "backbone/last_conv"):
        np.testing.assert_allclose(sk.explain(model, x, "gradcam", [[0, 2]] * 3, layer=name).maps, default.maps)
    # by hand: the head is GAP → dense, so ∂z_k/∂A[i, j, c] = W[c, k] / (h w)
    backbone = model.get_layer("backbone")
    A = keras.Model(backbone.inputs[0], backbone.get_layer("last_conv").output)(x).numpy()  # [3, 4, 4, 8]
    W = model.get_layer("dense").kernel.numpy()
    for j, k in enumerate((0, 2)):
        cam = np.maximum((A * W[:, k] / 16.0).sum(-1), 0)
        expected = tf.image.resize(cam[..., None], (12, 12), method="bilinear").numpy()[..., 0]
        np.testing.assert_allclose(default.maps[:, j], expected, atol=1e-5)
    first = sk.explain(model, x, "gradcam", 0, layer="first_conv")
    assert first.layer == "backbone/first_conv" and not np.allclose(first.maps, default.maps[:, :1])
    with pytest.raises(ValueError, match="not in model.*backbone/last_conv"):
        sk.explain(model, x, "gradcam", 0, layer="conv9")
    with pytest.raises(ValueError, match="4-D"):
        sk.explain(model, x, "gradcam", 0, layer="dense")


def test_forward_scores(cnn):
    model, x = cnn
    dense = model.get_layer("dense")
    logits = keras.Model(model.inputs, dense.input)(x).numpy() @ dense.kernel.numpy() + dense.bias.numpy()
    targets = np.array([[0, 3], [1, 1], [2, 0]])
    np.testing.assert_allclose(
        engine.forward_scores(model, x, targets, batch_size=2), np.take_along_axis(logits, targets, 1), atol=1e-5
    )
    np.testing.assert_allclose(
        engine.forward_scores(model, x, targets, score="output"),
        np.take_along_axis(model.predict(x, verbose=0), targets, 1),
        atol=1e-6,
    )
    with pytest.raises(ValueError, match=r"\[0, 3\]"):
        engine.forward_scores(model, x, targets + 1)


def test_cam_methods_need_images():
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(2)])
    with pytest.raises(ValueError, match=r"image inputs \[B, H, W, C\]"):
        sk.explain(model, np.zeros((2, 6), "float32"), "gradcam", 0)


# -- other input ranks ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def lstm():
    keras.utils.set_random_seed(41)
    model = keras.Sequential(
        [keras.Input((9, 4)), keras.layers.LSTM(8), keras.layers.Dense(3, activation="softmax", name="dense")]
    )
    x = np.random.default_rng(2).normal(size=(3, 9, 4)).astype("float32")
    return model, x


def test_lstm_sequences(lstm):
    model, x = lstm
    expl = sk.explain(model, x, "gradient", [[0, 2]] * 3)
    assert expl.attributions.shape == (3, 2, 9, 4) and expl.maps.shape == (3, 2, 9)
    dense = model.get_layer("dense")
    features = keras.Model(model.inputs, dense.input)
    for j, k in enumerate((0, 2)):
        xt = tf.constant(x)
        with tf.GradientTape() as tape:
            tape.watch(xt)
            logit = tf.reduce_sum((tf.matmul(features(xt), dense.kernel) + dense.bias)[:, k])
        np.testing.assert_allclose(expl.attributions[:, j], tape.gradient(logit, xt).numpy(), atol=1e-5)
    ig = sk.explain(model, x, "integrated_gradients", [[0, 2]] * 3, steps=64)
    change = ig.scores - engine.forward_scores(model, np.zeros_like(x), ig.targets)
    assert np.all(np.abs(ig.completeness_gap) <= 0.02 * np.abs(change) + 1e-4)
    occlusion = sk.explain(model, x, "occlusion", 0)
    assert occlusion.attributions.shape == (3, 1, 9, 4)


def test_tabular_inputs():
    keras.utils.set_random_seed(43)
    model = keras.Sequential(
        [keras.Input((7,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(3, activation="sigmoid")]
    )
    x = np.random.default_rng(3).normal(size=(4, 7)).astype("float32")
    for method, options in CASES:
        if methods.get(method).cam or method in ("guided_gradcam", "blur_ig"):  # blur_ig blurs spatial axes
            continue
        if method == "expected_gradients":
            options = {**options, "baselines": np.zeros((2, 7), "float32")}
        expl = sk.explain(model, x, method, "top2", **options)
        assert expl.attributions.shape == (4, 2, 7) and expl.maps.shape == (4, 2)


# -- zero maps, mixed precision, clean-up ---------------------------------------------------------
class StopGradient(keras.layers.Layer):
    def call(self, x):
        return tf.stop_gradient(x)


@pytest.mark.parametrize("method", ["gradient", "integrated_gradients", "smoothgrad"])
def test_a_score_that_ignores_the_input_gives_zeros_and_a_warning(method):
    inputs = keras.Input((5,))
    model = keras.Model(inputs, keras.layers.Dense(2)(StopGradient()(inputs)))
    x = np.ones((2, 5), "float32")
    with pytest.warns(RuntimeWarning, match="all zero"):
        expl = sk.explain(model, x, method, 0, **({"samples": 2} if method == "smoothgrad" else {}))
    assert expl.attributions.shape == (2, 1, 5) and not np.any(expl.attributions)


def test_mixed_precision():
    keras.utils.set_random_seed(47)
    full = _classifier()
    keras.mixed_precision.set_dtype_policy("mixed_float16")
    try:
        half = _classifier()
    finally:
        keras.mixed_precision.set_dtype_policy("float32")
    half.set_weights(full.get_weights())
    x = np.random.default_rng(4).uniform(-1, 1, size=(2, 12, 12, 3)).astype("float32")
    for method in ("gradient", "integrated_gradients", "gradcam", "deeplift"):
        a = (
            sk.explain(full, x, method, [0, 1], steps=4)
            if method == "integrated_gradients"
            else sk.explain(full, x, method, [0, 1])
        )
        b = (
            sk.explain(half, x, method, [0, 1], steps=4)
            if method == "integrated_gradients"
            else sk.explain(half, x, method, [0, 1])
        )
        assert b.attributions.dtype == np.float32 and np.all(np.isfinite(b.attributions))
        scale = np.abs(a.attributions).max()
        np.testing.assert_allclose(b.attributions, a.attributions, atol=0.02 * scale)


def test_the_cache_does_not_keep_models_alive():
    model = keras.Sequential(
        [keras.Input((3,)), keras.layers.Dense(2, activation="relu"), keras.layers.Dense(2, activation="softmax")]
    )
    sk.explain(model, np.ones((1, 3), "float32"), "guided_backprop", 0)
    sk.explain(model, np.ones((1, 3), "float32"), "integrated_gradients", 0, steps=3)
    ref = weakref.ref(model)
    del model
    gc.collect()
    assert ref() is None


@pytest.mark.parametrize(
    "method, options, message",
    [
        ("integrated_gradients", {"steps": 0}, "steps"),
        ("integrated_gradients", {"rule": "simpson"}, "rule"),
        ("integrated_gradients", {"steps": 1}, "steps >= 2"),
        ("smoothgrad", {"samples": -1}, "samples"),
        ("smoothgrad", {"noise": -0.1}, "noise"),
        ("smoothgrad", {"aggregate": "max"}, "aggregate"),
        ("smoothgrad", {"base": "gradcam"}, "base"),
        ("smoothgrad", {"steps": 4}, "no option 'steps'"),
        ("guided_gradcam", {"layer": "dense"}, "4-D"),
        ("occlusion", {"window": (20, 2)}, "does not fit"),
        ("occlusion", {"window": (2, 2, 2, 2)}, "tuple of 2"),
        ("occlusion", {"value": np.zeros(5)}, "broadcastable"),
    ],
)
def test_bad_options_raise_before_any_work(cnn, method, options, message):
    model, x = cnn
    calls = engine.call_count()
    with pytest.raises(ValueError, match=message):
        sk.explain(model, x, method, "top1", **options)
    assert engine.call_count() == calls


@pytest.mark.parametrize(
    "method, options, message",
    [
        ("smoothgrad", {"seed": 1.5}, "'seed' must be int or None; received 1.5"),
        ("gradcam", {"layer": 3}, "'layer' must be str or a keras layer or None; received 3"),
        ("gradcam", {"relu": "no"}, "'relu' must be bool; received 'no'"),
        ("integrated_gradients", {"steps": 2.5}, "'steps' must be int; received 2.5"),
    ],
)
def test_options_of_the_wrong_type_are_type_errors_before_any_work(cnn, method, options, message):
    model, x = cnn
    calls = engine.call_count()
    with pytest.raises(TypeError, match=message):
        sk.explain(model, x, method, "top1", **options)
    assert engine.call_count() == calls


_compiled_softmax = tf.function(tf.nn.softmax, autograph=False)


class _SoftmaxNet(keras.Model):
    """A subclassed classifier whose softmax runs in a separately compiled tf.function: its
    logits are out of reach."""

    def __init__(self):
        super().__init__(name="softmax_net")
        self.hidden = keras.layers.Dense(6, activation="tanh", name="hidden")
        self.head = keras.layers.Dense(3, name="head")

    def call(self, x):
        return _compiled_softmax(self.head(self.hidden(x)))


def test_what_was_differentiated_is_recorded_with_the_explanation():
    keras.utils.set_random_seed(4)
    net = _SoftmaxNet()
    x = np.random.default_rng(1).normal(size=(2, 5)).astype("float32")
    net(x)
    with pytest.warns(UserWarning, match="cannot be reached"):
        expl = sk.explain(net, x, "gradient", 1)
    assert expl.options["score"] == "output"
    np.testing.assert_allclose(expl.scores[:, 0], np.asarray(net(x))[:, 1], rtol=1e-5)
    # and the gradients are indeed of the probabilities (a tape on the model's own output)
    z = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(z)
        probability = net(z)[:, 1]
    np.testing.assert_allclose(expl.attributions[:, 0], tape.gradient(probability, z).numpy(), rtol=1e-5, atol=1e-7)
    assert sk.explain(net, x, "gradient", 1, score="output").options["score"] == "output"

    # A functional model whose softmax can be looked behind records the logits.
    inputs = keras.Input((5,))
    functional = keras.Model(inputs, keras.layers.Dense(3, activation="softmax")(keras.layers.Dense(6)(inputs)))
    assert sk.explain(functional, x, "gradient", 1).options["score"] == "logits"
    assert sk.explain(functional, x, "smoothgrad", 1, samples=2, seed=0).options["score"] == "logits"
    assert sk.explain(functional, x, "gradient", 1, score="output").options["score"] == "output"
