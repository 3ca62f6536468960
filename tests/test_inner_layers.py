"""Attributions of an inner layer's output: conductance (the path in input space) and integrated
gradients with ``attribute_to=LAYER`` (the path in the layer's space), on float64 models whose
layers are nonlinear, including a layer inside a nested model named by its path.

The references split the model at the layer by hand: the layers before it give its activations,
the layers after it (with the inputs that reach the output around it) are called on activations
that tf.GradientTape watches; the quadrature is written out in NumPy. Conductance is also checked
against Dhamdhere et al.'s integral ``∫ ∂s/∂y_j · (∂y_j/∂x · (x − x′)) dα``, its ``∂y/∂x · Δx``
taken by forward-mode differentiation and the integral by Gauss–Legendre quadrature."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras
import numpy as np
import pytest
import tensorflow as tf

import saliency_kit as sk

F64 = "float64"


def _dense(units, activation=None, name=None):
    return keras.layers.Dense(units, activation=activation, name=name, dtype=F64)


def _randomise(layers, rng):
    """Weights of both signs and of order one: the layers' curvature shows on the path."""
    for layer in layers:
        layer.kernel.assign(rng.normal(size=layer.kernel.shape) * 1.2)
        layer.bias.assign(rng.normal(size=layer.bias.shape) * 0.3)


@pytest.fixture(scope="module")
def skip_net():
    """x [4] → h1 = tanh(Dense 5) → h2 = softplus(Dense 4) → top (Dense 3), plus skip (Dense 3)
    of x added at the output: the rest of the model after ``h1`` also reads x."""
    rng = np.random.default_rng(3)
    inputs = keras.Input((4,), dtype=F64, name="x")
    h1, h2 = _dense(5, "tanh", "h1"), _dense(4, "softplus", "h2")
    top, skip = _dense(3, name="top"), _dense(3, name="skip")
    add = keras.layers.Add(name="add", dtype=F64)
    model = keras.Model(inputs, add([top(h2(h1(inputs))), skip(inputs)]), name="skip_net")
    _randomise([h1, h2, top, skip], rng)
    x = rng.normal(size=(3, 4))

    def rest(y, x):  # the model after h1: [N, 5], [N, 4] -> [N, 3]
        return add([top(h2(y)), skip(x)])

    return model, x, h1, rest


@pytest.fixture(scope="module")
def nested_net():
    """x [4] → outer (a functional model: pre → inner_layer → after, plus a skip of its input)
    → tanh → head: ``inner_layer`` is reached by the path ``"outer/inner_layer"``."""
    rng = np.random.default_rng(8)
    inner_input = keras.Input((4,), dtype=F64)
    pre, inner, after = _dense(6, "tanh", "pre"), _dense(5, "tanh", "inner_layer"), _dense(4, "softplus", "after")
    skip = _dense(4, name="inner_skip")
    add = keras.layers.Add(dtype=F64)
    outer = keras.Model(inner_input, add([after(inner(pre(inner_input))), skip(inner_input)]), name="outer")
    inputs = keras.Input((4,), dtype=F64)
    head = _dense(3, name="head")
    model = keras.Model(inputs, head(keras.layers.Activation("tanh", dtype=F64)(outer(inputs))), name="nested")
    _randomise([pre, inner, after, skip, head], rng)
    x = rng.normal(size=(3, 4))

    def before(x):  # the model up to inner_layer
        return inner(pre(x))

    def rest(y, x):
        return head(tf.tanh(add([after(y), skip(x)])))

    return model, x, before, rest


def _rest_gradients(rest, y, x, cls):
    """``∂s_cls/∂y`` of the model after the layer, at activations ``y [N, ...]`` with inputs ``x``."""
    y = tf.constant(y)
    with tf.GradientTape() as tape:
        tape.watch(y)
        score = rest(y, tf.constant(x))[:, cls]
    return tape.gradient(score, y).numpy()


def _hand_conductance(before, rest, x, baseline, cls, steps):
    """Each unit's ``Σ_i ½(g(α_i) + g(α_{i+1})) · (y(α_{i+1}) − y(α_i))`` on ``steps`` evenly
    spaced points of the input path: ``[units]``."""
    alphas = np.linspace(0, 1, steps)[:, None]
    points = baseline + alphas * (x - baseline)  # [steps, 4]
    y = before(points).numpy()
    g = _rest_gradients(rest, y, points, cls)
    return (0.5 * (g[1:] + g[:-1]) * (y[1:] - y[:-1])).sum(axis=0)


def _hand_layer_ig(rest, y, y0, x, cls, steps):
    """Integrated gradients in the layer's space, trapezoid on ``steps`` evenly spaced points:
    ``(y − y′) · Σ_i w_i ∂s/∂y (y′ + α_i (y − y′))`` with the inputs ``x`` held."""
    weights = np.full(steps, 1 / (steps - 1))
    weights[[0, -1]] /= 2
    total = np.zeros_like(y)
    for alpha, w in zip(np.linspace(0, 1, steps), weights):
        total += w * _rest_gradients(rest, y0 + alpha * (y - y0), x, cls)
    return (y - y0) * total


def test_conductance_of_each_unit_of_a_nonlinear_layer_is_the_hand_quadrature(skip_net):
    model, x, h1, rest = skip_net
    baseline, classes, steps = np.array([0.2, -0.1, 0.0, 0.3]), [0, 1, 2], 9
    c = sk.explain(model, x, "conductance", targets=classes, attribute_to="h1", steps=steps, baseline=baseline)
    assert c.attributions.shape == (3, 1, 5) and c.layer == "h1"
    for b, cls in enumerate(classes):
        want = _hand_conductance(h1, rest, x[b : b + 1], baseline, cls, steps)
        np.testing.assert_allclose(c.attributions[b, 0], want, rtol=1e-6, atol=1e-6)
        # the gap: Σ over the layer − the score change, which includes the skip's share (not through h1)
        s = model(np.stack([x[b], baseline])).numpy()[:, cls]
        np.testing.assert_allclose(c.completeness_gap[b, 0], want.sum() - (s[0] - s[1]), atol=1e-5)
    # on a nonlinear layer conductance is not integrated gradients in that layer's space
    ig = sk.explain(model, x, "integrated_gradients", targets=classes, attribute_to="h1", steps=steps)
    assert np.abs(ig.attributions - c.attributions).max() > 0.1


def test_conductance_converges_to_dhamdhere_et_al_integral(skip_net):
    """``c_j = ∫₀¹ ∂s/∂y_j(x(α)) · (∂y_j/∂x · (x − x′)) dα``: forward-mode ``∂y/∂x · Δx``,
    64-point Gauss–Legendre in α; the library's trapezoid on 513 points is within its O(1/steps²) error (4e-6 here)."""
    model, x, h1, rest = skip_net
    baseline, cls = np.zeros(4), 1
    nodes, weights = np.polynomial.legendre.leggauss(64)
    alphas, weights = (nodes + 1) / 2, weights / 2  # on [0, 1]
    c = sk.explain(model, x, "conductance", targets=cls, attribute_to="h1", steps=513, baseline=0.0)
    for b in range(len(x)):
        delta = x[b] - baseline
        points = tf.constant(baseline + alphas[:, None] * delta)  # [64, 4]
        with tf.autodiff.ForwardAccumulator(points, tf.constant(np.tile(delta, (64, 1)))) as accumulator:
            y = h1(points)
        dy = accumulator.jvp(y).numpy()  # dy/dα [64, 5]
        g = _rest_gradients(rest, y.numpy(), points.numpy(), cls)
        want = (weights[:, None] * g * dy).sum(axis=0)
        np.testing.assert_allclose(c.attributions[b, 0], want, rtol=0, atol=2e-5)


def test_layer_ig_is_integrated_gradients_of_the_rest_of_the_model_in_the_layers_space(skip_net):
    """The path runs from the layer's baseline (0, or an array of its shape) to its activation;
    the skip keeps reading each row's input; the gap is the rest of the model's score change."""
    model, x, h1, rest = skip_net
    y, steps = h1(x).numpy(), 7
    for baseline in (0.0, np.array([0.1, -0.2, 0.3, 0.0, 0.5])):
        e = sk.explain(model, x, "integrated_gradients", targets=2, attribute_to="h1", steps=steps, baseline=baseline)
        assert e.parts == {"h1": "layer"} and e.attributions.shape == (3, 1, 5)
        y0 = np.broadcast_to(baseline, y.shape)
        want = _hand_layer_ig(rest, y, y0, x, 2, steps)
        np.testing.assert_allclose(e.attributions[:, 0], want, rtol=1e-6, atol=1e-6)
        change = rest(y, x).numpy()[:, 2] - rest(y0, x).numpy()[:, 2]
        np.testing.assert_allclose(e.completeness_gap[:, 0], want.sum(axis=1) - change, atol=1e-5)
        assert np.abs(e.completeness_gap).max() > 1e-4  # 7 steps on a curved rest: the gap is not 0


def test_layer_ig_starts_by_default_at_the_layers_output_at_the_baseline_input(skip_net):
    """No baseline given: the path starts at ``h1(x′)``, ``x′ = 0``; the skip keeps reading each
    row's input, so the gap is against the score at that start, not ``s(x′)``."""
    model, x, h1, rest = skip_net
    y, y0 = h1(x).numpy(), np.broadcast_to(h1(np.zeros((1, 4))).numpy(), (3, 5))
    e = sk.explain(model, x, "integrated_gradients", targets=0, attribute_to="h1", steps=9)
    want = _hand_layer_ig(rest, y, y0, x, 0, 9)
    np.testing.assert_allclose(e.attributions[:, 0], want, rtol=1e-6, atol=1e-6)
    change = rest(y, x).numpy()[:, 0] - rest(y0, x).numpy()[:, 0]
    np.testing.assert_allclose(e.completeness_gap[:, 0], want.sum(axis=1) - change, atol=1e-5)


def test_a_layer_inside_a_nested_model_is_reached_by_its_path(nested_net):
    model, x, before, rest = nested_net
    y = before(x).numpy()
    classes = [1, 0, 2]
    g = sk.explain(model, x, "gradient_x_input", targets=classes, attribute_to="outer/inner_layer")
    assert g.parts == {"outer/inner_layer": "layer"} and g.attributions.shape == (3, 1, 5)
    for b, cls in enumerate(classes):
        want = y[b] * _rest_gradients(rest, y[b : b + 1], x[b : b + 1], cls)[0]
        np.testing.assert_allclose(g.attributions[b, 0], want, rtol=1e-6, atol=1e-6)
    ig = sk.explain(
        model, x, "integrated_gradients", targets=1, attribute_to="outer/inner_layer", steps=6, layer_start="zero"
    )
    np.testing.assert_allclose(ig.attributions[:, 0], _hand_layer_ig(rest, y, 0 * y, x, 1, 6), rtol=1e-6, atol=1e-6)
    c = sk.explain(model, x, "conductance", targets=1, attribute_to="outer/inner_layer", steps=6, baseline=0.0)
    assert c.layer == "outer/inner_layer"
    for b in range(len(x)):
        want = _hand_conductance(before, rest, x[b : b + 1], np.zeros(4), 1, 6)
        np.testing.assert_allclose(c.attributions[b, 0], want, rtol=1e-6, atol=1e-6)


def test_guided_backprop_of_a_layer_with_no_relu_above_it_is_refused_not_the_plain_gradient():
    """x → Dense+ReLU → Dense 'h' → tanh → Dense: the ReLU lies below 'h', so guided backprop of
    'h' would silently equal its plain gradient; it is refused naming the ReLU. With a ReLU above
    the layer it runs, and differs from the plain gradient where the ReLU's rule zeroes a negative."""
    inputs = keras.Input((3,), name="x")
    h = keras.layers.Dense(4, name="h")(keras.layers.Dense(4, activation="relu", name="low")(inputs))
    below = keras.Model(inputs, keras.layers.Dense(2, name="top")(keras.layers.Activation("tanh")(h)), name="below")
    x = np.random.default_rng(0).normal(size=(2, 3)).astype("float32")
    refusal = r"ReLU-family activation of model 'below' \(.*low.*Relu\) lies before what is"
    with pytest.raises(ValueError, match=refusal):
        sk.explain(below, x, "guided_backprop", attribute_to="h")
    assert sk.explain(below, x, "guided_backprop").rewritten  # the input's map goes through the ReLU

    inputs = keras.Input((3,), name="x")
    h = keras.layers.Dense(4, name="h")(inputs)
    top = keras.layers.Dense(2, name="top")
    above = keras.Model(inputs, top(keras.layers.ReLU()(h)), name="above")
    top.kernel.assign(np.array([[1.0, -1.0], [-1.0, 1.0], [0.5, 0.5], [-0.5, 2.0]], np.float32))
    guided = sk.explain(above, x, "guided_backprop", targets=0, attribute_to="h").attributions[:, 0]
    activations = keras.Model(inputs, h)(x).numpy()
    hand = (activations > 0) * np.maximum(top.kernel.numpy()[:, 0], 0)  # guided: positive h and positive grad
    np.testing.assert_allclose(guided, hand, rtol=1e-6, atol=1e-7)
