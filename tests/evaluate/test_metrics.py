"""sk.evaluate's metrics: closed forms, and the properties every metric must have (seeded, per
input, independent of batch_size and of the other inputs in the batch)."""

import keras
import numpy as np
import pytest
from method_support import CHEAP_METRICS, SMALL

from saliency_kit import evaluate
from saliency_kit.evaluate import explained, scoring


@pytest.fixture(scope="module")
def model():
    keras.utils.set_random_seed(11)
    return keras.Sequential(
        [
            keras.Input((8, 8, 3)),
            keras.layers.Conv2D(4, 3, padding="same", activation="relu"),
            keras.layers.GlobalAveragePooling2D(),
            keras.layers.Dense(5),
        ]
    )


@pytest.fixture(scope="module")
def x():
    return np.random.default_rng(5).random((4, 8, 8, 3)).astype(np.float32)


@pytest.fixture(scope="module")
def masks():
    s = np.zeros((4, 8, 8), dtype=bool)
    s[:, 2:5, 3:7] = True
    s[1, :, :2] = True
    return s


# cheap options for each model-based metric
CHEAP = CHEAP_METRICS


def _score(value):
    return value["score"] if isinstance(value, dict) else value


@pytest.mark.parametrize("name", sorted(CHEAP))
def test_seeded_per_input_and_independent_of_batch_size(model, x, name):
    metric = getattr(evaluate, name)
    method = "smoothgrad" if name == "max_sensitivity" else "gradient"  # a noisy method re-run on copies
    options = dict(CHEAP[name], **({"samples": SMALL["smoothgrad"]["samples"]} if method == "smoothgrad" else {}))
    full = _score(metric(model, x, method, "top2", batch_size=32, **options))
    assert full.shape == (4, 2) and full.dtype == np.float64
    np.testing.assert_allclose(
        _score(metric(model, x, method, "top2", batch_size=3, **options)), full, rtol=1e-5, atol=1e-6, equal_nan=True
    )
    # an input's score does not depend on the other inputs of the batch (per-input seeds and normalisation)
    np.testing.assert_allclose(
        _score(metric(model, x[:2], method, "top2", batch_size=5, **options)),
        full[:2],
        rtol=1e-5,
        atol=1e-6,
        equal_nan=True,
    )


@pytest.mark.parametrize(
    "name",
    ["faithfulness_correlation", "max_sensitivity", "monotonicity_correlation", "region_perturbation", "random_logit"],
)
def test_the_seed_is_the_only_randomness(model, x, name):
    metric = getattr(evaluate, name)
    one = _score(metric(model, x, "gradient", seed=1, **CHEAP[name]))
    np.testing.assert_array_equal(_score(metric(model, x, "gradient", seed=1, **CHEAP[name])), one)
    assert not np.allclose(_score(metric(model, x, "gradient", seed=2, **CHEAP[name])), one)


def test_an_explanation_is_scored_as_it_is(model, x):
    import saliency_kit as sk

    expl = sk.explain(model, x, "integrated_gradients", "top1", steps=16)
    np.testing.assert_allclose(
        evaluate.faithfulness_correlation(model, x, expl, **CHEAP["faithfulness_correlation"]),
        evaluate.faithfulness_correlation(
            model, x, expl.attributions, expl.targets, **CHEAP["faithfulness_correlation"]
        ),
    )


def test_an_explanation_is_re_run_with_the_options_it_was_made_with(model, x):
    """A robustness metric re-runs an Explanation's method as it was run: occlusion's window,
    stride and value, not what it recorded of its own (the count of its windows)."""
    import saliency_kit as sk

    options = {"window": (4, 4, 3), "stride": (2, 2, 3), "value": 0.5}
    expl = sk.explain(model, x, "occlusion", "top1", **options)
    assert "windows" in expl.options
    given = evaluate.max_sensitivity(model, x, expl, nr_samples=3)
    named = evaluate.max_sensitivity(model, x, "occlusion", expl.targets, nr_samples=3, **options)
    np.testing.assert_allclose(given, named, rtol=1e-6)
    default = evaluate.max_sensitivity(model, x, "occlusion", expl.targets, nr_samples=3)
    assert not np.allclose(given, default)  # the options matter here: dropping them would show


# ------------------------------------------------------------------------------ closed forms
def test_sparseness_of_one_hot_is_maximal_and_of_a_constant_map_zero():
    n = 64
    one_hot = np.zeros((2, 8, 8))
    one_hot[0, 3, 4] = 5.0
    one_hot[1, 0, 0] = -1.0
    np.testing.assert_allclose(evaluate.sparseness(maps=one_hot)[:, 0], (n - 1) / n, rtol=1e-5)
    np.testing.assert_allclose(evaluate.sparseness(maps=np.full((2, 8, 8), 3.0)), 0.0, atol=1e-12)
    other = np.random.default_rng(0).random((50, 8, 8))  # every other map is less sparse
    assert (evaluate.sparseness(maps=other) < (n - 1) / n).all()


def test_complexity_closed_forms():
    n = 64
    one_hot = np.zeros((1, 8, 8))
    one_hot[0, 1, 1] = 2.0
    assert evaluate.complexity(maps=one_hot)[0, 0] == pytest.approx(0.0, abs=1e-9)
    assert evaluate.complexity(maps=np.ones((1, 8, 8)))[0, 0] == pytest.approx(np.log(n), rel=1e-9)
    half = np.zeros((1, 8, 8))
    half[0, :4] = 1.0
    assert evaluate.effective_complexity(maps=half)[0, 0] == 32


def test_completeness_of_integrated_gradients_has_a_tiny_gap(model, x):
    import saliency_kit as sk

    expl = sk.explain(model, x, "integrated_gradients", "top2", steps=256)
    gap = evaluate.completeness(model, x, expl, perturb_baseline=0.0)  # IG's default baseline: zeros
    change = np.abs(
        expl.scores
        - scoring.forward(
            explained.prepare(model, np.zeros_like(x), expl.attributions, expl.targets),
            np.zeros_like(x),
            np.arange(len(x)),
        )
    )
    assert (gap < 1e-2 * change + 1e-5).all()
    np.testing.assert_allclose(gap, np.abs(expl.completeness_gap), rtol=1e-3, atol=1e-5)
    # the plain gradient does not add up to the score
    assert (evaluate.completeness(model, x, "gradient", "top2", perturb_baseline=0.0) > 10 * gap).any()


def test_completeness_of_gradient_x_input_on_a_linear_model_is_exact():
    linear = keras.Sequential([keras.Input((5,)), keras.layers.Dense(3)])
    x = np.random.default_rng(2).normal(size=(6, 5)).astype(np.float32)
    np.testing.assert_allclose(
        evaluate.completeness(linear, x, "gradient_x_input", "top1", perturb_baseline=0.0), 0.0, atol=1e-5
    )


def test_random_logit_of_a_random_map_is_at_chance(model):
    x = np.random.default_rng(9).random((6, 16, 16, 3)).astype(np.float32)
    big = keras.Sequential([keras.Input((16, 16, 3)), keras.layers.Flatten(), keras.layers.Dense(5)])
    similarity = evaluate.random_logit(big, x, "random")
    assert abs(similarity.mean()) < 0.05  # two independent random maps: SSIM ~ 0
    gradient = evaluate.random_logit(big, x, "gradient")
    assert np.isfinite(gradient).all()
    del model


def test_localisation_of_the_mask_itself(masks):
    maps = masks.astype(float)[:, None] + 0.01 * np.random.default_rng(0).random((4, 1, 8, 8))
    np.testing.assert_allclose(evaluate.relevance_rank_accuracy(maps=maps, masks=masks), 1.0)
    np.testing.assert_allclose(evaluate.auc(maps=maps, masks=masks), 1.0)
    np.testing.assert_allclose(evaluate.auc(maps=-maps, masks=masks), 0.0)
    np.testing.assert_allclose(evaluate.top_k_intersection(maps=maps, masks=masks, k=5), 1.0)
    assert (evaluate.relevance_mass_accuracy(maps=maps, masks=masks) > 0.95).all()
    empty = masks.copy()
    empty[0] = False
    assert np.isnan(evaluate.auc(maps=maps, masks=empty)[0, 0])
    with pytest.raises(TypeError, match="boolean"):
        evaluate.auc(maps=maps, masks=masks.astype(int))
    with pytest.raises(ValueError, match="masks must be bool"):
        evaluate.auc(maps=maps, masks=masks[:, :4])


def test_road_works_on_three_channels(model, x):
    result = evaluate.road(model, x, "gradient", "top1", percentages=[20, 60])
    assert result["curve"].shape == (4, 1, 2) and set(np.unique(result["curve"])) <= {0.0, 1.0}


def test_robustness_re_runs_the_explainer_in_one_batched_call(model, x, monkeypatch):
    import saliency_kit.pipeline.api as api

    calls = []
    real = api.explain

    def counting(model_, inputs, *args, **kwargs):
        calls.append(len(inputs))
        return real(model_, inputs, *args, **kwargs)

    monkeypatch.setattr(api, "explain", counting)
    evaluate.max_sensitivity(model, x, "gradient", nr_samples=6)
    assert calls == [4, 4 * 6]  # the clean inputs, then every copy of every input at once


def test_clear_errors(model, x, masks):
    with pytest.raises(ValueError, match="subset_size"):
        evaluate.faithfulness_correlation(model, x, "gradient", subset_size=10_000)
    with pytest.raises(ValueError, match="re-runs the explainer"):
        evaluate.max_sensitivity(model, x, np.zeros((4, 1, 8, 8, 3)), "top1", nr_samples=2)
    tabular = keras.Sequential([keras.Input((5,)), keras.layers.Dense(3)])
    with pytest.raises(ValueError, match="image inputs"):
        evaluate.infidelity(tabular, np.zeros((2, 5), np.float32), "gradient")
    with pytest.raises(TypeError, match="nr_runs"):
        evaluate.faithfulness_correlation(model, x, "gradient", nr_runs=2.5)
    with pytest.raises(ValueError, match="order"):
        evaluate.region_perturbation(model, x, "gradient", order="best")
    with pytest.raises(ValueError, match="attribution array"):
        evaluate.faithfulness_correlation(model, x, np.zeros((4, 8, 8)), "top1")
    with pytest.raises(ValueError, match="needs masks"):
        evaluate.compare(model, x, ["gradient"], ["auc"])
    with pytest.raises(ValueError, match="unknown metric"):
        evaluate.compare(model, x, ["gradient"], ["accuracy"])


def test_compare_always_has_the_random_row(model, x, masks):
    table = evaluate.compare(
        model,
        x,
        ["gradient", "integrated_gradients"],
        ["sparseness", "auc", "faithfulness_correlation"],
        masks=masks,
        metric_options={"faithfulness_correlation": CHEAP["faithfulness_correlation"]},
        method_options={"integrated_gradients": {"steps": 8}},
    )
    rows = table["rows"]
    assert {(r["method"], r["metric"]) for r in rows} == {
        (m, n)
        for m in ("gradient", "integrated_gradients", "random")
        for n in ("sparseness", "auc", "faithfulness_correlation")
    }
    for row in rows:
        assert len(row["per_input"]) == 4
        assert row["mean"] == pytest.approx(np.nanmean(row["per_input"]))
    random_auc = next(r for r in rows if r["method"] == "random" and r["metric"] == "auc")
    assert abs(random_auc["mean"] - 0.5) < 0.2
    again = evaluate.compare(model, x, ["gradient"], ["sparseness"])["rows"]
    assert again == [r for r in evaluate.compare(model, x, ["gradient"], ["sparseness"])["rows"]]


def test_compare_collects_the_rows_of_iter_compare_and_reports_each_cell(model, x):
    cells = []
    table = evaluate.compare(model, x, ["gradient"], ["sparseness"], seed=3, progress=lambda *cell: cells.append(cell))
    assert table["rows"] == list(evaluate.iter_compare(model, x, ["gradient"], ["sparseness"], seed=3))
    assert cells == [("gradient", "sparseness"), ("random", "sparseness")]
    with pytest.raises(TypeError, match="metric_option"):
        evaluate.compare(model, x, ["gradient"], ["sparseness"], metric_option={})


def test_random_logit_asks_the_target_for_other_classes(model, x):
    """A score function's columns are its outputs, not classes: refused, even with num_classes."""
    with pytest.raises(ValueError, match="not a score function"):
        evaluate.random_logit(model, x, "gradient", lambda values: values[:, 0], num_classes=5)


def test_compare_scores_the_deletion_and_insertion_curves(model, x):
    rows = evaluate.compare(
        model,
        x,
        ["gradient"],
        ["deletion", "insertion"],
        metric_options={"deletion": {"steps": 4}, "insertion": {"steps": 4}},
    )["rows"]
    assert {(r["method"], r["metric"]) for r in rows} == {
        (m, n) for m in ("gradient", "random") for n in ("deletion", "insertion")
    }
    assert all(len(r["per_input"]) == 4 and np.isfinite(r["per_input"]).all() for r in rows)


# ---------------------------------------------------------------------------- target objects
# (the segmenter: conftest.py)
def test_pointing_game_and_deletion_take_a_region_target(segmenter, x):
    import saliency_kit as sk

    mask = np.zeros((8, 8), dtype=bool)
    mask[2:6, 1:5] = True
    region = sk.targets.region(mask, classes=1)
    expl = sk.explain(segmenter, x, "gradient", region)
    # the region's own mask is the object
    np.testing.assert_array_equal(
        evaluate.pointing_game(expl, region), evaluate.pointing_game(expl, np.broadcast_to(mask, (4, 8, 8)))
    )
    curves = evaluate.deletion_insertion(segmenter, x, expl, targets=region, steps=4, score="logits")

    # by hand: the region's mean logit of class 1, at the input and at the all-zero image
    def region_score(images):
        return segmenter.predict(images, verbose=0)[..., 1][:, mask].mean(axis=-1)

    np.testing.assert_allclose(curves["deletion_curve"][:, 0, 0], region_score(x), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(curves["deletion_curve"][:, 0, -1], region_score(np.zeros_like(x)), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(curves["insertion_curve"][:, 0, -1], region_score(x), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="predicted"):
        evaluate.pointing_game(expl, sk.targets.region("predicted", classes=1))


def test_quantus_randomisation_modes(model, x):
    cascading = evaluate.randomization_test(model, x[:2], "gradient", mode="cascading")
    top_down = [step["layer"] for step in cascading]
    mprt = evaluate.randomization_test(model, x[:2], "gradient", mode="mprt")
    assert [step["layer"] for step in mprt] == top_down  # Quantus' MPRT: from the output down
    for step in mprt:
        assert step["per_input"].shape == (2, 1) and -1 <= step["similarity"] <= 1
        assert step["similarity"] == pytest.approx(np.nanmean(step["per_input"]))
    # the output layer alone changes the gradient less than every layer random
    assert mprt[0]["similarity"] > mprt[-1]["similarity"]
    smooth = evaluate.randomization_test(model, x[:2], "gradient", mode="smooth_mprt", nr_samples=4)
    assert [step["layer"] for step in smooth] == top_down[::-1]  # SmoothMPRT: from the input up
    efficient = evaluate.randomization_test(model, x[:2], "gradient", mode="efficient_mprt")
    assert len(efficient) == 1 and efficient[0]["randomized"] == top_down[::-1]
    np.testing.assert_allclose(
        efficient[0]["per_input"], efficient[0]["complexity_randomized"] / efficient[0]["complexity_original"]
    )
    with pytest.raises(ValueError, match="mode must be one of"):
        evaluate.randomization_test(model, x[:2], "gradient", mode="shuffled")


def test_the_declared_wrappers_take_the_common_signature(model, x, masks):
    """deletion, insertion, pointing_game and randomization are metrics of the common signature:
    a method name is explained, an Explanation scored as it is, bare maps taken where model-free."""
    import saliency_kit as sk

    expl = sk.explain(model, x, "gradient")
    curves = evaluate.deletion_insertion(model, x, expl, steps=4)
    np.testing.assert_allclose(evaluate.deletion_auc(model, x, "gradient", steps=4), curves["deletion_auc"])
    np.testing.assert_allclose(evaluate.insertion_auc(model, x, expl, steps=4), curves["insertion_auc"])
    hits = evaluate.pointing_game(expl, masks).astype(np.float64)
    np.testing.assert_array_equal(evaluate.pointing_game(model, x, "gradient", masks=masks), hits)
    np.testing.assert_array_equal(evaluate.pointing_game(maps=expl.maps, masks=masks), hits)
    per_input = evaluate.randomization_test(model, x, "gradient", mode="efficient_mprt")[-1]["per_input"]
    np.testing.assert_allclose(evaluate.randomization_score(model, x, expl), per_input)
    with pytest.raises(TypeError, match="no option"):
        evaluate.deletion_auc(model, x, expl, step=4)
