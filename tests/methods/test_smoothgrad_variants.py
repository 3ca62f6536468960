"""squaregrad and vargrad (and smoothgrad's mean) against independent implementations fed the same
noise, never against smoothgrad itself: the noise reproduced from its documented keys with
TensorFlow's stateless generator, then the gradients of a one-hidden-layer tanh network in closed
form (NumPy), and of a small ReLU CNN by a plain ``tf.GradientTape`` loop over the noisy copies."""

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


@pytest.fixture(scope="module")
def relu_cnn():
    keras.utils.set_random_seed(8)
    inputs = keras.Input((6, 6, 2))
    h = keras.layers.Conv2D(4, 3, activation="relu")(inputs)
    h = keras.layers.Dense(5, activation="relu")(keras.layers.Flatten()(h))
    return keras.Model(inputs, keras.layers.Dense(3)(h))


def tape_reference(model, x, k, samples, noise, seed):
    """``(mean of squares, variance)`` ``[B, *input]`` of the gradients of logit ``k`` at each input's
    noisy copies, one ``tf.GradientTape`` per input, accumulated in float64."""
    import tensorflow as tf

    square, variance = [], []
    for b in range(len(x)):
        sigma = noise * (x[b].max() - x[b].min())
        copies = tf.constant(x[b] + sigma * normal_draws(seed, b, samples, range(samples), x.shape[1:]))
        with tf.GradientTape() as tape:
            tape.watch(copies)
            score = tf.reduce_sum(model(copies)[:, k])
        g = tape.gradient(score, copies).numpy().astype(np.float64)  # [S, *input]
        square.append((g**2).mean(0))
        variance.append(g.var(0))
    return np.stack(square), np.stack(variance)


def test_squaregrad_and_vargrad_match_a_gradient_tape_loop_over_the_same_noise(relu_cnn):
    x = np.random.default_rng(5).normal(size=(3, 6, 6, 2)).astype("float32")
    square, variance = tape_reference(relu_cnn, x, 2, 7, 0.25, 11)
    options = {"samples": 7, "noise": 0.25, "seed": 11, "batch_size": 5}
    got_square = sk.explain(relu_cnn, x, "squaregrad", targets=2, **options).attributions[:, 0]
    got_variance = sk.explain(relu_cnn, x, "vargrad", targets=2, **options).attributions[:, 0]
    np.testing.assert_allclose(got_square, square, rtol=2e-4, atol=1e-6 * square.max())
    # E[g²] − E[g]² in float32 loses about float32's epsilon (1.2e-7) times E[g²] to cancellation
    np.testing.assert_allclose(got_variance, variance, rtol=2e-4, atol=1e-5 * square.max())
    # the noise moves the ReLU gates: the gradients differ between copies, so the variance is not zero
    assert variance.max() > 1e-2 * square.max()


@pytest.mark.parametrize("name", ["squaregrad", "vargrad"])
def test_aggregate_is_fixed_by_the_name(tanh_net, name):
    model, _ = tanh_net
    x = np.zeros((1, *SHAPE), "float32")
    with pytest.raises(ValueError, match="no option 'aggregate'"):
        sk.explain(model, x, name, targets=1, aggregate="mean")
    assert "aggregate" not in sk.methods.get(name).defaults
