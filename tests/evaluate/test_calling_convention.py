"""Every declared metric, and the functions beside them, is called as the docs say:
``NAME(model, inputs, explanation_or_method, targets, ...)`` (the list generated from the
declarations); class names given with ``class_names=`` work in the metrics and in ``compare`` as
in ``sk.explain``."""

import keras
import numpy as np
import pytest

import saliency_kit as sk
from saliency_kit import evaluate

B = 2
NAMES = ["red", "green", "blue"]
#: cheap options, for 8 x 8 x 3 images (the metrics not listed run with their defaults)
CHEAP = {
    "faithfulness_correlation": {"nr_runs": 4, "subset_size": 20},
    "infidelity": {"perturb_patch_sizes": [4], "n_perturb_samples": 2},
    "road": {"percentages": [10, 50]},
    "monotonicity_correlation": {"nr_samples": 2, "features_in_step": 32},
    "region_perturbation": {"patch_size": 4, "regions_evaluation": 2},
    "pixel_flipping": {"features_in_step": 48},
    "deletion": {"steps": 2},
    "insertion": {"steps": 2},
    "max_sensitivity": {"nr_samples": 2},
    "avg_sensitivity": {"nr_samples": 2},
    "relative_input_stability": {"nr_samples": 2},
    "non_sensitivity": {"features_in_step": 48},
}


@pytest.fixture(scope="module")
def model():
    keras.utils.set_random_seed(5)
    inputs = keras.Input((8, 8, 3))
    hidden = keras.layers.Conv2D(4, 3, padding="same", activation="relu")(inputs)
    return keras.Model(inputs, keras.layers.Dense(3)(keras.layers.GlobalAveragePooling2D()(hidden)))


@pytest.fixture(scope="module")
def segmenter():
    keras.utils.set_random_seed(4)
    inputs = keras.Input((8, 8, 3))
    hidden = keras.layers.Conv2D(6, 3, padding="same", activation="relu")(inputs)
    return keras.Model(inputs, keras.layers.Conv2D(3, 1)(hidden))


@pytest.fixture(scope="module")
def x():
    return np.random.default_rng(2).random((B, 8, 8, 3)).astype(np.float32)


MASKS = np.zeros((B, 8, 8), bool)
MASKS[:, 2:6, 3:7] = True


def _score(value):
    return np.asarray(value["score"] if isinstance(value, dict) else value, dtype=np.float64)


@pytest.mark.parametrize("declared", evaluate.metrics(), ids=lambda m: m.name)
def test_every_declared_metric_takes_the_common_signature(model, x, declared):
    extra = {"masks": MASKS} if declared.needs_masks else {}
    function = getattr(evaluate, declared.function.__name__)
    got = _score(function(model, x, "gradient", "top1", seed=0, batch_size=8, **extra, **CHEAP.get(declared.name, {})))
    assert got.shape == (B, 1)


def test_the_functions_beside_the_metrics_take_it_too(model, x):
    expl = sk.explain(model, x, "gradient", "top1")
    curves = evaluate.deletion_insertion(model, x, "gradient", "top1", steps=2, seed=0, batch_size=8)
    assert curves["deletion_auc"].shape == (B, 1)
    by_expl = evaluate.deletion_insertion(model, x, expl, "top1", steps=2)
    np.testing.assert_allclose(by_expl["deletion_auc"], curves["deletion_auc"])
    np.testing.assert_allclose(evaluate.deletion_auc(model, x, expl, "top1", steps=2), curves["deletion_auc"])
    hits = evaluate.pointing_game(model, x, "gradient", "top1", masks=MASKS)
    assert hits.dtype == bool and hits.shape == (B, 1)
    np.testing.assert_array_equal(evaluate.pointing_game(model, x, expl, "top1", masks=MASKS), hits)
    np.testing.assert_array_equal(evaluate.pointing_game(expl, MASKS), hits)  # maps first, as before
    np.testing.assert_array_equal(evaluate.pointing_game(maps=expl.maps, masks=MASKS), hits)
    steps = evaluate.randomization_test(model, x, "gradient", "top1", mode="efficient_mprt")
    again = evaluate.randomization_test(model, x, expl, "top1", mode="efficient_mprt")  # its method run again
    assert [step["layer"] for step in again] == [step["layer"] for step in steps]
    np.testing.assert_allclose(again[-1]["per_input"], steps[-1]["per_input"])
    cascading = evaluate.randomization_test(model, x, expl, mode="cascading")
    np.testing.assert_allclose(
        [step["spearman"] for step in cascading],
        [step["spearman"] for step in evaluate.randomization_test(model, x, "gradient", mode="cascading")],
    )
    np.testing.assert_allclose(evaluate.randomization_score(model, x, "gradient", "top1"), steps[-1]["per_input"])


def test_class_names_in_the_metrics(model, x):
    by_index = evaluate.pixel_flipping(model, x, "gradient", 1, features_in_step=48)["score"]
    by_name = evaluate.pixel_flipping(model, x, "gradient", "green", class_names=NAMES, features_in_step=48)
    np.testing.assert_array_equal(by_name["score"], by_index)
    np.testing.assert_array_equal(
        evaluate.completeness(model, x, "gradient", "green", class_names=NAMES),
        evaluate.completeness(model, x, "gradient", 1),
    )
    curves = evaluate.deletion_insertion(model, x, "gradient", "green", class_names=NAMES, steps=2)
    np.testing.assert_allclose(curves["deletion_auc"], evaluate.deletion_auc(model, x, "gradient", 1, steps=2))


def test_a_region_of_a_named_class_in_the_metrics_and_compare(segmenter, x):
    mask = np.zeros((8, 8), bool)
    mask[2:6, 2:6] = True
    named, indexed = sk.targets.region(mask, classes="green"), sk.targets.region(mask, classes=1)
    expl = sk.explain(segmenter, x, "gradient", named, class_names=NAMES)
    np.testing.assert_array_equal(expl.attributions, sk.explain(segmenter, x, "gradient", indexed).attributions)
    want = evaluate.pixel_flipping(segmenter, x, "gradient", indexed, features_in_step=48)["score"]
    got = evaluate.pixel_flipping(segmenter, x, "gradient", named, class_names=NAMES, features_in_step=48)["score"]
    np.testing.assert_array_equal(got, want)
    scored = evaluate.pixel_flipping(segmenter, x, expl, named, class_names=NAMES, features_in_step=48)["score"]
    np.testing.assert_array_equal(scored, want)
    np.testing.assert_array_equal(
        evaluate.relevance_mass_accuracy(segmenter, x, "gradient", named, class_names=NAMES, masks=named),
        evaluate.relevance_mass_accuracy(segmenter, x, "gradient", indexed, masks=indexed),
    )
    np.testing.assert_allclose(
        evaluate.deletion_auc(segmenter, x, expl, named, class_names=NAMES, steps=2),
        evaluate.deletion_auc(segmenter, x, "gradient", indexed, steps=2),
    )
    metrics = ["pixel_flipping", "completeness", "insertion"]
    settings = dict(metric_options={"pixel_flipping": {"features_in_step": 48}, "insertion": {"steps": 2}})
    table = evaluate.compare(segmenter, x, ["gradient"], metrics, targets=named, class_names=NAMES, **settings)
    plain = evaluate.compare(segmenter, x, ["gradient"], metrics, targets=indexed, **settings)
    assert [row["per_input"] for row in table["rows"]] == [row["per_input"] for row in plain["rows"]]
