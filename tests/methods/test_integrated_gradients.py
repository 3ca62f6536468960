"""Integrated gradients: closed forms on a linear model, quadrature rules, completeness on a CNN
whose score at the baseline is not zero (so a forgotten − s(baseline) fails), bad baselines."""

import keras
import numpy as np
import pytest

import saliency_kit as sk
from saliency_kit.methods.integrated_gradients import RULES, quadrature


@pytest.mark.parametrize("rule", RULES)
def test_integrated_gradients_of_a_linear_model_is_w_times_x(linear_image, rule):
    model, x, w = linear_image
    expl = sk.explain(model, x, "integrated_gradients", 1, steps=7, rule=rule)
    np.testing.assert_allclose(expl.attributions[:, 0], x * w[1], atol=1e-5)
    np.testing.assert_allclose(expl.completeness_gap, 0.0, atol=1e-4)


def test_integrated_gradients_from_a_baseline(linear_image):
    model, x, w = linear_image
    baseline = np.linspace(-1, 1, 2, dtype="float32")  # one value per channel, broadcast
    expl = sk.explain(model, x, "integrated_gradients", 0, steps=4, baseline=baseline, batch_size=5)
    np.testing.assert_allclose(expl.attributions[:, 0], (x - baseline) * w[0], atol=1e-5)
    with pytest.raises(ValueError, match="broadcastable"):
        sk.explain(model, x, "integrated_gradients", 0, baseline=np.zeros(3))


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("steps", [2, 5, 16])
def test_quadrature_points_and_weights(rule, steps):
    alphas, weights = quadrature(rule, steps)
    assert len(alphas) == len(weights) == steps
    assert np.all((alphas >= 0) & (alphas <= 1))
    np.testing.assert_allclose(weights.sum(), 1.0, atol=1e-12)
    if rule == "gausslegendre":  # exact for polynomials of degree 2n−1: ∫₀¹ t^(2n−1) dt
        np.testing.assert_allclose((weights * alphas ** (2 * steps - 1)).sum(), 1 / (2 * steps), rtol=1e-10)
    if rule == "riemann_trapezoid":
        assert alphas[0] == 0 and alphas[-1] == 1


# -- integrated-gradients completeness on a small CNN --------------------------------------------
def test_integrated_gradients_completeness_on_a_cnn():
    keras.utils.set_random_seed(9)
    # non-zero biases: the scores at the zero baseline are not zero
    init = {"kernel_initializer": "he_normal", "bias_initializer": keras.initializers.RandomUniform(0.05, 0.3)}
    model = keras.Sequential(
        [
            keras.Input((12, 12, 3)),
            keras.layers.Conv2D(8, 3, activation="relu", **init),
            keras.layers.MaxPooling2D(),
            keras.layers.Conv2D(8, 3, activation="relu", **init),
            keras.layers.Flatten(),
            keras.layers.Dense(16, activation="relu", **init),
            keras.layers.Dense(3, activation="softmax", **init),
        ]
    )
    x = np.random.default_rng(6).uniform(0, 1, size=(2, 12, 12, 3)).astype("float32")
    targets = [[0, 1]] * 2
    expl = sk.explain(model, x, "integrated_gradients", targets, steps=256, batch_size=128)
    at_baseline = sk.engine.forward_scores(model, np.zeros_like(x), expl.targets)
    change = expl.scores - at_baseline
    assert np.all(np.abs(at_baseline) > 0.01), at_baseline
    assert np.all(np.abs(change) > 0.05), change
    assert np.all(np.abs(expl.completeness_gap) <= 0.01 * np.abs(change)), (expl.completeness_gap, change)
    total = expl.attributions.reshape(2, 2, -1).sum(-1)
    np.testing.assert_allclose(total - change, expl.completeness_gap, atol=1e-4)
    # the gap is a quadrature error: with 4 steps it is visibly larger
    rough = sk.explain(model, x, "integrated_gradients", targets, steps=4)
    assert np.abs(rough.completeness_gap).max() > np.abs(expl.completeness_gap).max()


@pytest.fixture(scope="module")
def biased_linear():
    """s(x) = w·x + b with b ≠ 0: the score at the zero baseline is b, not 0."""
    inputs = keras.Input((4,))
    model = keras.Model(inputs, keras.layers.Dense(2, name="dense")(inputs))
    w = np.array([[1.0, -2.0], [0.5, 1.0], [-1.5, 0.25], [2.0, 3.0]], "float32")
    b = np.array([0.75, -1.25], "float32")
    model.get_layer("dense").set_weights([w, b])
    x = np.array([[1.0, 2.0, -1.0, 0.5], [0.0, -1.0, 2.0, 1.0]], "float32")
    return model, x, w, b


@pytest.mark.parametrize("rule", RULES)
def test_completeness_gap_subtracts_the_score_at_the_baseline(biased_linear, rule):
    """Σ a = s(x) − s(x′) exactly for a linear score; s(x′) = w·x′ + b ≠ 0 here, so a gap that
    forgot − s(x′) would be −s(x′), not 0."""
    model, x, w, b = biased_linear
    baseline = np.array([0.5, -0.5, 1.0, 0.0], "float32")
    expl = sk.explain(model, x, "integrated_gradients", [[0, 1]] * 2, steps=3, baseline=baseline, rule=rule)
    np.testing.assert_allclose(expl.attributions, (x - baseline)[:, None] * w.T[None], atol=1e-5)
    np.testing.assert_allclose(expl.scores, x @ w + b, atol=1e-5)
    at_baseline = baseline @ w + b
    assert np.all(np.abs(at_baseline) >= 0.5)
    np.testing.assert_allclose(expl.attributions.sum(-1), expl.scores - at_baseline, atol=1e-5)
    np.testing.assert_allclose(expl.completeness_gap, 0.0, atol=1e-5)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_non_finite_baseline_is_a_value_error(biased_linear, bad):
    model, x, _, _ = biased_linear
    calls = sk.engine.call_count()
    with pytest.raises(ValueError, match="baseline must be finite"):
        sk.explain(model, x, "integrated_gradients", 0, baseline=bad)
    with pytest.raises(ValueError, match="baseline must be finite"):
        sk.explain(model, x, "integrated_gradients", 0, baseline=np.array([0.0, bad, 0.0, 0.0]))
    assert sk.engine.call_count() == calls
