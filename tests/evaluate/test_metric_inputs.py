"""sk.evaluate's model-based metrics on models with several inputs, on token ids and with target
objects.

Every metric is checked against the same metric on an independent single-input twin: for an
image + metadata model, a model of the image alone with one row's metadata baked in as a constant
(that row scored at its own position); for token ids, a model fed the embeddings; for a region of
a segmentation, a classifier whose logits are the region's class means; for a head of a
two-head model, that head alone; for a unit, a classifier whose logits are the layer's channel
means. Several inputs explained together are checked against NumPy by hand (completeness,
faithfulness correlation) with the model's own predictions."""

import keras
import numpy as np
import pytest
from twin_support import image_and_metadata

import saliency_kit as sk
from saliency_kit import evaluate
from saliency_kit.evaluate.draws import rng as seeded_rng

B = 3
RNG = np.random.default_rng(21)

# cheap options of each model-based metric, for 8 x 8 x 3 images (192 elements)
IMAGE = {
    "faithfulness_correlation": {"nr_runs": 6, "subset_size": 20},
    "infidelity": {"perturb_patch_sizes": [4], "perturb_baseline": "uniform", "n_perturb_samples": 2},
    "road": {"percentages": [10, 50, 90]},
    "monotonicity_correlation": {"nr_samples": 2, "features_in_step": 32},
    "region_perturbation": {"patch_size": 4, "regions_evaluation": 3, "order": "random"},
    "pixel_flipping": {"features_in_step": 48},
    "max_sensitivity": {"nr_samples": 3},
    "avg_sensitivity": {"nr_samples": 3},
    "relative_input_stability": {"nr_samples": 3},
    "random_logit": {},
    "completeness": {},
    "non_sensitivity": {"features_in_step": 8, "eps": 0.002},
    "input_invariance": {},
}
ONE_IMAGE_ONLY = ("infidelity", "road", "region_perturbation")
#: the metrics with a softmax= option (a head's and a unit's score has no probability of its own)
SOFTMAX = (
    "faithfulness_correlation",
    "infidelity",
    "road",
    "monotonicity_correlation",
    "region_perturbation",
    "pixel_flipping",
    "completeness",
    "non_sensitivity",
)
# for token ids explained in embedding space, 6 tokens x 4 dimensions (24 elements)
TOKENS = {
    "faithfulness_correlation": {"nr_runs": 6, "subset_size": 6},
    "monotonicity_correlation": {"nr_samples": 2, "features_in_step": 4},
    "pixel_flipping": {"features_in_step": 4},
    "max_sensitivity": {"nr_samples": 3, "lower_bound": 0.05},
    "avg_sensitivity": {"nr_samples": 3},
    "relative_input_stability": {"nr_samples": 3},
    "random_logit": {},
    "completeness": {},
    "non_sensitivity": {"features_in_step": 2, "eps": 0.002},
}


def _score(value):
    return value["score"] if isinstance(value, dict) else value


def _same(got, want):
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, equal_nan=True)


# ------------------------------------------------------------------------------ image + metadata
@pytest.fixture(scope="module")
def image_meta():
    """A model of an image and 5 metadata values, and per row a twin of the image alone with that
    row's metadata baked in (a constant the twin's own layers read)."""
    model, x, twin = image_and_metadata(3, B, RNG)

    return model, x, [twin(row) for row in x[1]]


def _per_row_twins(metric, twins, image, explained, targets, options):
    """Row b of the metric on twin b, fed row b at every position (so that row b sits at its own
    position, which keys its draws); ``targets`` the same for every row, or one per row (a list)."""
    rows = []
    for b, twin in enumerate(twins):
        target = targets[b] if isinstance(targets, list) else targets
        value = _score(metric(twin, np.repeat(image[b : b + 1], B, axis=0), explained, target, **options))
        rows.append(value[b])
    return np.stack(rows)


@pytest.mark.parametrize("name", sorted(IMAGE))
def test_one_input_of_several_scores_as_a_twin_with_the_others_baked_in(image_meta, name):
    model, x, twins = image_meta
    metric = getattr(evaluate, name)
    got = _score(metric(model, x, "gradient", "top1", attribute_to="image", **IMAGE[name]))
    assert got.shape == (B, 1)
    _same(got, _per_row_twins(metric, twins, x[0], "gradient", "top1", IMAGE[name]))


def test_an_explanation_of_one_input_and_dict_inputs(image_meta):
    model, x, twins = image_meta
    as_dict = {"meta": x[1], "image": x[0]}
    expl = sk.explain(model, as_dict, "integrated_gradients", "top2", attribute_to="image", steps=8)
    options = IMAGE["faithfulness_correlation"]
    got = evaluate.faithfulness_correlation(model, as_dict, expl, **options)
    assert got.shape == (B, 2)
    by_method = evaluate.faithfulness_correlation(
        model, x, "integrated_gradients", "top2", attribute_to="image", steps=8, **options
    )
    _same(got, by_method)
    rows = []
    for b, twin in enumerate(twins):
        twin_expl = sk.explain(twin, np.repeat(x[0][b : b + 1], B, axis=0), "integrated_gradients", "top2", steps=8)
        rows.append(
            evaluate.faithfulness_correlation(twin, np.repeat(x[0][b : b + 1], B, axis=0), twin_expl, **options)[b]
        )
    _same(got, np.stack(rows))
    # localisation and complexity read the explained image's own maps
    masks = np.zeros((B, 8, 8), bool)
    masks[:, 2:6, 3:7] = True
    _same(evaluate.auc(model, x, expl, masks=masks), evaluate.auc(maps=expl.map_of("image"), masks=masks))
    _same(
        evaluate.sparseness(model, x, "gradient", attribute_to="image"),
        evaluate.sparseness(maps=sk.explain(model, x, "gradient", attribute_to="image").map_of("image")),
    )


@pytest.mark.parametrize(
    "name", ["faithfulness_correlation", "region_perturbation", "max_sensitivity", "monotonicity_correlation"]
)
def test_several_inputs_are_seeded_and_independent_of_batch_size(image_meta, name):
    model, x, _ = image_meta
    metric = getattr(evaluate, name)
    options = dict(IMAGE[name], **({"attribute_to": "image"} if name in ONE_IMAGE_ONLY else {}))
    full = _score(metric(model, x, "gradient", "top2", seed=1, **options))
    _same(_score(metric(model, x, "gradient", "top2", seed=1, batch_size=2, **options)), full)
    _same(_score(metric(model, [a[:2] for a in x], "gradient", "top2", seed=1, batch_size=5, **options)), full[:2])
    assert not np.allclose(_score(metric(model, x, "gradient", "top2", seed=2, **options)), full)


def test_several_inputs_flattened_side_by_side_by_hand(image_meta):
    """Completeness and faithfulness correlation over the image and the metadata together, by hand:
    the packed row is [image flattened, metadata], the baseline its minimum, the model's own
    predictions at the rows rebuilt from it."""
    model, x, _ = image_meta
    expl = sk.explain(model, x, "gradient_x_input", "top1")
    packed = np.concatenate([x[0].reshape(B, -1), x[1]], axis=1).astype(np.float64)
    a = np.concatenate([expl.attributions[0][:, 0].reshape(B, -1), expl.attributions[1][:, 0]], axis=1)
    cls = expl.targets[:, 0]

    def predict(rows):
        rows = rows.astype("float32")
        return model.predict([rows[:, :192].reshape(-1, 8, 8, 3), rows[:, 192:]], verbose=0)

    clean = predict(packed)[np.arange(B), cls]
    baseline = np.repeat(packed.min(axis=1, keepdims=True), packed.shape[1], axis=1)
    want = np.abs(a.sum(-1) - (clean - predict(baseline)[np.arange(B), cls]))
    _same(evaluate.completeness(model, x, expl)[:, 0], want)
    _same(evaluate.completeness(model, x, expl.attributions, expl.targets)[:, 0], want)  # a bare list

    runs, size = 6, 20
    want = []
    for b in range(B):
        generator = seeded_rng(0, "faithfulness_correlation", b)
        chosen = [generator.choice(packed.shape[1], size, replace=False) for _ in range(runs)]
        rows = np.repeat(packed[b : b + 1], runs, axis=0)
        for r, c in enumerate(chosen):
            rows[r, c] = packed[b].min()
        lost = clean[b] - predict(rows)[:, cls[b]]
        normalised = a[b] / np.abs(a[b]).max()
        want.append(np.corrcoef([normalised[c].sum() for c in chosen], lost)[0, 1])
    _same(evaluate.faithfulness_correlation(model, x, expl, nr_runs=runs, subset_size=size)[:, 0], want)


def test_metrics_of_one_image_refuse_several_inputs_and_layers(image_meta):
    model, x, _ = image_meta
    for name in ONE_IMAGE_ONLY:
        with pytest.raises(ValueError, match=r"several inputs \['image', 'meta'\].*attribute_to="):
            getattr(evaluate, name)(model, x, "gradient", **IMAGE[name])
    masks = np.ones((B, 8, 8), bool)
    with pytest.raises(ValueError, match="attribute_to="):
        evaluate.auc(model, x, "gradient", masks=masks)
    with pytest.raises(ValueError, match="attribute_to="):
        evaluate.auc(model, x, sk.explain(model, x, "gradient"), masks=masks)
    # an inner layer is not an input that can be perturbed
    for name in ("faithfulness_correlation", "max_sensitivity", "completeness"):
        with pytest.raises(ValueError, match="inner layer.*not an input that can be perturbed.*'conv'"):
            getattr(evaluate, name)(model, x, "gradient", attribute_to="conv", **IMAGE[name])
    expl = sk.explain(model, x, "gradient", attribute_to="conv")
    with pytest.raises(ValueError, match="can be perturbed"):
        evaluate.pixel_flipping(model, x, expl, **IMAGE["pixel_flipping"])
    # a layer's explanation still has maps and other classes to compare
    assert evaluate.random_logit(model, x, expl).shape == (B, 1)
    with pytest.raises(ValueError, match="callable explainer"):
        evaluate.completeness(model, x, lambda m, inputs, t: np.zeros((B, 1, 8, 8, 3)))


# ------------------------------------------------------------------------------ token ids
@pytest.fixture(scope="module")
def tokens():
    """A model of token ids (explained in embedding space) and its twin fed the embeddings."""
    keras.utils.set_random_seed(5)
    ids = keras.Input((6,), dtype="int32", name="token_ids")
    embedding = keras.layers.Embedding(12, 4, name="embedding")
    hidden = keras.layers.Dense(8, activation="tanh", name="hidden")
    pool, head = keras.layers.GlobalAveragePooling1D(), keras.layers.Dense(3, name="head")
    model = keras.Model(ids, head(pool(hidden(embedding(ids)))))
    embedded = keras.Input((6, 4))
    twin = keras.Model(embedded, head(pool(hidden(embedded))))
    x = RNG.integers(1, 12, (B, 6)).astype("int32")
    return model, twin, x, embedding(x).numpy()


@pytest.mark.parametrize("name", sorted(TOKENS))
def test_token_ids_score_as_a_twin_fed_their_embeddings(tokens, name):
    model, twin, x, embedded = tokens
    metric = getattr(evaluate, name)
    got = _score(metric(model, x, "gradient", "top2", **TOKENS[name]))
    assert got.shape == (B, 2)
    _same(got, _score(metric(twin, embedded, "gradient", "top2", **TOKENS[name])))


def test_token_ids_re_explained_at_perturbed_embeddings_with_a_noisy_method(tokens):
    model, twin, x, embedded = tokens
    options = dict(TOKENS["max_sensitivity"], samples=4)
    got = evaluate.max_sensitivity(model, x, "smoothgrad", **options)
    _same(got, evaluate.max_sensitivity(twin, embedded, "smoothgrad", **options))
    _same(evaluate.max_sensitivity(model, x, "smoothgrad", batch_size=3, **options), got)
    with pytest.raises(ValueError, match="embedding space cannot be shifted"):
        evaluate.input_invariance(model, x, "gradient")


# ------------------------------------------------------------------------------ target objects
@pytest.fixture(scope="module")
def images():
    return RNG.random((B, 8, 8, 3)).astype("float32")


def region_twin(segmenter, mask):
    """A classifier whose logits ``[B, 3]`` are the segmenter's class logits averaged over ``mask``."""
    inside, count = mask.astype("float32")[None, :, :, None], float(max(mask.sum(), 1))
    means = keras.layers.Lambda(lambda t: keras.ops.sum(t * inside, axis=(1, 2)) / count)(segmenter.outputs[0])
    return keras.Model(segmenter.inputs, means)


@pytest.fixture(scope="module")
def two_heads():
    """Two heads on one trunk; ``b`` a 3-valued head."""
    keras.utils.set_random_seed(6)
    inputs = keras.Input((8, 8, 3))
    pooled = keras.layers.GlobalAveragePooling2D()(keras.layers.Conv2D(4, 3, activation="relu", name="conv")(inputs))
    return keras.Model(inputs, [keras.layers.Dense(2, name="a")(pooled), keras.layers.Dense(3, name="b")(pooled)])


MASK = np.zeros((8, 8), bool)
MASK[2:6, 1:5] = True


@pytest.mark.parametrize("name", sorted(IMAGE))
def test_a_region_target_scores_as_a_classifier_of_region_means(segmenter, images, name):
    metric = getattr(evaluate, name)
    got = _score(metric(segmenter, images, "gradient", sk.targets.region(MASK, classes=1), **IMAGE[name]))
    want = _score(metric(region_twin(segmenter, MASK), images, "gradient", 1, **IMAGE[name]))
    assert got.shape == (B, 1)
    _same(got, want)


@pytest.mark.parametrize("name", ["faithfulness_correlation", "pixel_flipping", "max_sensitivity", "road"])
def test_a_predicted_region_keeps_the_clean_inputs_mask(segmenter, images, name):
    """Perturbed copies are scored, and re-explained, on the clean input's predicted region of
    its most frequent class."""
    metric = getattr(evaluate, name)
    got = _score(metric(segmenter, images, "gradient", sk.targets.region("predicted", classes="top1"), **IMAGE[name]))
    labels = np.argmax(segmenter.predict(images, verbose=0), axis=-1)  # [B, 8, 8]
    classes = [int(np.bincount(row.ravel(), minlength=3).argmax()) for row in labels]
    masks = [row == c for row, c in zip(labels, classes)]
    assert all(0 < m.sum() < m.size for m in masks)  # a region, not the whole image
    twins = [region_twin(segmenter, mask) for mask in masks]
    want = _per_row_twins(metric, twins, images, "gradient", classes, IMAGE[name])
    if name == "faithfulness_correlation":
        # A correlation of score drops: the region's mean logit and the twin's Dense over the same
        # mask round differently in float32, and the drops' correlation amplifies that (6e-6 apart on
        # an AVX2 CPU without oneDNN, within 1e-6 on one with AVX-512); another region moves it by
        # more than 1e-2.
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, equal_nan=True)
    else:
        _same(got, want)


@pytest.mark.parametrize("name", sorted(IMAGE))
def test_a_head_target_scores_as_that_head_alone(two_heads, images, name):
    metric = getattr(evaluate, name)
    options = dict(IMAGE[name], **({"softmax": False} if name in SOFTMAX else {}))
    head = keras.Model(two_heads.inputs, two_heads.outputs[1])
    got = _score(metric(two_heads, images, "gradient", sk.targets.output("b", classes="top2"), **options))
    assert got.shape == (B, 2)
    _same(got, _score(metric(head, images, "gradient", "top2", **options)))


@pytest.mark.parametrize("name", sorted(IMAGE))
def test_a_unit_target_scores_as_a_classifier_of_channel_means(two_heads, images, name):
    metric = getattr(evaluate, name)
    options = dict(IMAGE[name], **({"softmax": False} if name in SOFTMAX else {}))
    conv = two_heads.get_layer("conv")
    means = keras.Model(two_heads.inputs, keras.layers.GlobalAveragePooling2D()(conv.output))
    got = _score(metric(two_heads, images, "gradient", sk.targets.unit("conv", 2), **options))
    _same(got, _score(metric(means, images, "gradient", 2, **options)))


def test_target_objects_with_explanations_softmax_and_batch_size(segmenter, two_heads, images):
    region = sk.targets.region(MASK, classes=1)
    expl = sk.explain(segmenter, images, "gradient", region)
    options = IMAGE["pixel_flipping"]
    by_method = evaluate.pixel_flipping(segmenter, images, "gradient", region, **options)["score"]
    _same(evaluate.pixel_flipping(segmenter, images, expl, region, **options)["score"], by_method)
    _same(evaluate.pixel_flipping(segmenter, images, "gradient", region, batch_size=2, **options)["score"], by_method)
    with pytest.raises(ValueError, match="made for region targets: pass the same target object"):
        evaluate.pixel_flipping(segmenter, images, expl, **options)
    with pytest.raises(ValueError, match="the target the explanation was made for"):
        evaluate.pixel_flipping(segmenter, images, expl, sk.targets.region(MASK, classes=2), **options)
    # completeness of a region by hand: the region's mean logit at the input and at its minimum
    gap = evaluate.completeness(segmenter, images, expl, region)[:, 0]

    def region_score(batch):
        return segmenter.predict(batch, verbose=0)[..., 1][:, MASK].mean(axis=-1)

    floor = np.broadcast_to(images.min(axis=(1, 2, 3), keepdims=True), images.shape)
    want = np.abs(expl.attributions[:, 0].reshape(B, -1).sum(-1) - (region_score(images) - region_score(floor)))
    np.testing.assert_allclose(gap, want, rtol=1e-5, atol=1e-5)
    # a head has no probability of its own: softmax=True scores its values as they are
    head = sk.targets.output("b", classes="top1")
    _same(
        evaluate.pixel_flipping(two_heads, images, "gradient", head, **options)["score"],
        evaluate.pixel_flipping(two_heads, images, "gradient", head, softmax=False, **options)["score"],
    )


@pytest.fixture(scope="module")
def detector():
    """Raw proposals ``[B, 3, 4 + 1 + 3]`` (boxes from the bias, objectness logit, class logits)."""
    keras.utils.set_random_seed(8)
    inputs = keras.Input((8, 8, 3))
    hidden = keras.layers.Conv2D(4, 3, padding="same", activation="relu")(inputs)
    dense = keras.layers.Dense(3 * 8)
    model = keras.Model(inputs, keras.layers.Reshape((3, 8))(dense(keras.layers.Flatten()(hidden))))
    kernel, bias = dense.get_weights()
    bias = bias.reshape(3, 8)
    bias[:, :4] = [[0.5, 0.5, 3.0, 3.5], [2.0, 1.0, 5.0, 4.5], [1.0, 2.5, 4.0, 5.5]]
    dense.set_weights([0.05 * kernel, bias.reshape(-1)])
    return model


BOX = np.array([1.0, 1.0, 4.0, 4.0], "float32")


def box_twin(detector):
    """A classifier whose column c is D-RISE's score of ``BOX`` for class c, written out: the
    largest IoU × objectness probability × class probability over the proposals."""

    def drise(raw):
        boxes, objectness = raw[..., :4], keras.ops.sigmoid(raw[..., 4])
        probabilities = keras.ops.softmax(raw[..., 5:], axis=-1)
        width = keras.ops.relu(keras.ops.minimum(boxes[..., 2], BOX[2]) - keras.ops.maximum(boxes[..., 0], BOX[0]))
        height = keras.ops.relu(keras.ops.minimum(boxes[..., 3], BOX[3]) - keras.ops.maximum(boxes[..., 1], BOX[1]))
        inter = width * height
        area = keras.ops.relu(boxes[..., 2] - boxes[..., 0]) * keras.ops.relu(boxes[..., 3] - boxes[..., 1])
        iou = inter / (area + (BOX[2] - BOX[0]) * (BOX[3] - BOX[1]) - inter)
        return keras.ops.max((iou * objectness)[..., None] * probabilities, axis=1)

    return keras.Model(detector.inputs, keras.layers.Lambda(drise)(detector.outputs[0]))


@pytest.mark.parametrize("name", ["faithfulness_correlation", "road", "random_logit", "avg_sensitivity"])
def test_a_box_target_scores_as_a_classifier_of_drise_scores(detector, images, name):
    metric = getattr(evaluate, name)
    options = dict(IMAGE[name], **({"softmax": False} if name in SOFTMAX else {}))
    got = _score(metric(detector, images, "gradient", sk.targets.box(BOX[None], classes=1), **options))
    _same(got, _score(metric(box_twin(detector), images, "gradient", 1, **options)))


def test_targets_without_classes_are_refused_where_other_classes_are_read(segmenter, images):
    both = [sk.targets.region(MASK, classes=1), sk.targets.region(MASK, classes=2)]
    options = IMAGE["faithfulness_correlation"]
    got = evaluate.faithfulness_correlation(segmenter, images, "gradient", both, **options)
    twin = region_twin(segmenter, MASK)
    _same(got, evaluate.faithfulness_correlation(twin, images, "gradient", np.tile([1, 2], (B, 1)), **options))
    with pytest.raises(ValueError, match="road reads the other classes of each target.*'several'"):
        evaluate.road(segmenter, images, "gradient", both, **IMAGE["road"])
    with pytest.raises(ValueError, match=r"random_logit .*\(or num_classes=\)"):
        evaluate.random_logit(segmenter, images, "gradient", both)
    with pytest.raises(ValueError, match="return_nan_when_prediction_changes=True"):
        evaluate.relative_input_stability(segmenter, images, "gradient", both, nr_samples=2)


def test_compare_takes_several_inputs_and_target_objects(image_meta, segmenter, images):
    model, x, _ = image_meta
    cheap = IMAGE["faithfulness_correlation"]
    rows = evaluate.compare(
        model,
        x,
        ["gradient"],
        ["faithfulness_correlation", "sparseness"],
        metric_options={"faithfulness_correlation": cheap},
    )["rows"]
    table = {(r["method"], r["metric"]): r["per_input"] for r in rows}
    for method in ("gradient", "random"):  # the image and the metadata side by side
        _same(
            table[method, "faithfulness_correlation"],
            evaluate.faithfulness_correlation(model, x, method, **cheap)[:, 0],
        )
        _same(table[method, "sparseness"], evaluate.sparseness(model, x, method)[:, 0])
    region = sk.targets.region(MASK, classes=1)
    deletion = {"steps": 4, "score": "logits"}
    rows = evaluate.compare(
        segmenter,
        images,
        ["gradient"],
        ["faithfulness_correlation", "auc", "deletion"],
        targets=region,
        masks=np.broadcast_to(MASK, (B, 8, 8)),
        metric_options={"faithfulness_correlation": cheap, "deletion": deletion},
    )["rows"]
    table = {(r["method"], r["metric"]): r["per_input"] for r in rows}
    twin = region_twin(segmenter, MASK)
    for method in ("gradient", "random"):
        _same(
            table[method, "faithfulness_correlation"],
            evaluate.faithfulness_correlation(twin, images, method, 1, **cheap)[:, 0],
        )
    by_twin = evaluate.compare(
        twin, images, ["gradient"], ["deletion"], targets=1, metric_options={"deletion": deletion}
    )
    _same(table["gradient", "deletion"], by_twin["rows"][0]["per_input"])


def test_model_free_metrics_read_the_maps_of_one_explained_part(tokens, segmenter, images):
    model, _, x, _ = tokens
    expl = sk.explain(model, x, "gradient", "top2")
    assert expl.maps.shape == (B, 2, 6)  # one value per token
    per_token = expl.maps[:, :, None]  # [B, K, 1, T]: bare maps of three axes would be [B, H, W]
    _same(evaluate.sparseness(model, x, "gradient", "top2"), evaluate.sparseness(maps=per_token))
    _same(evaluate.complexity(model, x, expl), evaluate.complexity(maps=per_token))
    region = sk.targets.region(MASK, classes=1)
    maps = sk.explain(segmenter, images, "gradient", region).maps
    _same(evaluate.auc(segmenter, images, "gradient", region, masks=region), evaluate.auc(maps=maps, masks=region))
