"""Guided IG against PAIR's ``saliency.core.GuidedIG`` and its integrated-gradients limit."""

import keras
import numpy as np
import pytest
import saliency.core as saliency_core
from methods.pair_reference import pair_gradients

import saliency_kit as sk


def tiny_model(dtype="float64"):
    inputs = keras.Input((8, 8, 2), dtype=dtype)
    h = keras.layers.Conv2D(4, 3, padding="same", activation="tanh", dtype=dtype)(inputs)
    h = keras.layers.Flatten(dtype=dtype)(h)
    return keras.Model(inputs, keras.layers.Dense(3, dtype=dtype)(h))


class _NumpyWithOldQuantile:
    """PAIR's guided_ig calls ``np.quantile(..., interpolation=...)``, a keyword NumPy 2.x
    removed; its module gets this stand-in that renames it to ``method=``."""

    def __getattr__(self, name):
        return getattr(np, name)

    @staticmethod
    def quantile(a, q, interpolation="linear", **kwargs):
        return np.quantile(a, q, method=interpolation, **kwargs)


def pair_guided_ig(model, x, cls, baseline, **kwargs):
    import saliency.core.guided_ig as module

    original, module.np = module.np, _NumpyWithOldQuantile()
    try:
        return saliency_core.GuidedIG().GetMask(x, pair_gradients(model, cls), x_baseline=baseline, **kwargs)
    finally:
        module.np = original


@pytest.mark.parametrize("fraction, max_dist", [(0.25, 0.02), (0.1, 0.3), (0.5, 1.0)])
def test_matches_pair_guided_ig(fraction, max_dist):
    model = tiny_model()
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 1, (2, 8, 8, 2))
    baseline = np.zeros((8, 8, 2))
    baseline[:2] = x[0, :2]  # some features equal to the baseline: they never move
    targets = np.array([[0, 2], [1, 0]])
    got = sk.explain(
        model,
        x,
        "guided_ig",
        targets=targets,
        steps=12,
        baseline=baseline,
        fraction=fraction,
        max_dist=max_dist,
        batch_size=3,
    )
    for b in range(2):
        for k in range(2):
            expected = pair_guided_ig(
                model, x[b], targets[b, k], baseline, x_steps=12, fraction=fraction, max_dist=max_dist
            )
            np.testing.assert_allclose(got.attributions[b, k], expected, rtol=1e-4, atol=1e-6 * np.abs(expected).max())


def test_max_dist_zero_is_left_riemann_integrated_gradients():
    model = tiny_model()
    x = np.random.default_rng(1).uniform(0, 1, (1, 8, 8, 2))
    got = sk.explain(model, x, "guided_ig", targets=1, steps=10, max_dist=0.0)
    ig = sk.explain(model, x, "integrated_gradients", targets=1, steps=10, rule="riemann_left")
    np.testing.assert_allclose(got.attributions, ig.attributions, rtol=1e-5, atol=1e-9)


def test_completeness_and_batch_size_invariance():
    model = tiny_model("float32")
    x = np.random.default_rng(2).uniform(0, 1, (3, 8, 8, 2)).astype("float32")
    a = sk.explain(model, x, "guided_ig", targets="top2", steps=8, batch_size=1)
    b = sk.explain(model, x, "guided_ig", targets="top2", steps=8, batch_size=64)
    np.testing.assert_allclose(a.attributions, b.attributions, rtol=1e-4, atol=1e-6)
    # the path ends at the input: attributions sum to about s(x) − s(x′)
    change = a.scores - model(np.zeros((1, 8, 8, 2), "float32")).numpy()[0][a.targets]
    gap = a.attributions.reshape(3, 2, -1).sum(-1) - change
    assert np.abs(gap).max() < 0.1 * np.abs(change).max()


def test_refusals():
    model = tiny_model("float32")
    x = np.zeros((1, 8, 8, 2), "float32")
    with pytest.raises(ValueError, match=r"fraction must be a number in \(0, 1\]; received 0"):
        sk.explain(model, x, "guided_ig", targets=0, fraction=0)
    with pytest.raises(ValueError, match="baseline must be a number or an array broadcastable"):
        sk.explain(model, x, "guided_ig", targets=0, baseline=np.zeros(5))
