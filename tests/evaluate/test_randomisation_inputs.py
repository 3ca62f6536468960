"""The randomisation test and the deletion curves on models with several inputs, on token ids and
with target objects, each checked against an independent twin or by hand (the test file of the
other model-based metrics is ``test_metric_inputs.py``).

- the image of an image + metadata model: per row, a model of the image alone with that row's
  metadata baked in as a constant, built from the same layer objects (so the re-initialised layers
  are the same layers, in the same order, drawn from the same seeds);
- the image and the metadata together: by hand, on a copy re-initialised layer by layer with
  :func:`~saliency_kit.evaluate.reinitialize` (the library's draws), the maps compared with SciPy
  and scikit-image;
- token ids: a model fed the embeddings of the re-initialised copy's own ``Embedding``;
- a region of a segmentation: a classifier whose logits are the region's class means (a
  ``"predicted"`` region: the trained model's mask of each input, kept for every step).
"""

import keras
import numpy as np
import pytest
from scipy import stats
from skimage.metrics import structural_similarity
from twin_support import image_and_metadata

import saliency_kit as sk
from saliency_kit import evaluate
from saliency_kit.evaluate import clone_with_weights, reinitialize, weighted_layers
from saliency_kit.explanation import Explanation

B = 3
RNG = np.random.default_rng(33)
MODES = ("cascading", "independent", "mprt", "smooth_mprt", "efficient_mprt")
QUANTUS = ("mprt", "smooth_mprt", "efficient_mprt")
SIMILARITIES = ("spearman_abs", "spearman", "ssim")


def _same(got, want):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, equal_nan=True)


def _options(mode):
    return {"nr_samples": 3} if mode == "smooth_mprt" else {}


def _weights(model):
    return [w.numpy().copy() for w in model.weights]


def _unchanged(model, before):
    for w, value in zip(model.weights, before):
        np.testing.assert_array_equal(w.numpy(), value)


def _randomised(model, paths, seed):
    """A copy of ``model`` with the layers ``paths`` re-initialised as the library's step does: each
    from its own initialisers, seeded by ``(seed, its position among the weighted layers)``."""
    copy = clone_with_weights(model)
    layers = weighted_layers(copy)
    order = [path for path, _ in layers]
    for path in paths:
        reinitialize(dict(layers)[path], seed=seed, salt=order.index(path))
    return copy


# ------------------------------------------------------------------------------ image + metadata
@pytest.fixture(scope="module")
def image_meta():
    """A model of an image and 5 metadata values, and per row a twin of the image alone with that
    row's metadata baked in (a constant the twin's own copies of the layers read)."""
    model, x, twin = image_and_metadata(13, B, RNG)

    twins = [twin(row) for row in x[1]]
    paths = [path for path, _ in weighted_layers(model)]
    assert all([path for path, _ in weighted_layers(t)] == paths for t in twins)  # the same draws
    return model, x, twins


def _rows_of_twins(twins, image, call):
    """Row b of ``call(twin b, inputs)`` with row b of ``image`` at every position (so that it sits at
    its own position, which keys its draws)."""
    return [call(twin, np.repeat(image[b : b + 1], B, axis=0), b) for b, twin in enumerate(twins)]


@pytest.mark.parametrize("mode", MODES)
def test_one_image_of_several_randomises_as_a_twin_with_the_metadata_baked_in(image_meta, mode):
    model, x, twins = image_meta
    before = _weights(model)
    got = evaluate.randomization_test(
        model, x, "gradient", "top2", mode=mode, attribute_to="image", seed=1, **_options(mode)
    )
    _unchanged(model, before)

    def twin_steps(twin, image, b):
        return evaluate.randomization_test(twin, image, "gradient", "top2", mode=mode, seed=1, **_options(mode))

    rows = _rows_of_twins(twins, x[0], twin_steps)
    assert [step["layer"] for step in got] == [step["layer"] for step in rows[0]]
    for i, step in enumerate(got):
        if mode in QUANTUS:
            assert step["per_input"].shape == (B, 2)
            _same(step["per_input"], np.stack([row[i]["per_input"][b] for b, row in enumerate(rows)]))
        else:  # means over inputs and targets: a twin's inputs are all its own row
            for key in SIMILARITIES:
                _same(step[key], np.mean([row[i][key] for row in rows]))


def test_several_inputs_are_compared_side_by_side_by_hand(image_meta):
    """The image and the metadata explained together: Spearman over the image's channel sums and
    the metadata side by side, SSIM of the image's map alone, MPRT over every element side by side;
    the copies re-initialised by hand from the output down."""
    model, x, _ = image_meta
    top = evaluate.randomization_test(model, x, "gradient", "top1", seed=4)[:2]
    mprt = evaluate.randomization_test(model, x, "gradient", "top1", mode="mprt", seed=4)[:2]
    classes = np.argmax(model.predict(x, verbose=0), axis=-1)[:, None]
    trained = sk.explain(model, x, "gradient", classes).attributions
    for step, (cascading, quantus) in enumerate(zip(top, mprt), start=1):
        paths = [path for path, _ in weighted_layers(model)][::-1][:step]
        assert cascading["randomized"] == quantus["randomized"] == paths
        randomised = sk.explain(_randomised(model, paths, 4), x, "gradient", classes).attributions
        spearman_abs, spearman, ssim, per_input = [], [], [], []
        for b in range(B):
            a_image, a_meta = trained[0][b, 0].astype(np.float64), trained[1][b, 0].astype(np.float64)
            r_image, r_meta = randomised[0][b, 0].astype(np.float64), randomised[1][b, 0].astype(np.float64)
            magnitude = [
                np.concatenate([np.abs(i).sum(-1).ravel(), np.abs(m)])
                for i, m in ((a_image, a_meta), (r_image, r_meta))
            ]
            signed = [np.concatenate([i.sum(-1).ravel(), m]) for i, m in ((a_image, a_meta), (r_image, r_meta))]
            spearman_abs.append(stats.spearmanr(*magnitude).statistic)
            spearman.append(stats.spearmanr(*signed).statistic)
            scaled = [
                np.clip(np.abs(i).sum(-1) / np.percentile(np.abs(i).sum(-1), 99), 0, 1) for i in (a_image, r_image)
            ]
            ssim.append(structural_similarity(*scaled, data_range=1.0, win_size=7))
            elements = [np.concatenate([i.ravel(), m]) for i, m in ((a_image, a_meta), (r_image, r_meta))]
            per_input.append(stats.spearmanr(*[np.abs(e) / np.abs(e).max() for e in elements]).statistic)
        _same([cascading[key] for key in SIMILARITIES], [np.mean(spearman_abs), np.mean(spearman), np.mean(ssim)])
        _same(quantus["per_input"][:, 0], per_input)


def test_several_inputs_are_seeded_and_independent_of_batch_size(image_meta):
    model, x, _ = image_meta
    for mode in ("cascading", "smooth_mprt"):
        full = evaluate.randomization_test(model, x, "smoothgrad", mode=mode, seed=2, samples=3, **_options(mode))
        again = evaluate.randomization_test(
            model, x, "smoothgrad", mode=mode, seed=2, samples=3, batch_size=2, **_options(mode)
        )
        for step, other in zip(full, again):
            for key in ("per_input", *SIMILARITIES):
                if key in step:
                    _same(other[key], step[key])
    reseeded = evaluate.randomization_test(model, x, "smoothgrad", mode="smooth_mprt", seed=3, samples=3, nr_samples=3)
    assert not np.allclose(reseeded[0]["per_input"], full[0]["per_input"])
    both = evaluate.randomization_test(model, x, "gradient", attribute_to=["meta", "image"], layers=["head"])
    alone = evaluate.randomization_test(model, x, "gradient", attribute_to="image", layers=["head"])
    _same(both[0]["ssim"], alone[0]["ssim"])  # several parts: SSIM of the image's map only


def test_smooth_mprt_re_reads_an_inner_layer_at_each_steps_weights(image_meta):
    """One sample is the plain explanation: with every layer random (smooth_mprt's last step, from
    the input up; MPRT's, from the output down), at the values of the inner layer under the random
    weights (gradient × its values depends on them)."""
    model, x, _ = image_meta
    options = {"attribute_to": "conv", "seed": 6}
    smooth = evaluate.randomization_test(model, x, "gradient_x_input", mode="smooth_mprt", nr_samples=1, **options)
    mprt = evaluate.randomization_test(model, x, "gradient_x_input", mode="mprt", **options)
    assert [step["layer"] for step in smooth] == ["conv", "meta_dense", "head"]
    assert smooth[-1]["randomized"] == mprt[-1]["randomized"][::-1]
    _same(smooth[-1]["per_input"], mprt[-1]["per_input"])


# ------------------------------------------------------------------------------ token ids
@pytest.fixture(scope="module")
def tokens():
    keras.utils.set_random_seed(15)
    ids = keras.Input((6,), dtype="int32", name="token_ids")
    hidden = keras.layers.Dense(8, activation="tanh", name="hidden")
    head = keras.layers.Dense(3, name="head")
    model = keras.Model(
        ids, head(keras.layers.GlobalAveragePooling1D()(hidden(keras.layers.Embedding(12, 4, name="embedding")(ids))))
    )
    return model, RNG.integers(1, 12, (B, 6)).astype("int32")


def _fed_embeddings(copy):
    """A model of the copy's layers after its ``Embedding``, fed embeddings ``[B, 6, 4]``."""
    embedded = keras.Input((6, 4))
    pooled = keras.layers.GlobalAveragePooling1D()(copy.get_layer("hidden")(embedded))
    return keras.Model(embedded, copy.get_layer("head")(pooled))


def test_token_ids_randomise_at_the_copys_own_embeddings(tokens):
    model, ids = tokens
    before = _weights(model)
    steps = list(evaluate.iter_randomization(model, ids, "gradient", "top2", seed=3))
    mprt = evaluate.randomization_test(model, ids, "gradient", "top2", mode="mprt", seed=3)
    _unchanged(model, before)
    original, (path, last, randomized) = steps[0][1], steps[-1]
    assert path == "embedding" and randomized == ["head", "hidden", "embedding"]
    copy = _randomised(model, randomized, 3)
    embedded = copy.get_layer("embedding")(ids).numpy()
    assert not np.allclose(embedded, model.get_layer("embedding")(ids).numpy())  # the embeddings moved
    twin = sk.explain(_fed_embeddings(copy), embedded, "gradient", original.targets)
    _same(last.attributions, twin.attributions)
    np.testing.assert_array_equal(last.targets, original.targets)
    trained = sk.explain(
        _fed_embeddings(model), model.get_layer("embedding")(ids).numpy(), "gradient", original.targets
    )
    _same(original.attributions, trained.attributions)
    want = [
        [
            stats.spearmanr(
                *[np.abs(a[b, k]).ravel() / np.abs(a[b, k]).max() for a in (trained.attributions, twin.attributions)]
            ).statistic
            for k in range(2)
        ]
        for b in range(B)
    ]
    _same(mprt[-1]["per_input"], want)
    signed = [
        stats.spearmanr(trained.attributions[b, k].ravel(), twin.attributions[b, k].ravel()).statistic
        for b in range(B)
        for k in range(2)
    ]
    _same(evaluate.compare_maps(original, last)["spearman"], np.mean(signed))


def test_token_ids_smooth_mprt_of_one_sample_is_mprt(tokens):
    model, ids = tokens
    smooth = evaluate.randomization_test(model, ids, "gradient", mode="smooth_mprt", nr_samples=1, seed=5)
    mprt = evaluate.randomization_test(model, ids, "gradient", mode="mprt", seed=5)
    # smooth_mprt goes from the input up: its last step (every layer random) is MPRT's last
    _same(smooth[-1]["per_input"], mprt[-1]["per_input"])
    noisy = evaluate.randomization_test(model, ids, "gradient", mode="smooth_mprt", nr_samples=3, seed=5)
    assert not np.allclose(noisy[-1]["per_input"], smooth[-1]["per_input"])


# ------------------------------------------------------------------------------ region targets
MASK = np.zeros((8, 8), bool)
MASK[2:6, 1:5] = True


@pytest.fixture(scope="module")
def segmenter():
    """Per-pixel logits of 3 classes ``[B, 8, 8, 3]``, and images."""
    keras.utils.set_random_seed(14)
    inputs = keras.Input((8, 8, 3))
    hidden = keras.layers.Conv2D(6, 3, padding="same", activation="relu", name="hidden")(inputs)
    return keras.Model(inputs, keras.layers.Conv2D(3, 1, name="logits")(hidden)), RNG.random((B, 8, 8, 3)).astype(
        "float32"
    )


def region_twin(segmenter, mask):
    """A classifier whose logits ``[B, 3]`` are the segmenter's class logits averaged over ``mask``
    (the segmenter's own layers: the same re-initialised weights)."""
    inside, count = mask.astype("float32")[None, :, :, None], float(max(mask.sum(), 1))
    means = keras.layers.Lambda(lambda t: keras.ops.sum(t * inside, axis=(1, 2)) / count)(segmenter.outputs[0])
    return keras.Model(segmenter.inputs[0], means)


@pytest.mark.parametrize("mode", ["cascading", "smooth_mprt"])
def test_a_region_target_randomises_as_a_classifier_of_region_means(segmenter, mode):
    model, images = segmenter
    got = evaluate.randomization_test(
        model, images, "gradient", sk.targets.region(MASK, classes=1), mode=mode, **_options(mode)
    )
    want = evaluate.randomization_test(region_twin(model, MASK), images, "gradient", 1, mode=mode, **_options(mode))
    for step, other in zip(got, want, strict=True):
        for key in ("per_input", *SIMILARITIES):
            if key in step:
                _same(step[key], other[key])


def test_a_predicted_region_is_resolved_once_on_the_trained_model(segmenter):
    model, images = segmenter
    labels = np.argmax(model.predict(images, verbose=0), axis=-1)
    classes = [int(np.bincount(row.ravel(), minlength=3).argmax()) for row in labels]
    masks = [row == c for row, c in zip(labels, classes)]
    assert all(0 < m.sum() < m.size for m in masks)
    random_labels = np.argmax(_randomised(model, ["logits", "hidden"], 0).predict(images, verbose=0), axis=-1)
    assert not np.array_equal(random_labels, labels)  # re-resolving on a random copy would move the masks
    target = sk.targets.region("predicted", classes="top1")
    before = _weights(model)
    got = evaluate.randomization_test(model, images, "gradient", target, mode="efficient_mprt")[0]["per_input"]
    cascading = evaluate.randomization_test(model, images, "gradient", target)
    _unchanged(model, before)
    twins = [region_twin(model, mask) for mask in masks]

    def twin_steps(twin, image, b):
        return evaluate.randomization_test(twin, image, "gradient", classes[b], mode="efficient_mprt")[0]["per_input"][
            b
        ]

    _same(got, np.stack(_rows_of_twins(twins, images, twin_steps)))
    by_twin = [
        evaluate.randomization_test(twin, images[b : b + 1], "gradient", classes[b]) for b, twin in enumerate(twins)
    ]
    for i, step in enumerate(cascading):
        _same(step["spearman_abs"], np.mean([steps[i]["spearman_abs"] for steps in by_twin]))
    rows = evaluate.compare(model, images, ["gradient"], ["randomization"], targets=target)["rows"]
    _same(rows[0]["per_input"], got[:, 0])


def test_compare_randomises_the_parts_the_method_explained(image_meta):
    model, x, twins = image_meta
    rows = evaluate.compare(
        model,
        x,
        ["integrated_gradients"],
        ["randomization"],
        method_options={"integrated_gradients": {"attribute_to": "image", "steps": 8}},
    )["rows"]

    def twin_ratio(twin, image, b):
        steps = evaluate.randomization_test(twin, image, "integrated_gradients", mode="efficient_mprt", steps=8)
        return steps[0]["per_input"][b, 0]

    _same(rows[0]["per_input"], _rows_of_twins(twins, x[0], twin_ratio))


# ------------------------------------------------------------------------------ deletion / insertion
def test_deletion_of_one_image_of_several_as_a_twin_with_the_metadata_baked_in(image_meta):
    model, x, twins = image_meta
    expl = sk.explain(model, x, "gradient", "top2", attribute_to="image")
    options = {"steps": 4, "score": "logits", "blur_sigma": 1.0}
    got = evaluate.deletion_insertion(model, x, expl, **options)
    assert got["deletion_curve"].shape == (B, 2, 5)
    as_dict = evaluate.deletion_insertion(model, {"meta": x[1], "image": x[0]}, expl, batch_size=2, **options)

    def twin_curves(twin, image, b):
        rows = Explanation(
            attributions=np.repeat(expl.attributions[0][b : b + 1], B, axis=0),
            maps=np.repeat(expl.map_of("image")[b : b + 1], B, axis=0),
            targets=np.repeat(expl.targets[b : b + 1], B, axis=0),
            scores=None,
            method="gradient",
        )
        curves = evaluate.deletion_insertion(twin, image, rows, **options)
        return {name: value[b] for name, value in curves.items() if name != "fractions"}

    rows = _rows_of_twins(twins, x[0], twin_curves)
    for name in rows[0]:
        _same(got[name], np.stack([row[name] for row in rows]))
        _same(as_dict[name], got[name])
    # a unit target: every perturbed image scored with its input's metadata and the unit's payload
    unit = sk.targets.unit("conv", 1)
    by_unit = evaluate.deletion_insertion(
        model, x, sk.explain(model, x, "gradient", unit, attribute_to="image"), targets=unit, **options
    )
    twin_expl = sk.explain(twins[0], x[0], "gradient", unit)
    by_twin = evaluate.deletion_insertion(twins[0], x[0], twin_expl, targets=unit, **options)
    _same(by_unit["deletion_curve"], by_twin["deletion_curve"])  # the unit does not read the metadata


def test_deletion_refuses_several_parts_and_non_images(image_meta, tokens):
    model, x, _ = image_meta
    with pytest.raises(ValueError, match=r"several inputs \['image', 'meta'\].*attribute_to='image'"):
        evaluate.deletion_insertion(model, x, sk.explain(model, x, "gradient"), steps=2)
    with pytest.raises(ValueError, match=r"removes image pixels.*'meta'.*attribute_to="):
        evaluate.deletion_insertion(model, x, sk.explain(model, x, "gradient", attribute_to="meta"), steps=2)
    with pytest.raises(ValueError, match=r"inner layer.*attribute_to="):
        evaluate.deletion_insertion(model, x, sk.explain(model, x, "gradient", attribute_to="conv"), steps=2)
    token_model, ids = tokens
    with pytest.raises(ValueError, match=r"'token_ids' \(token ids in embedding space\).*attribute_to="):
        evaluate.deletion_insertion(token_model, ids, sk.explain(token_model, ids, "gradient"), steps=2)
