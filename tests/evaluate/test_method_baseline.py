"""A metric given a method that starts from a baseline (integrated gradients, DeepLIFT, guided IG,
conductance) measures completeness and non-sensitivity from that method's own baseline unless
``perturb_baseline=`` says otherwise; checked against the method's own completeness gap and
against NumPy."""

import keras
import numpy as np
import pytest

import saliency_kit as sk
from saliency_kit import evaluate

B = 3


@pytest.fixture(scope="module")
def bright():
    """A small CNN and images in [0.3, 1]: each image's minimum is far from the zeros IG starts at."""
    keras.utils.set_random_seed(7)
    inputs = keras.Input((8, 8, 3))
    hidden = keras.layers.Conv2D(4, 3, padding="same", activation="relu")(inputs)
    pooled = keras.layers.GlobalAveragePooling2D()(hidden)
    model = keras.Model(inputs, keras.layers.Dense(3)(pooled))
    x = np.random.default_rng(3).uniform(0.3, 1.0, (B, 8, 8, 3)).astype("float32")
    return model, x


def _logit(model, batch, column):
    return np.asarray(model.predict(batch, verbose=0), dtype=np.float64)[np.arange(len(batch)), column]


@pytest.mark.parametrize("method", ["integrated_gradients", "deeplift"])
def test_a_method_is_scored_from_its_own_baseline(bright, method):
    model, x = bright
    expl = sk.explain(model, x, method)
    own_gap = np.abs(np.asarray(expl.completeness_gap, dtype=np.float64))  # [B, K]
    np.testing.assert_allclose(evaluate.completeness(model, x, method), own_gap, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(evaluate.completeness(model, x, expl), own_gap, rtol=1e-4, atol=1e-4)
    # the image's minimum ("black") is another baseline: the gap it reports is not the method's
    black = evaluate.completeness(model, x, method, perturb_baseline="black")
    column = np.asarray(expl.targets)[:, 0]
    floor = np.broadcast_to(x.min(axis=(1, 2, 3), keepdims=True), x.shape)
    change = _logit(model, x, column) - _logit(model, floor, column)
    want = np.abs(expl.attributions[:, 0].reshape(B, -1).sum(-1) - change)
    np.testing.assert_allclose(black[:, 0], want, rtol=1e-4, atol=1e-4)
    assert np.all(black[:, 0] > own_gap[:, 0] + 0.01)


def test_a_given_baseline_is_the_methods_and_the_metrics(bright):
    model, x = bright
    expl = sk.explain(model, x, "integrated_gradients", baseline=0.5, steps=64)
    own_gap = np.abs(np.asarray(expl.completeness_gap, dtype=np.float64))
    got = evaluate.completeness(model, x, "integrated_gradients", baseline=0.5, steps=64)
    np.testing.assert_allclose(got, own_gap, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(evaluate.completeness(model, x, expl), own_gap, rtol=1e-4, atol=1e-4)
    # perturb_baseline= given wins over the method's baseline
    column = np.asarray(expl.targets)[:, 0]
    change = _logit(model, x, column) - _logit(model, np.zeros_like(x), column)
    want = np.abs(expl.attributions[:, 0].reshape(B, -1).sum(-1) - change)
    np.testing.assert_allclose(evaluate.completeness(model, x, expl, perturb_baseline=0.0)[:, 0], want, atol=1e-4)


def test_a_method_without_a_baseline_keeps_the_metrics_default(bright):
    model, x = bright
    expl = sk.explain(model, x, "gradient")
    column = np.asarray(expl.targets)[:, 0]
    floor = np.broadcast_to(x.min(axis=(1, 2, 3), keepdims=True), x.shape)
    change = _logit(model, x, column) - _logit(model, floor, column)
    want = np.abs(expl.attributions[:, 0].reshape(B, -1).sum(-1) - change)
    np.testing.assert_allclose(evaluate.completeness(model, x, "gradient")[:, 0], want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(evaluate.completeness(model, x, expl.attributions, expl.targets)[:, 0], want, atol=1e-4)


def test_non_sensitivity_replaces_features_by_the_methods_baseline(bright):
    """An input equal to IG's baseline image has no attribution anywhere, and replacing any of its
    features by that baseline changes nothing: no violation, feature by feature. The image's
    minimum ("black") changes the score where IG gives nothing."""
    model, x = bright
    start = x[0]
    given = np.stack([start, x[1]])
    options = dict(baseline=start, steps=8, features_in_step=16, eps=1e-4)
    own = evaluate.non_sensitivity(model, given, "integrated_gradients", **options)
    assert own[0, 0] == 0
    black = evaluate.non_sensitivity(model, given, "integrated_gradients", perturb_baseline="black", **options)
    assert black[0, 0] > 0
    expl = sk.explain(model, given, "integrated_gradients", baseline=start, steps=8)
    np.testing.assert_array_equal(evaluate.non_sensitivity(model, given, expl, features_in_step=16, eps=1e-4), own)
