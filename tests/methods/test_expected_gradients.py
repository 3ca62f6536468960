"""Expected gradients (GradientSHAP): a hand-written reference, the IG limit, seeds and batch sizes."""

import numpy as np
import pytest
from method_support import uniform_draws

import saliency_kit as sk

keras = pytest.importorskip("keras")
tf = pytest.importorskip("tensorflow")


def tiny_model(dtype="float32"):
    inputs = keras.Input((6, 6, 2), dtype=dtype)
    h = keras.layers.Conv2D(3, 3, activation="softplus", dtype=dtype)(inputs)
    h = keras.layers.Flatten(dtype=dtype)(h)
    return keras.Model(inputs, keras.layers.Dense(4, dtype=dtype)(h))


def grad(model, points, cls):
    points = tf.constant(points)
    with tf.GradientTape() as tape:
        tape.watch(points)
        score = model(points)[:, cls]
    return tape.gradient(score, points).numpy()


def test_matches_a_plain_monte_carlo_reference():
    model = tiny_model("float64")
    rng = np.random.default_rng(0)
    x, refs = rng.normal(size=(2, 6, 6, 2)), rng.normal(size=(5, 6, 6, 2))
    got = sk.explain(model, x, "expected_gradients", targets=[[1, 3], [0, 2]], samples=7, baselines=refs, seed=11)
    for b in range(2):  # the draws of input b (key b): a baseline ⌊u₀ · 5⌋ and a path point α = u₁
        u = uniform_draws(11, b, 7, range(7), [2], "float64")
        which, alpha = np.minimum(np.floor(u[:, 0] * 5).astype(int), 4), u[:, 1]
        for k, cls in enumerate(got.targets[b]):
            delta = x[b] - refs[which]
            points = refs[which] + alpha[:, None, None, None] * delta
            expected = (delta * grad(model, points, cls)).mean(axis=0)
            np.testing.assert_allclose(got.attributions[b, k], expected, rtol=1e-6, atol=1e-9)


def test_one_baseline_many_samples_converges_to_integrated_gradients():
    model = tiny_model()
    rng = np.random.default_rng(1)
    x = rng.normal(size=(1, 6, 6, 2)).astype("float32")
    baseline = rng.normal(size=(6, 6, 2)).astype("float32")
    eg = sk.explain(
        model, x, "expected_gradients", targets=2, samples=3000, baselines=baseline[None], seed=3, batch_size=256
    )
    ig = sk.explain(model, x, "integrated_gradients", targets=2, steps=200, baseline=baseline)
    error = np.abs(eg.attributions - ig.attributions).sum() / np.abs(ig.attributions).sum()
    assert error < 0.05
    # and far from IG with a different baseline: the comparison can fail
    other = sk.explain(model, x, "integrated_gradients", targets=2, steps=200, baseline=0.0)
    assert np.abs(eg.attributions - other.attributions).sum() / np.abs(other.attributions).sum() > 0.2


def test_seed_fixes_the_result_whatever_the_batch_size():
    model = tiny_model()
    rng = np.random.default_rng(2)
    x = rng.normal(size=(3, 6, 6, 2)).astype("float32")
    refs = rng.normal(size=(4, 6, 6, 2)).astype("float32")
    a = sk.explain(model, x, "expected_gradients", targets="top2", samples=9, baselines=refs, seed=5, batch_size=1)
    b = sk.explain(model, x, "expected_gradients", targets="top2", samples=9, baselines=refs, seed=5, batch_size=64)
    # with input keys, an input's draws are its own wherever it sits
    keyed = sk.explain(
        model, x, "expected_gradients", targets="top2", samples=9, baselines=refs, seed=5, input_keys=[10, 11, 12]
    )
    c = sk.explain(
        model, x[2:], "expected_gradients", targets=a.targets[2:], samples=9, baselines=refs, seed=5, input_keys=[12]
    )
    d = sk.explain(model, x, "expected_gradients", targets="top2", samples=9, baselines=refs, seed=6)
    np.testing.assert_allclose(a.attributions, b.attributions, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(c.attributions[0], keyed.attributions[2], rtol=1e-5, atol=1e-7)
    assert not np.allclose(keyed.attributions, a.attributions)  # other keys, other draws
    assert not np.allclose(a.attributions, d.attributions)
    assert a.maps.shape == (3, 2, 6, 6)


def test_works_on_tabular_inputs_and_refuses_bad_baselines():
    inputs = keras.Input((5,))
    model = keras.Model(inputs, keras.layers.Dense(2)(inputs))
    x = np.ones((2, 5), "float32")
    got = sk.explain(model, x, "expected_gradients", targets=1, baselines=np.zeros((3, 5)), samples=4, seed=0)
    weights = model.layers[-1].kernel.numpy()[:, 1]
    np.testing.assert_allclose(got.attributions[:, 0], np.tile(weights, (2, 1)), rtol=1e-5)  # linear: exact
    with pytest.raises(ValueError, match=r"needs baselines=.*received None"):
        sk.explain(model, x, "expected_gradients", targets=1)
    with pytest.raises(ValueError, match=r"baselines must have shape \[N, 5\].*received \(3, 4\)"):
        sk.explain(model, x, "expected_gradients", targets=1, baselines=np.zeros((3, 4)))
