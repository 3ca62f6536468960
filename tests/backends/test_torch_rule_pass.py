"""The ReLU-rule pass on PyTorch (engine.torch_rules.with_rule, a function mode): guided backprop,
deconvnet and a rule of one's own reach every ReLU-family operation a model runs, checked against
backward passes written by hand in NumPy (tests/backends/rule_reference.py) on small models with
weights set by hand; the model and its own gradients stay untouched."""

import keras
import numpy as np
import pytest
from rule_reference import (
    B1,
    B2,
    BLOCKS,
    RNG,
    W1,
    W2,
    X,
    as_rule_argument,
    away_from_kinks,
    dense_model,
    np_dense_gradient,
    np_rule,
)

from saliency_kit.rules import ReluFamily

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "torch", reason="runs in the PyTorch process: KERAS_BACKEND=torch pytest tests/backends"
)

if keras.backend.backend() == "torch":
    import torch

    from saliency_kit.engine.torch_rules import with_rule


@pytest.fixture(autouse=True)
def _seed():
    """Keras' set_random_seed imports TensorFlow when it is installed; these tests draw from NumPy."""
    yield


def gradient(fn, x, unit):
    """``∂ Σ fn(x)[:, unit] / ∂x`` by autograd, as NumPy."""
    leaf = torch.tensor(x, requires_grad=True)
    (grad,) = torch.autograd.grad(fn(leaf)[:, unit].sum(), leaf)
    return grad.numpy()


def call(model):
    return lambda x: model(x, training=False)


@pytest.mark.parametrize("rule", ["guided", "deconv", "half"])
@pytest.mark.parametrize("block", list(BLOCKS))
def test_every_activation_kind_follows_the_rule(block, rule):
    make, family, label = BLOCKS[block]
    model = dense_model(make(), "net")
    wrapped, report = with_rule(call(model), as_rule_argument(rule))
    for unit in range(3):
        expected, forward = np_dense_gradient(rule, family, X, unit)
        np.testing.assert_allclose(gradient(wrapped, X, unit), expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(wrapped(torch.tensor(X)).detach().numpy(), forward, rtol=1e-5, atol=1e-5)
    assert len(report.ops) == 1 and report.ops[0].startswith(f"{label} at ") and "act" in report.ops[0], report.ops
    assert report.families == [family] and report.complete


def test_forward_bit_identical_and_nothing_changed():
    family = ReluFamily(negative_slope=0.1, max_value=1.5, threshold=0.25)
    model = dense_model(keras.layers.ReLU(max_value=1.5, negative_slope=0.1, threshold=0.25, name="act"), "net")
    activations = {layer.name: getattr(layer, "activation", None) for layer in model.layers}
    weights = [np.array(w) for w in model.get_weights()]
    plain_before = gradient(call(model), X, 1)

    wrapped, _ = with_rule(call(model), "guided")
    assert np.array_equal(wrapped(torch.tensor(X)).detach().numpy(), model(X).detach().numpy())
    leaf = torch.tensor(X, requires_grad=True)
    ruled_scores, plain_scores = wrapped(leaf)[:, 1].sum(), model(leaf)[:, 1].sum()  # both graphs alive at once
    ruled = torch.autograd.grad(ruled_scores, leaf)[0].numpy()
    plain = torch.autograd.grad(plain_scores, leaf)[0].numpy()

    expected, _ = np_dense_gradient("plain", family, X, 1)
    np.testing.assert_allclose(plain_before, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(plain, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ruled, np_dense_gradient("guided", family, X, 1)[0], rtol=1e-5, atol=1e-5)
    assert np.array_equal(gradient(call(model), X, 1), plain_before)
    assert {layer.name: getattr(layer, "activation", None) for layer in model.layers} == activations
    assert all(np.array_equal(a, b) for a, b in zip(model.get_weights(), weights))


def test_conv_model_with_fused_relu():
    kernel = RNG.normal(size=(2, 2, 1, 2)).astype("float32")
    bias = np.array([0.1, -0.2], "float32")
    dense = RNG.normal(size=(2 * 2 * 2, 1)).astype("float32")
    model = keras.Sequential(
        [
            keras.Input((3, 3, 1)),
            keras.layers.Conv2D(2, 2, activation="relu", name="conv"),
            keras.layers.Flatten(),
            keras.layers.Dense(1, use_bias=False, name="out"),
        ]
    )
    model.get_layer("conv").set_weights([kernel, bias])
    model.get_layer("out").set_weights([dense])
    image = RNG.normal(size=(1, 3, 3, 1)).astype("float32")

    z = np.zeros((2, 2, 2))
    for i in range(2):
        for j in range(2):
            z[i, j] = np.einsum("abc,abcd->d", image[0, i : i + 2, j : j + 2], kernel) + bias
    dz = np_rule("guided", ReluFamily(), z, dense[:, 0].reshape(2, 2, 2))
    expected = np.zeros((3, 3, 1))
    for i in range(2):
        for j in range(2):
            expected[i : i + 2, j : j + 2] += np.einsum("abcd,d->abc", kernel, dz[i, j])

    wrapped, report = with_rule(call(model), "guided")
    np.testing.assert_allclose(gradient(wrapped, image, 0)[0], expected, rtol=1e-5, atol=1e-5)
    assert len(report.ops) == 1 and "conv" in report.ops[0], report.ops


def test_time_distributed_and_simple_rnn():
    steps, features, units = 3, 2, 4
    dense_kernel = RNG.normal(size=(features, units)).astype("float32")
    dense_bias = RNG.normal(size=(units,)).astype("float32")
    input_kernel = RNG.normal(size=(units, units)).astype("float32")
    recurrent = RNG.normal(size=(units, units)).astype("float32") * 0.5
    rnn_bias = RNG.normal(size=(units,)).astype("float32")
    head = RNG.normal(size=(units, 2)).astype("float32")
    model = keras.Sequential(
        [
            keras.Input((steps, features)),
            keras.layers.TimeDistributed(keras.layers.Dense(units, activation="relu"), name="wrapper"),
            keras.layers.SimpleRNN(units, activation="relu", name="rnn"),
            keras.layers.Dense(2, use_bias=False, name="head"),
        ]
    )
    model.get_layer("wrapper").set_weights([dense_kernel, dense_bias])
    model.get_layer("rnn").set_weights([input_kernel, recurrent, rnn_bias])
    model.get_layer("head").set_weights([head])
    x = RNG.normal(size=(1, steps, features)).astype("float32")

    for rule in ("guided", "deconv"):
        family = ReluFamily()
        a = x[0] @ dense_kernel + dense_bias
        assert away_from_kinks(family, a)
        u = np.maximum(a, 0.0)
        h, zs = np.zeros(units), []
        for t in range(steps):
            zs.append(u[t] @ input_kernel + h @ recurrent + rnn_bias)
            assert away_from_kinks(family, zs[-1])
            h = np.maximum(zs[-1], 0.0)
        dh, du = head[:, 1].astype(np.float64), np.zeros_like(u)
        for t in reversed(range(steps)):
            dz = np_rule(rule, family, zs[t], dh)
            du[t] = dz @ input_kernel.T
            dh = dz @ recurrent.T
        expected = np_rule(rule, family, a, du) @ dense_kernel.T

        wrapped, report = with_rule(call(model), rule)
        np.testing.assert_allclose(gradient(wrapped, x, 1)[0], expected, rtol=1e-4, atol=1e-5)
        assert np.array_equal(wrapped(torch.tensor(x)).detach().numpy(), model(x).detach().numpy())
        assert sum("rnn" in op for op in report.ops) >= steps, report.ops  # every step (Keras may probe one more)
        assert any("wrapper" in op for op in report.ops), report.ops
        assert report.complete


class Subclassed(keras.Model):
    def __init__(self):
        super().__init__()
        self.hidden = keras.layers.Dense(5)
        self.out = keras.layers.Dense(3)

    def call(self, x):
        return self.out(keras.ops.relu(self.hidden(x)))


def test_subclassed_model():
    model = Subclassed()
    model(X)
    model.hidden.set_weights([W1, B1])
    model.out.set_weights([W2, B2])
    wrapped, report = with_rule(call(model), "guided")
    expected, _ = np_dense_gradient("guided", ReluFamily(), X, 2)
    np.testing.assert_allclose(gradient(wrapped, X, 2), expected, rtol=1e-5, atol=1e-5)
    assert [op.split(" at ")[0] for op in report.ops] == ["relu"]


def test_a_function_without_relu_gives_an_empty_report():
    wrapped, report = with_rule(lambda x: torch.tanh(x) * 2.0, "guided")
    np.testing.assert_allclose(wrapped(torch.tensor(X)).numpy(), np.tanh(X) * 2.0, rtol=1e-6)
    assert report.ops == [] and report.complete
    report.check("the function")


def test_a_clip_with_bounds_that_are_not_constants_is_reported():
    bound = torch.tensor(1.5, requires_grad=True)
    wrapped, report = with_rule(lambda x: torch.clip(torch.relu(x), torch.tensor(0.0), bound).sum(), "guided")
    wrapped(torch.tensor(X, requires_grad=True))
    assert report.unsupported and "clip" in report.unsupported[0]
    with pytest.raises(ValueError, match="cannot apply GuidedBackprop to every ReLU of layer 'capped'"):
        report.check("layer 'capped'")


def test_a_prelu_keeps_its_plain_gradient():
    layer = keras.layers.PReLU(alpha_initializer=keras.initializers.Constant(0.25), name="prelu")
    model = keras.Sequential([keras.Input((4,)), layer])
    wrapped, report = with_rule(call(model), "guided")
    weights = np.array([1.0, -1.0, 2.0, -2.0], "float32")
    leaf = torch.tensor(X, requires_grad=True)
    (grad,) = torch.autograd.grad((wrapped(leaf) * torch.tensor(weights)).sum(), leaf)
    np.testing.assert_allclose(grad.numpy(), weights * np.where(X > 0, 1.0, 0.25), rtol=1e-6)
    assert report.ops == [] and len(report.plain) == 1 and "prelu" in report.plain[0]
