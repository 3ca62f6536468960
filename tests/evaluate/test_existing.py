"""sk.evaluate and its similarity arithmetic (evaluate/similarity.py): hand-computed metrics, small
hand-built models, and the shipped model.

The shipped-model checks (their acceptance numbers) share module-scoped fixtures so the
images, masks and explanations are computed once.
"""

import numpy as np
import pytest

from saliency_kit.evaluate import similarity as metrics


# ------------------------------------------------------------------------------------------
# metrics against hand-computed values
# ------------------------------------------------------------------------------------------
def test_spearman_hand_computed():
    # rank differences d = (0, 1, -1, 0): rho = 1 - 6 * 2 / (4 * (16 - 1)) = 0.8
    assert metrics.spearman([1, 2, 3, 4], [10, 30, 20, 40]) == pytest.approx(0.8)
    assert metrics.spearman([[1, 2], [3, 4]], [[4, 3], [2, 1]]) == pytest.approx(-1.0)
    # ties get average ranks: a ranks (1.5, 1.5, 3), b ranks (1, 2, 3) -> Pearson of ranks
    ra, rb = np.array([1.5, 1.5, 3.0]), np.array([1.0, 2.0, 3.0])
    expected = np.corrcoef(ra, rb)[0, 1]
    assert metrics.spearman([0, 0, 5], [1, 2, 3]) == pytest.approx(expected)


def test_spearman_constant_maps_are_defined():
    assert metrics.spearman(np.zeros(5), np.zeros(5)) == 1.0
    assert metrics.spearman(np.zeros(5), np.arange(5)) == 0.0
    assert metrics.spearman(np.ones(5), np.zeros(5)) == 0.0
    with pytest.raises(ValueError, match="NaN"):
        metrics.spearman([0.0, np.nan], [1.0, 2.0])
    with pytest.raises(ValueError, match="same size"):
        metrics.spearman([0.0, 1.0], [1.0, 2.0, 3.0])


def test_normalize_abs_hand_computed():
    np.testing.assert_allclose(metrics.normalize_abs([0.0, -2.0, 4.0], percentile=100), [0, 0.5, 1])
    # 50th percentile of |m| = (0, 1, 2, 4) is 1.5: values above it clip to 1
    np.testing.assert_allclose(metrics.normalize_abs([0.0, 1.0, -2.0, 4.0], percentile=50), [0, 2 / 3, 1, 1])
    # mostly-zero map: percentile is 0, the maximum is used instead
    np.testing.assert_allclose(metrics.normalize_abs([0.0] * 99 + [-3.0]), [0.0] * 99 + [1.0])
    assert not metrics.normalize_abs(np.zeros((3, 3))).any()


def _ssim_one_window(x, y):
    """SSIM formula (Wang et al. 2004) over one window with sample covariance, data range 1."""
    c1, c2 = 0.01**2, 0.03**2
    mx, my = x.mean(), y.mean()
    vx, vy = x.var(ddof=1), y.var(ddof=1)
    cxy = ((x - mx) * (y - my)).sum() / (x.size - 1)
    return ((2 * mx * my + c1) * (2 * cxy + c2)) / ((mx**2 + my**2 + c1) * (vx + vy + c2))


def test_ssim_hand_computed_on_one_window():
    rng = np.random.default_rng(0)
    a, b = rng.random((7, 7)), rng.random((7, 7))
    # on a 7x7 map the 7x7 window fits once: SSIM is the formula on the normalised maps
    expected = _ssim_one_window(metrics.normalize_abs(a), metrics.normalize_abs(b))
    assert metrics.ssim(a, b) == pytest.approx(expected, rel=1e-6)
    assert metrics.ssim(a, 3 * a) == pytest.approx(1.0)  # invariant to the map's scale
    assert metrics.ssim(a, -a) == pytest.approx(1.0)  # compares magnitudes
    assert np.isnan(metrics.ssim(np.ones((2, 9)), np.ones((2, 9))))  # too small for a window


def test_trapezoid_auc_and_dilate():
    assert metrics.trapezoid_auc([1.0, 0.5, 0.0], [0, 0.5, 1]) == pytest.approx(0.5)
    assert metrics.trapezoid_auc([0.0, 1.0, 1.0], [0, 0.25, 1]) == pytest.approx(0.125 + 0.75)
    mask = np.zeros((9, 9), bool)
    mask[4, 4] = True
    assert metrics.dilate(mask, 0).sum() == 1
    assert metrics.dilate(mask, 1).sum() == 5  # the 4-neighbours
    assert metrics.dilate(mask, 1.5).sum() == 9  # diagonals are sqrt(2) away
    assert metrics.dilate(mask, 2).sum() == 13  # Euclidean disk of radius 2
    assert not metrics.dilate(np.zeros((4, 4), bool), 3).any()
    with pytest.raises(ValueError, match="tolerance"):
        metrics.dilate(mask, -1)


# ------------------------------------------------------------------------------------------
# pointing game on hand-made maps and masks
# ------------------------------------------------------------------------------------------
def test_pointing_game_hand_made():
    from saliency_kit.evaluate import pointing_game

    masks = np.zeros((2, 8, 8), bool)
    masks[:, 2:4, 2:4] = True  # the object: a 2x2 square
    maps = np.zeros((2, 3, 8, 8))
    maps[0, 0, 3, 3] = 1.0  # on the object
    maps[0, 1, 3, 5] = 1.0  # 2 px right of the object
    maps[0, 2, 7, 7] = 1.0  # far away
    maps[1, 0] = 0.0  # flat map: every pixel ties for the maximum
    maps[1, 1, 2, 2] = maps[1, 1, 6, 6] = 1.0  # a tie on and off the object
    maps[1, 2, 2, 2] = maps[1, 2, 3, 3] = 1.0  # a tie, both on the object
    expected0 = [[True, False, False], [False, False, True]]
    np.testing.assert_array_equal(pointing_game(maps, masks), expected0)
    expected2 = [[True, True, False], [False, False, True]]
    np.testing.assert_array_equal(pointing_game(maps, masks, tolerance=2), expected2)
    # a flat map hits only when the object covers the whole map
    assert pointing_game(np.zeros((1, 1, 4, 4)), np.ones((1, 4, 4), bool))[0, 0]


def test_pointing_game_ignores_nan_and_rejects_bad_masks():
    from saliency_kit.evaluate import pointing_game

    masks = np.zeros((1, 4, 4), bool)
    masks[0, 0, 0] = True
    maps = np.full((1, 2, 4, 4), np.nan)
    maps[0, 0, 0, 0] = 5.0
    np.testing.assert_array_equal(pointing_game(maps, masks), [[True, False]])
    with pytest.raises(ValueError, match=r"\[B, H, W\]"):
        pointing_game(maps, masks[:, :3])
    with pytest.raises(TypeError, match=r"boolean \(True on the object\); received dtype uint8\.$"):
        pointing_game(maps, masks.astype(np.uint8))
    with pytest.raises(ValueError, match=r"\[B, K, H, W\]"):
        pointing_game(maps[0], masks)


# ------------------------------------------------------------------------------------------
# re-initialisation on small models
# ------------------------------------------------------------------------------------------
def _nested_model():
    import keras

    inner = keras.Sequential(
        [
            keras.Input((8, 8, 3)),
            keras.layers.Conv2D(4, 3, padding="same", activation="relu", name="conv_a"),
            keras.layers.BatchNormalization(name="bn"),
        ],
        name="block",
    )
    x = keras.Input((8, 8, 3))
    h = inner(x)
    h = keras.layers.Conv2D(
        5, 3, activation="relu", name="conv_b", kernel_initializer=keras.initializers.Constant(0.25)
    )(h)
    h = keras.layers.GlobalAveragePooling2D()(h)
    out = keras.layers.Dense(3, name="head", bias_initializer=keras.initializers.Constant(-1.5))(h)
    model = keras.Model(x, out, name="nested")
    # "train": move every weight away from its initial value
    rng = np.random.default_rng(1)
    for w in model.weights:
        w.assign(rng.normal(size=w.shape).astype("float32") + 3.0)
    return model


def test_weighted_layers_include_nested_models():
    from saliency_kit.evaluate import weighted_layers

    paths = [p for p, _ in weighted_layers(_nested_model())]
    assert paths == ["block/conv_a", "block/bn", "conv_b", "head"]


def test_reinitialize_uses_each_layers_own_initializers_and_seed():
    from saliency_kit.evaluate import clone_with_weights, reinitialize, weighted_layers

    model = _nested_model()
    before = [w.numpy() for w in model.weights]
    clone = clone_with_weights(model)
    for w, v in zip(clone.weights, before):
        np.testing.assert_array_equal(w.numpy(), v)
    layers = dict(weighted_layers(clone))
    reinitialize(layers["conv_b"], seed=3)
    np.testing.assert_array_equal(layers["conv_b"].kernel.numpy(), 0.25)  # Constant(0.25)
    np.testing.assert_array_equal(layers["conv_b"].bias.numpy(), 0.0)  # default zeros
    reinitialize(layers["head"], seed=3)
    np.testing.assert_array_equal(layers["head"].bias.numpy(), -1.5)
    reinitialize(layers["block/bn"], seed=3)
    bn = layers["block/bn"]
    for name, value in [("gamma", 1), ("beta", 0), ("moving_mean", 0), ("moving_variance", 1)]:
        np.testing.assert_array_equal(getattr(bn, name).numpy(), value)
    # glorot-uniform kernel: seeded, bounded by sqrt(6 / (fan_in + fan_out))
    conv_a = layers["block/conv_a"]
    reinitialize(conv_a, seed=3, salt=0)
    first = conv_a.kernel.numpy()
    limit = np.sqrt(6 / (3 * 3 * 3 + 3 * 3 * 4))
    assert np.abs(first).max() <= limit and first.std() > limit / 4
    reinitialize(conv_a, seed=3, salt=0)
    np.testing.assert_array_equal(conv_a.kernel.numpy(), first)
    reinitialize(conv_a, seed=4, salt=0)
    assert not np.array_equal(conv_a.kernel.numpy(), first)
    # the user's model never changed
    for w, v in zip(model.weights, before):
        np.testing.assert_array_equal(w.numpy(), v)


# ------------------------------------------------------------------------------------------
# deletion / insertion on a linear model whose scores are known in closed form
# ------------------------------------------------------------------------------------------
def _linear_model(weights):
    """score(x) = sum(weights * x) over a [2, 2, 1] image: one output, no softmax."""
    import keras

    x = keras.Input((2, 2, 1))
    flat = keras.layers.Flatten()(x)
    dense = keras.layers.Dense(1, use_bias=False)
    model = keras.Model(x, dense(flat))
    dense.kernel.assign(np.asarray(weights, "float32").reshape(4, 1))
    return model


def _explanation(maps, targets, attributions=None):
    from saliency_kit.explanation import Explanation

    maps = np.asarray(maps, np.float32)
    attributions = maps if attributions is None else attributions
    return Explanation(
        attributions=attributions,
        maps=maps,
        targets=np.asarray(targets),
        scores=np.zeros(maps.shape[:2]),
        method="test",
        options={},
    )


def test_deletion_insertion_closed_form():
    from scipy import ndimage

    from saliency_kit.evaluate import deletion_insertion

    w = np.array([1.0, 4.0, 2.0, 3.0])  # pixel (0,1) matters most, then (1,1), (1,0), (0,0)
    model = _linear_model(w)
    x = np.array([[[[1.0], [1.0]], [[1.0], [1.0]]], [[[0.5], [2.0]], [[1.0], [3.0]]]], np.float32)
    maps = np.stack([w.reshape(2, 2), -w.reshape(2, 2)])[:, None]  # a perfect map and its opposite
    out = deletion_insertion(model, x, _explanation(maps, [[0], [0]]), steps=4, blur_sigma=1.0)
    np.testing.assert_allclose(out["fractions"], [0, 0.25, 0.5, 0.75, 1])
    # input 0, perfect order: remove 4, 3, 2, 1 from 10
    np.testing.assert_allclose(out["deletion_curve"][0, 0], [10, 6, 3, 1, 0], rtol=1e-6)
    assert out["deletion_auc"][0, 0] == pytest.approx(0.25 * (10 / 2 + 6 + 3 + 1 + 0 / 2))
    # input 1, reversed order: pixel values x*w = (0.5, 8, 3, 9); least important first
    contrib = (x[1, ..., 0] * w.reshape(2, 2)).ravel()
    order = np.argsort(maps[1, 0].ravel())[::-1]
    expected = [contrib.sum() - contrib[order[:i]].sum() for i in range(5)]
    np.testing.assert_allclose(out["deletion_curve"][1, 0], expected, rtol=1e-6)
    # insertion: original pixels pasted into the blurred image, in the same order
    for b in range(2):
        blurred = ndimage.gaussian_filter(x[b, ..., 0], sigma=1.0).ravel()
        order = np.argsort(-maps[b, 0].ravel(), kind="stable")
        curve = []
        for i in range(5):
            img = blurred.copy()
            img[order[:i]] = x[b, ..., 0].ravel()[order[:i]]
            curve.append(float(img @ w))
        np.testing.assert_allclose(out["insertion_curve"][b, 0], curve, rtol=1e-5)
    # random order: still one pixel per step, every pixel exactly once
    steps = -np.diff(out["random_deletion_curve"][0, 0])
    np.testing.assert_allclose(np.sort(steps), np.sort(w), rtol=1e-6)
    assert out["deletion_auc"].shape == out["random_deletion_auc"].shape == (2, 1)


def test_deletion_insertion_baselines_steps_and_errors():
    from saliency_kit.evaluate import deletion_insertion

    w = np.array([1.0, 4.0, 2.0, 3.0])
    model = _linear_model(w)
    x = np.ones((1, 2, 2, 1), np.float32)
    expl = _explanation(w.reshape(1, 1, 2, 2), [[0]])
    out = deletion_insertion(model, x, expl, steps=3, baseline=0.5)
    np.testing.assert_allclose(out["fractions"], [0, 0.25, 0.75, 1])  # rint(i * 4 / 3) pixels
    np.testing.assert_allclose(out["deletion_curve"][0, 0], [10, 8, 5.5, 5], rtol=1e-6)  # 1 + 0.5 * (4 + 3 + 2)
    image_baseline = np.full((2, 2, 1), 2.0, np.float32)
    out = deletion_insertion(model, x, expl, steps=4, baseline=image_baseline)
    np.testing.assert_allclose(out["deletion_curve"][0, 0], [10, 14, 17, 19, 20], rtol=1e-6)
    # flat map: ties broken in a seeded random order, the same for the same seed
    flat = _explanation(np.zeros((1, 1, 2, 2)), [[0]])
    a = deletion_insertion(model, x, flat, steps=4, seed=1)["deletion_curve"]
    b = deletion_insertion(model, x, flat, steps=4, seed=1)["deletion_curve"]
    np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="broadcast"):
        deletion_insertion(model, x, expl, baseline=np.zeros(3))
    with pytest.raises(ValueError, match="baseline must be"):
        deletion_insertion(model, x, expl, baseline="mean")
    with pytest.raises(ValueError, match=r"\[B, K, H, W\]"):
        deletion_insertion(model, x, _explanation(np.zeros((1, 1, 3, 3)), [[0]]))
    with pytest.raises(ValueError, match=r"steps must be a positive int; received 0\.$"):
        deletion_insertion(model, x, expl, steps=0)
    with pytest.raises(TypeError, match=r"steps must be a positive int; received 2\.5\.$"):
        deletion_insertion(model, x, expl, steps=2.5)
    with pytest.raises(ValueError, match=r"baseline must be .*; received 'mean'\.$"):
        deletion_insertion(model, x, expl, baseline="mean")


# ------------------------------------------------------------------------------------------
# randomisation test on a small model: mechanics
# ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def small_cnn():
    import keras

    keras.utils.set_random_seed(7)
    inner = keras.Sequential(
        [keras.Input((8, 8, 6)), keras.layers.Conv2D(6, 3, padding="same", activation="relu", name="inner_conv")],
        name="block",
    )
    x = keras.Input((12, 12, 3))
    h = keras.layers.Conv2D(6, 3, activation="relu", name="conv1")(x)
    h = inner(keras.layers.Conv2D(6, 3, activation="relu", name="conv2")(h))
    h = keras.layers.GlobalAveragePooling2D()(h)
    out = keras.layers.Dense(4, activation="softmax", name="head")(h)
    model = keras.Model(x, out, name="small")
    inputs = np.random.default_rng(0).random((3, 12, 12, 3)).astype("float32")
    return model, inputs


def test_randomization_test_mechanics(small_cnn):
    import saliency_kit as sk
    from saliency_kit.evaluate import (
        clone_with_weights,
        iter_randomization,
        randomization_test,
        reinitialize,
        weighted_layers,
    )

    model, inputs = small_cnn
    before = [w.numpy() for w in model.weights]
    reference = sk.explain(model, inputs, "gradient", "top1")

    steps = list(iter_randomization(model, inputs, "gradient", "top1", seed=5))
    assert [p for p, _, _ in steps] == [None, "head", "block/inner_conv", "conv2", "conv1"]
    assert steps[-1][2] == ["head", "block/inner_conv", "conv2", "conv1"]  # cumulative
    original = steps[0][1]
    np.testing.assert_allclose(original.attributions, reference.attributions, rtol=1e-5, atol=1e-7)
    for _, expl, _ in steps[1:]:  # targets stay those of the trained model
        np.testing.assert_array_equal(expl.targets, original.targets)
    for w, v in zip(model.weights, before):  # the user's model is untouched
        np.testing.assert_array_equal(w.numpy(), v)

    # independently computed: a fresh copy with only conv2 re-initialised (same seed and salt)
    indep = list(iter_randomization(model, inputs, "gradient", "top1", mode="independent", seed=5))
    assert [r for _, _, r in indep[1:]] == [["head"], ["block/inner_conv"], ["conv2"], ["conv1"]]
    copy = clone_with_weights(model)
    layers = weighted_layers(copy)
    salt = [p for p, _ in layers].index("conv2")
    reinitialize(dict(layers)["conv2"], seed=5, salt=salt)
    expected = sk.explain(copy, inputs, "gradient", original.targets)
    np.testing.assert_allclose(indep[3][1].attributions, expected.attributions, rtol=1e-5, atol=1e-7)
    # the first step of both modes re-initialises the same layer the same way
    np.testing.assert_allclose(indep[1][1].attributions, steps[1][1].attributions, rtol=1e-5, atol=1e-7)

    result = randomization_test(model, inputs, "gradient", "top1", layers=["block", "head"], seed=5)
    assert [r["layer"] for r in result] == ["head", "block/inner_conv"]
    assert set(result[0]) >= {"layer", "spearman_abs", "spearman", "ssim"}
    for r in result:
        assert -1 <= r["spearman"] <= 1 and -1 <= r["spearman_abs"] <= 1
    with pytest.raises(ValueError, match=r"weighted layers are: .*; received 'nope'\.$"):
        randomization_test(model, inputs, "gradient", layers=["nope"])
    with pytest.raises(ValueError, match="mode"):
        randomization_test(model, inputs, "gradient", mode="sideways")


@pytest.mark.filterwarnings("ignore:guided_backprop.*all zero:RuntimeWarning")
def test_randomization_reaches_the_rewritten_model_of_guided_backprop(small_cnn):
    """Guided backprop runs through a rewritten copy of the clone: it must see the new weights."""
    from saliency_kit.evaluate import iter_randomization

    model, inputs = small_cnn
    guided = list(iter_randomization(model, inputs, "guided_backprop", "top1", layers=["head"], seed=2))
    plain = list(iter_randomization(model, inputs, "gradient", "top1", layers=["head"], seed=2))
    assert not np.allclose(guided[1][1].scores, guided[0][1].scores)
    np.testing.assert_allclose(guided[1][1].scores, plain[1][1].scores, rtol=1e-5)


def test_randomization_needs_a_clonable_model():
    import keras

    from saliency_kit.evaluate import randomization_test

    class Sub(keras.Model):
        def __init__(self):
            super().__init__()
            self.dense = keras.layers.Dense(2)

        def call(self, x):
            return self.dense(x)

    model = Sub()
    model(np.zeros((1, 3), "float32"))
    with pytest.raises(ValueError, match="needs a copy of the model.*cannot copy subclassed model"):
        randomization_test(model, np.zeros((1, 3), "float32"))


# ------------------------------------------------------------------------------------------
# the shipped shapes model on freshly generated images (seed 4: never used in training)
# ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def shapes_data():
    import saliency_kit as sk
    from saliency_kit.data.shapes import make_dataset

    model, spec = sk.load_model("shapes")
    images, masks, labels = make_dataset(200, seed=4)
    return model, spec.preprocess(images), masks, labels


# the acceptance thresholds; a small CNN trained on this data reaches about 0.96, 0.95 and 0.78
POINTING_MINIMUM = {
    "gradcam": 0.90,
    "guided_backprop": 0.90,
    "gradient": 0.70,
    # none are set for these; held to the bar of their kin (guided backprop's
    # for LRP, the gradient's for DeepLIFT). Measured on seed 3: 98.0 % and 89.5 %
    "lrp": 0.90,
    "deeplift": 0.70,
}


@pytest.mark.parametrize("method", list(POINTING_MINIMUM))
def test_pointing_game_on_the_shapes_model(shapes_data, method):
    import saliency_kit as sk
    from saliency_kit.evaluate import pointing_game

    model, x, masks, labels = shapes_data
    expl = sk.explain(model, x, method, targets=labels, batch_size=64)  # the true class
    hits = pointing_game(expl, masks, tolerance=2)
    assert hits.shape == (200, 1)
    assert hits.mean() >= POINTING_MINIMUM[method], f"{method}: {hits.mean():.1%} of 200 images"


@pytest.mark.parametrize("method", ["gradient", "gradcam", "lrp", "deeplift"])
def test_deletion_and_insertion_on_the_shapes_model(shapes_data, method):
    """Deletion to the blurred image beats a random order; insertion beats deletion.

    With the default zero baseline deletion does *not* beat a random order on this data (measured
    on 120 images: gradient 0.242 vs 0.237, Grad-CAM 0.277 vs 0.237): a shape painted black keeps
    its silhouette, so the class survives, while black pixels scattered at random wreck the image.
    Deleting to the blurred image removes the silhouette; that is the comparison tested here.
    """
    import saliency_kit as sk
    from saliency_kit.engine import forward_scores
    from saliency_kit.evaluate import deletion_insertion

    model, x, _, _ = shapes_data
    x = x[:48]
    expl = sk.explain(model, x, method, "top1", batch_size=64)
    out = deletion_insertion(model, x, expl, steps=16, baseline="blur", batch_size=128)
    deletion, random_deletion = out["deletion_auc"].mean(), out["random_deletion_auc"].mean()
    insertion = out["insertion_auc"].mean()
    assert deletion < random_deletion, (deletion, random_deletion)
    assert insertion > deletion, (insertion, deletion)
    # at 0 % the deletion curve is the image's probability; at 100 % insertion is back to the image
    probabilities = forward_scores(model, x, expl.targets, score="output")
    np.testing.assert_allclose(out["deletion_curve"][..., 0], probabilities, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(out["insertion_curve"][..., -1], probabilities, rtol=1e-4, atol=1e-6)


@pytest.fixture(scope="module")
def cascading(shapes_data):
    from saliency_kit.evaluate import randomization_test

    model, x, _, _ = shapes_data
    return {m: randomization_test(model, x[:8], m, "top1", seed=0) for m in ("gradient", "gradcam", "guided_backprop")}


@pytest.mark.parametrize("method", ["gradient", "gradcam"])
def test_cascading_randomization_destroys_gradient_and_gradcam_maps(cascading, method):
    last = cascading[method][-1]
    assert last["spearman_abs"] < 0.3, last


def test_guided_backprop_ignores_the_output_layer(cascading):
    """What Adebayo et al. report, reproduced: re-initialising the output layer (the only
    class-specific weights) leaves guided backprop's map nearly unchanged, signed or not, while
    the signed gradient decorrelates. (Measured on 48 images and two seeds: guided backprop
    0.79-0.86 (abs) / 0.73-0.76 (signed), the signed gradient -0.05-0.17. Once the convolutions
    below are re-initialised too, guided backprop's maps do change on this small model: see the
    table of docs/guide/evaluation.md.)"""
    first = {m: steps[0] for m, steps in cascading.items()}
    assert all(step["layer"] == "predictions" for step in first.values())
    assert first["guided_backprop"]["spearman_abs"] > 0.6, first["guided_backprop"]
    assert first["guided_backprop"]["spearman"] > 0.6, first["guided_backprop"]
    assert first["gradient"]["spearman"] < 0.3, first["gradient"]


def test_compare_maps_uses_channel_sums_of_magnitudes_and_of_signed_values():
    from scipy import stats
    from skimage.metrics import structural_similarity

    from saliency_kit.evaluate import compare_maps

    rng = np.random.default_rng(3)
    a, b = rng.normal(size=(2, 2, 1, 9, 9, 3))  # [B=2, K=1, H, W, C]
    ea = _explanation(np.zeros((2, 1, 9, 9)), [[0], [0]], attributions=a)
    eb = _explanation(np.zeros((2, 1, 9, 9)), [[0], [0]], attributions=b)
    result = compare_maps(ea, eb)
    mag_a, mag_b = np.abs(a).sum(-1), np.abs(b).sum(-1)
    rho_abs = np.mean([stats.spearmanr(mag_a[i, 0].ravel(), mag_b[i, 0].ravel()).statistic for i in range(2)])
    rho = np.mean([stats.spearmanr(a[i, 0].sum(-1).ravel(), b[i, 0].sum(-1).ravel()).statistic for i in range(2)])
    assert result["spearman_abs"] == pytest.approx(rho_abs)
    assert result["spearman"] == pytest.approx(rho)

    def unit(m):
        return np.clip(m / np.percentile(m, 99), 0, 1)

    ssim = np.mean([structural_similarity(unit(mag_a[i, 0]), unit(mag_b[i, 0]), data_range=1.0) for i in range(2)])
    assert result["ssim"] == pytest.approx(ssim)
    assert compare_maps(ea, ea) == {
        "spearman_abs": pytest.approx(1.0),
        "spearman": pytest.approx(1.0),
        "ssim": pytest.approx(1.0),
    }
