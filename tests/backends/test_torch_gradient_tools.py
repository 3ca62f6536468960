"""sk.gradients and sk.layers on PyTorch: each tool against its closed-form gradient, under
torch.autograd.grad and torch.func.grad, nested with create_graph=True, in a Keras model trained one
step with fit, saved and loaded."""

import keras
import pytest

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "torch", reason="runs in the PyTorch process: KERAS_BACKEND=torch pytest tests/backends"
)

import os  # noqa: E402
import pathlib  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

import numpy as np  # noqa: E402

import saliency_kit as sk  # noqa: E402

if keras.backend.backend() == "torch":
    import torch
    import torch.func

G = sk.gradients
CONTEXTS = ["autograd", "func"]


def grad_of(fn, x, *, context):
    """``(fn(x), d fn / dx)`` by ``torch.autograd.grad`` or ``torch.func.grad_and_value``."""
    x = torch.as_tensor(np.asarray(x, np.float32))
    if context == "func":
        g, y = torch.func.grad_and_value(fn)(x)
        return y.numpy(), g.numpy()
    x.requires_grad_(True)
    y = fn(x)
    (g,) = torch.autograd.grad(y, x)
    return y.detach().numpy(), g.numpy()


def pull_back(fn, x, dy):
    """``dy``'s vector-Jacobian product through ``fn`` at ``x``."""
    x = torch.as_tensor(np.asarray(x, np.float32)).requires_grad_(True)
    (g,) = torch.autograd.grad(fn(x), x, torch.as_tensor(np.asarray(dy, np.float32)))
    return g.numpy()


def t(values):
    return torch.as_tensor(np.asarray(values, np.float32))


@pytest.mark.parametrize("context", CONTEXTS)
def test_scale_is_the_gradient_times_the_factor(context):
    x = np.array([1.0, -2.0, 0.25], np.float32)
    y, g = grad_of(lambda u: torch.sum(G.scale(u, 5.0) ** 2), x, context=context)
    np.testing.assert_allclose(y, np.sum(x**2), rtol=1e-6)
    np.testing.assert_allclose(g, 5.0 * 2.0 * x, rtol=1e-6)
    _, g = grad_of(lambda u: torch.sum(G.scale(u, torch.tensor(-1.0)) * 3.0), x, context=context)
    np.testing.assert_allclose(g, [-3.0, -3.0, -3.0])


@pytest.mark.parametrize("context", CONTEXTS)
def test_clip_is_the_gradient_clipped(context):
    x = np.array([0.5, -2.0, 3.0, 0.0], np.float32)
    w = np.array([-1.0, 0.05, 3.0, -0.02], np.float32)
    y, g = grad_of(lambda u: torch.sum(t(w) * G.clip(u, -0.1, 0.1)), x, context=context)
    np.testing.assert_allclose(y, np.sum(w * x), rtol=1e-6)
    np.testing.assert_allclose(g, np.clip(w, -0.1, 0.1), rtol=1e-6)


@pytest.mark.parametrize("context", CONTEXTS)
def test_clip_norm_between_two_matmuls(context):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3, 4)).astype(np.float32)
    w1 = rng.normal(size=(4, 5)).astype(np.float32)
    w2 = rng.normal(size=(5, 2)).astype(np.float32)
    y, g = grad_of(lambda u: torch.sum(G.clip_norm(u @ t(w1), 0.5) @ t(w2)), x, context=context)
    dh = np.tile(w2.sum(axis=1), (3, 1))  # d/dh of sum(h @ w2), then its norm clipped to 0.5
    assert np.linalg.norm(dh) > 0.5
    np.testing.assert_allclose(y, np.sum(x @ w1 @ w2), rtol=1e-5)
    np.testing.assert_allclose(g, dh * (0.5 / np.linalg.norm(dh)) @ w1.T, rtol=1e-5)


def test_clip_norm_per_sample_a_zero_gradient_and_vmap():
    dy = np.array([[3.0, 4.0], [0.3, 0.4]], np.float32)
    g = pull_back(lambda u: G.clip_norm(u, 1.0, axes=[1]), np.zeros((2, 2)), dy)
    np.testing.assert_allclose(g, [[0.6, 0.8], [0.3, 0.4]], rtol=1e-6)
    _, g = grad_of(lambda u: torch.sum(G.clip_norm(u, 1.0) * 0.0), np.ones(3), context="autograd")
    np.testing.assert_array_equal(g, [0.0, 0.0, 0.0])  # no NaN from a zero norm
    per_row = torch.func.vmap(torch.func.grad(lambda u: torch.sum(G.clip_norm(u, 1.0) * t([3.0, 4.0]))))
    np.testing.assert_allclose(per_row(torch.zeros(2, 2)).numpy(), [[0.6, 0.8], [0.6, 0.8]], rtol=1e-6)


@pytest.mark.parametrize("context", CONTEXTS)
def test_straight_through_is_the_backward_functions_gradient(context):
    x = np.array([0.2, 0.7, -1.4, 2.5], np.float32)
    st_round = G.straight_through(keras.ops.round, lambda u: u)
    y, g = grad_of(lambda u: torch.sum(3.0 * st_round(u)), x, context=context)
    np.testing.assert_allclose(y, 3.0 * np.sum(np.round(x)))
    np.testing.assert_allclose(g, [3.0] * 4)
    st_square = G.straight_through(keras.ops.round, lambda u: u**2)
    _, g = grad_of(lambda u: torch.sum(st_square(u)), x, context=context)
    np.testing.assert_allclose(g, 2 * x, rtol=1e-6)


def np_mod(x, y):
    return np.mod(x, y).astype(np.float32)


def np_mod_grad(x, y, dy):
    return dy, -dy * np.floor(x / y)


def test_numpy_function_gradient_is_the_declared_one():
    mod = G.numpy_function(np_mod, np_mod_grad)
    x = t([5.3, -2.5, 7.0, 0.4]).requires_grad_(True)
    y = t([2.0, 1.5, -3.0, 0.3]).requires_grad_(True)
    weights = np.arange(1.0, 5.0)
    value = torch.sum(mod(x, y) * t(weights))
    gx, gy = torch.autograd.grad(value, (x, y))
    xs, ys = x.detach().numpy(), y.detach().numpy()
    np.testing.assert_allclose(value.detach().numpy(), np.sum(np.mod(xs, ys) * weights), rtol=1e-6)
    np.testing.assert_allclose(gx.numpy(), weights)
    np.testing.assert_allclose(gy.numpy(), -weights * np.floor(xs / ys))
    assert mod(x, y).shape == (4,) and mod(x, y).dtype == torch.float32


def test_numpy_function_broadcast_and_integer_inputs():
    mod = G.numpy_function(np_mod, np_mod_grad)
    x = t([[5.0, 7.0], [-1.0, 2.5]])
    b = torch.tensor(2.0, requires_grad=True)
    (g,) = torch.autograd.grad(torch.sum(mod(x, b)), b)
    np.testing.assert_allclose(g.numpy(), -np.floor(x.numpy() / 2.0).sum())  # summed over the broadcast axes

    shift = G.numpy_function(lambda a, n: (a + n).astype(np.float32), lambda a, n, dy: (2.0 * dy, None))
    _, g = grad_of(lambda a: torch.sum(shift(a, torch.tensor([1, 2, 3]))), np.zeros(3), context="autograd")
    np.testing.assert_allclose(g, [2.0, 2.0, 2.0])


def test_numpy_function_of_another_shape_declares_it():
    rng = np.random.default_rng(2)
    a = rng.normal(size=(3, 4)).astype(np.float32)
    b = rng.normal(size=(4, 2)).astype(np.float32)
    product = G.numpy_function(
        lambda a, b: (a @ b).astype(np.float32),
        lambda a, b, dy: (dy @ b.T, a.T @ dy),
        output_shape=lambda a_shape, b_shape: (a_shape[0], b_shape[1]),
    )
    ta, tb = t(a).requires_grad_(True), t(b).requires_grad_(True)
    ga, gb = torch.autograd.grad(torch.sum(product(ta, tb) ** 2), (ta, tb))
    np.testing.assert_allclose(ga.numpy(), 2 * (a @ b) @ b.T, rtol=1e-5)
    np.testing.assert_allclose(gb.numpy(), 2 * a.T @ (a @ b), rtol=1e-5)

    undeclared = G.numpy_function(lambda a, b: (a @ b).astype(np.float32), lambda a, b, dy: (None, None))
    assert tuple(undeclared(t(a), t(b)).shape) == (3, 2)  # inputs that do not broadcast declare nothing
    summed = G.numpy_function(lambda a: a.sum(0), lambda a, dy: np.broadcast_to(dy, a.shape))
    with pytest.raises(ValueError, match=r"shape \(4,\) where \(3, 4\) was declared"):
        summed(t(a))


def test_keras_infers_a_numpy_function_layers_shape_without_running_it():
    """Keras infers a layer's output on the "meta" device: the declared shape, ``fn`` not called."""
    calls = []
    cube = G.numpy_function(lambda h: calls.append(h.shape) or h**3, lambda h, dy: 3.0 * dy)
    inp = keras.Input((3,))
    out = keras.layers.Lambda(cube)(keras.layers.Dense(4)(inp))
    assert tuple(out.shape) == (None, 4) and calls == []
    assert tuple(keras.Model(inp, out)(np.ones((2, 3), np.float32)).shape) == (2, 4)
    assert calls == [(2, 4)]  # run on the values when the model is called


def test_numpy_function_bad_grad_fn_and_torch_func_are_clear():
    broken = G.numpy_function(np_mod, lambda x, y, dy: (dy,))
    with pytest.raises(ValueError, match="one gradient per input"):
        grad_of(lambda a: torch.sum(broken(a, torch.tensor(2.0))), np.ones(2), context="autograd")
    mod = G.numpy_function(np_mod, np_mod_grad)
    with pytest.raises(ValueError, match="runs under torch.autograd .* not inside torch.func"):
        torch.func.vmap(lambda a: mod(a, torch.tensor(3.0)))(torch.ones(2, 3))


NESTED = [
    # (name, y(u) applied to u = w * x, closed form of d/dw of sum(dy/dx) at w = 1.5)
    ("scale", lambda u: torch.sum(G.scale(u, 5.0)), 5.0 * 3),
    ("clip", lambda u: torch.sum(t([-1.0, 0.05, 3.0]) * G.clip(u, -0.1, 0.1)), -0.1 + 0.05 + 0.1),
    ("clip_norm", lambda u: torch.sum(t([3.0, 0.0, 4.0]) * G.clip_norm(u, 1.0)), 0.6 + 0.8),
    ("straight_through", lambda u: torch.sum(G.straight_through(keras.ops.round, lambda v: v)(u)), 3.0),
    (
        "straight_through_square",
        lambda u: torch.sum(G.straight_through(keras.ops.round, torch.square)(u)),
        4 * 1.5 * 0.6,
    ),
    ("numpy_function", lambda u: torch.sum(G.numpy_function(np_mod, np_mod_grad)(u, torch.tensor(7.0))), 3.0),
]


@pytest.mark.parametrize("context", CONTEXTS)
@pytest.mark.parametrize("name,y_of_u,expected", NESTED, ids=[n[0] for n in NESTED])
def test_under_nested_grads(name, y_of_u, expected, context):
    """Gradient-penalty shape: an outer gradient differentiates a gradient taken by an inner one
    (``create_graph=True``), or ``torch.func.grad`` of a ``torch.func.grad``."""
    x = t([0.3, 0.2, 0.1])
    if context == "func":
        if name == "numpy_function":
            pytest.skip("numpy_function runs under torch.autograd, not inside torch.func transforms")
        total = torch.func.grad(lambda w: torch.sum(torch.func.grad(lambda x: y_of_u(w * x))(x)))
        np.testing.assert_allclose(total(torch.tensor(1.5)).numpy(), expected, rtol=1e-5)
        return
    w, x = torch.tensor(1.5, requires_grad=True), x.requires_grad_(True)
    (inner,) = torch.autograd.grad(y_of_u(w * x), x, create_graph=True)
    (outer,) = torch.autograd.grad(torch.sum(inner), w)
    np.testing.assert_allclose(outer.numpy(), expected, rtol=1e-5)


def test_an_outer_grad_of_a_value_taken_inside_an_inner_one_sees_the_override():
    """loss = y + sum(dy/dx): d/dw counts the override on both terms, as nested TensorFlow tapes do."""

    def d_loss_d_w(f):
        w, x = torch.tensor(1.5, requires_grad=True), t([0.3, 0.2, 0.1]).requires_grad_(True)
        value = f(w * x)
        (grad,) = torch.autograd.grad(value, x, create_graph=True)
        (outer,) = torch.autograd.grad(value + torch.sum(grad), w)
        return outer.numpy()

    np.testing.assert_allclose(d_loss_d_w(lambda u: torch.sum(G.scale(u, 5.0))), 5 * 0.6 + 5 * 3, rtol=1e-6)
    st_round = G.straight_through(keras.ops.round, lambda v: v)
    np.testing.assert_allclose(d_loss_d_w(lambda u: torch.sum(st_round(u))), 0.6 + 3, rtol=1e-6)


def test_torch_func_reverse_mode_runs_and_forward_mode_is_refused():
    jacobian = torch.func.jacrev(lambda u: G.scale(u, 2.0) ** 2)(t([1.0, 3.0]))
    np.testing.assert_allclose(jacobian.numpy(), [[4.0, 0.0], [0.0, 12.0]])
    _, pull = torch.func.vjp(lambda u: G.clip(u, -0.5, 0.5), t([1.0, 2.0, 3.0]))
    np.testing.assert_allclose(pull(t([-2.0, 0.25, 9.0]))[0].numpy(), [-0.5, 0.25, 0.5])
    with pytest.raises(NotImplementedError, match="jvp"):
        torch.func.jvp(lambda u: G.scale(u, 2.0), (torch.ones(2),), (torch.ones(2),))


def test_float16_and_bfloat16_keep_their_dtype():
    x = torch.tensor([1.0, -2.0], dtype=torch.float16, requires_grad=True)
    weights = torch.tensor([2.0, 0.5], dtype=torch.float16)
    (g,) = torch.autograd.grad(torch.sum(G.clip(G.scale(x, 3.0), -1.0, 1.0) * weights), x)
    assert g.dtype == torch.float16
    np.testing.assert_allclose(g.numpy(), [3.0, 1.5])
    doubled = G.numpy_function(lambda h: h * 2, lambda h, dy: 3 * dy, output_dtype="bfloat16")  # NumPy has no bfloat16
    x = torch.tensor([1.0, -2.0], dtype=torch.bfloat16, requires_grad=True)
    y = doubled(x)
    (g,) = torch.autograd.grad(torch.sum(y), x)
    assert y.dtype == g.dtype == torch.bfloat16
    np.testing.assert_array_equal(y.detach().float().numpy(), [2.0, -4.0])
    np.testing.assert_array_equal(g.float().numpy(), [3.0, 3.0])


def _two_linear_layers(middle, seed=0):
    inp = keras.Input((3,))
    h = keras.layers.Dense(4, use_bias=False, name="first")(inp)
    out = keras.layers.Dense(2, use_bias=False, name="second")(middle(h))
    model = keras.Model(inp, out)
    rng = np.random.default_rng(seed)
    model.get_layer("first").set_weights([rng.normal(size=(3, 4)).astype(np.float32)])
    model.get_layer("second").set_weights([rng.normal(size=(4, 2)).astype(np.float32)])
    return model


def _one_sgd_step(model, x, target, lr=0.1):
    model.compile(optimizer=keras.optimizers.SGD(lr), loss="mse")
    model.fit(x, target, batch_size=len(x), epochs=1, shuffle=False, verbose=0)


def _manual_first_layer_step(w1, w2, x, target, backward_at_h, lr=0.1, forward=lambda h: h):
    """One SGD step on w1 for mse(forward(x w1) w2, target), with dL/dh passed through ``backward_at_h``."""
    out = forward(x @ w1) @ w2
    d_out = 2.0 * (out - target) / out.size
    return w1 - lr * x.T @ backward_at_h(d_out @ w2.T)


FIT = [
    ("scale_zero", lambda: sk.layers.GradientScale(0.0), lambda d: 0.0 * d, None),
    ("scale_reversed", lambda: sk.layers.GradientScale(-2.0), lambda d: -2.0 * d, None),
    ("clip", lambda: sk.layers.GradientClip(-0.01, 0.01), lambda d: np.clip(d, -0.01, 0.01), None),
    ("clip_norm", lambda: sk.layers.GradientClipNorm(0.05), lambda d: d * min(1.0, 0.05 / np.linalg.norm(d)), None),
    (
        "clip_norm_per_sample",
        lambda: sk.layers.GradientClipNorm(0.05, per_sample=True),
        lambda d: d * np.minimum(1.0, 0.05 / np.linalg.norm(d, axis=1, keepdims=True)),
        None,
    ),
    (
        "straight_through",
        lambda: keras.layers.Lambda(G.straight_through(keras.ops.round, lambda v: v)),
        lambda d: d,
        np.round,
    ),
    (  # a NumPy cube whose declared gradient is 3 (its true one is 3 h**2): the declared one trains
        "numpy_function",
        lambda: keras.layers.Lambda(G.numpy_function(lambda h: h**3, lambda h, dy: 3.0 * dy)),
        lambda d: 3.0 * d,
        lambda h: h**3,
    ),
]


@pytest.mark.parametrize("name,middle,backward_at_h,forward", FIT, ids=[f[0] for f in FIT])
def test_one_fit_step_on_torch(name, middle, backward_at_h, forward):
    rng = np.random.default_rng(1)
    x, target = rng.normal(size=(8, 3)).astype(np.float32), rng.normal(size=(8, 2)).astype(np.float32)
    model = _two_linear_layers(middle())
    w1, w2 = (w.copy() for w in model.get_weights())
    _one_sgd_step(model, x, target)
    expected = _manual_first_layer_step(w1, w2, x, target, backward_at_h, forward=forward or (lambda h: h))
    np.testing.assert_allclose(model.get_layer("first").get_weights()[0], expected, rtol=1e-5, atol=1e-6)
    if name == "scale_zero":
        np.testing.assert_array_equal(model.get_layer("first").get_weights()[0], w1)


@pytest.mark.parametrize(
    "middle,factor",
    [
        (lambda: sk.layers.GradientScale(-2.0), -2.0),
        (lambda: keras.layers.Lambda(G.numpy_function(lambda h: h.copy(), lambda h, dy: 0.5 * dy)), 0.5),
    ],
    ids=["GradientScale", "numpy_function"],
)
def test_explain_takes_the_gradient_through_the_tools(middle, factor):
    """sk.explain's gradient on PyTorch passes through the overrides: ``factor * w1 @ w2[:, 1]``."""
    model = _two_linear_layers(middle())
    w1, w2 = model.get_weights()
    x = np.random.default_rng(3).normal(size=(4, 3)).astype(np.float32)
    explanation = sk.explain(model, x, "gradient", targets=1)
    np.testing.assert_allclose(explanation.attributions[:, 0], np.tile(factor * w1 @ w2[:, 1], (4, 1)), rtol=1e-5)
    np.testing.assert_allclose(explanation.scores.ravel(), (x @ w1 @ w2)[:, 1], rtol=1e-5)


SAVE_AND_LOAD = """
import sys
sys.modules["tensorflow"] = None  # as if TensorFlow were not installed (Keras' saving imports it if it is)
import keras, numpy as np, torch
import saliency_kit as sk
inp = keras.Input((3,))
h = keras.layers.Dense(4)(inp)
h = sk.layers.GradientScale(0.5, name="gs")(h)
h = sk.layers.GradientClip(-0.2, 0.3, name="gc")(h)
h = sk.layers.GradientClipNorm(2.0, per_sample=True, name="gn")(h)
model = keras.Model(inp, keras.layers.Dense(1)(h))
model.save(sys.argv[1])
loaded = keras.models.load_model(sys.argv[1])  # safe mode: no custom_objects, no unsafe code
x = torch.as_tensor(np.random.default_rng(0).normal(size=(5, 3)), dtype=torch.float32)
grads = []
for m in (model, loaded):
    point = x.clone().requires_grad_(True)
    grads.append(torch.autograd.grad(torch.sum(m(point)), point)[0].numpy())
np.testing.assert_allclose(grads[1], grads[0], rtol=1e-6)
assert (loaded.get_layer("gc").low, loaded.get_layer("gc").high, loaded.get_layer("gn").per_sample) == (-0.2, 0.3, True)
print("loaded")
"""


def test_layers_save_and_load_on_torch_without_tensorflow(tmp_path):
    root = pathlib.Path(sk.__file__).resolve().parents[1]
    env = {**os.environ, "KERAS_BACKEND": "torch", "PYTHONPATH": str(root)}
    out = subprocess.run(
        [sys.executable, "-c", SAVE_AND_LOAD, str(tmp_path / "m.keras")], capture_output=True, text=True, env=env
    )
    assert out.returncode == 0 and out.stdout.strip() == "loaded", out.stderr[-2000:]
