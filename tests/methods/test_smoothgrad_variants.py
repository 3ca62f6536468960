"""squaregrad and vargrad (and smoothgrad's mean) against an independent NumPy implementation
fed the same noise: the noise reproduced from its documented keys with TensorFlow's stateless
generator, the gradients of a one-hidden-layer tanh network in closed form."""

import numpy as np
import pytest
from method_support import normal_draws

import saliency_kit as sk

keras = pytest.importorskip("keras")

SHAPE = (4, 4, 1)


@pytest.fixture(scope="module")
def tanh_net():
    """s = V · tanh(W x + b) + c, so ∂s_k/∂x = Wᵀ (V[:, k] ⊙ (1 − tanh²(W x + b)))."""
    keras.utils.set_random_seed(3)
    inputs = keras.Input(SHAPE)
    hidden = keras.layers.Dense(3, activation="tanh", name="hidden")(keras.layers.Flatten()(inputs))
    model = keras.Model(inputs, keras.layers.Dense(2, name="out")(hidden))
    W, b = (v.astype(np.float64) for v in model.get_layer("hidden").get_weights())
    V = model.get_layer("out").get_weights()[0].astype(np.float64)

    def gradient(points, k):  # points [m, *SHAPE] -> [m, *SHAPE]
        flat = points.reshape(len(points), -1).astype(np.float64)
        return ((V[:, k] * (1 - np.tanh(flat @ W + b) ** 2)) @ W.T).reshape(points.shape)

    return model, gradient


def reference(gradient, x, k, samples, noise, seed, keys, base):
    """``[B, *SHAPE]`` per input: the base attributions at the S noisy copies, aggregated three ways."""
    out = {"mean": [], "square": [], "variance": []}
    for b, key in enumerate(keys):
        sigma = noise * (x[b].max() - x[b].min())
        copies = x[b] + sigma * normal_draws(seed, key, samples, range(samples), SHAPE)  # [S, *SHAPE]
        a = gradient(copies, k) * (copies if base == "gradient_x_input" else 1.0)
        out["mean"].append(a.mean(0))
        out["square"].append((a**2).mean(0))
        out["variance"].append((a**2).mean(0) - a.mean(0) ** 2)
    return {name: np.stack(values) for name, values in out.items()}


@pytest.mark.parametrize("base", ["gradient", "gradient_x_input"])
def test_the_three_aggregates_match_a_numpy_implementation_with_the_same_noise(tanh_net, base):
    model, gradient = tanh_net
    x = np.random.default_rng(0).normal(size=(3, *SHAPE)).astype("float32")
    options = {"samples": 6, "noise": 0.3, "seed": 4, "base": base}
    expected = reference(gradient, x, 1, 6, 0.3, 4, range(3), base)
    for name, aggregate in (("smoothgrad", "mean"), ("squaregrad", "square"), ("vargrad", "variance")):
        got = sk.explain(model, x, name, targets=1, batch_size=4, **options).attributions[:, 0]
        np.testing.assert_allclose(got, expected[aggregate], rtol=2e-4, atol=1e-6, err_msg=name)
    # the variance is not the square: the comparison can fail
    assert not np.allclose(expected["variance"], expected["square"], rtol=1e-2)


def test_input_keys_pick_the_noise(tanh_net):
    model, gradient = tanh_net
    x = np.random.default_rng(1).normal(size=(2, *SHAPE)).astype("float32")
    got = sk.explain(model, x, "vargrad", targets=0, samples=5, seed=9, input_keys=[70, 3]).attributions[:, 0]
    expected = reference(gradient, x, 0, 5, 0.15, 9, [70, 3], "gradient")["variance"]
    np.testing.assert_allclose(got, expected, rtol=2e-4, atol=1e-7)


@pytest.mark.parametrize("name", ["squaregrad", "vargrad"])
def test_aggregate_is_fixed_by_the_name(tanh_net, name):
    model, _ = tanh_net
    x = np.zeros((1, *SHAPE), "float32")
    with pytest.raises(ValueError, match="no option 'aggregate'"):
        sk.explain(model, x, name, targets=1, aggregate="mean")
    assert "aggregate" not in sk.methods.get(name).defaults
