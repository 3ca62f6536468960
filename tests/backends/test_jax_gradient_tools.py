"""sk.gradients and sk.layers on JAX: each tool against its closed-form gradient, under jax.grad and
inside jax.jit, nested, vmapped, in a Keras model trained one step with fit, saved and loaded."""

import keras
import pytest

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "jax", reason="runs in the JAX process: KERAS_BACKEND=jax pytest tests/backends"
)

import os  # noqa: E402
import pathlib  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

import numpy as np  # noqa: E402

import saliency_kit as sk  # noqa: E402

if keras.backend.backend() == "jax":
    import jax
    import jax.numpy as jnp

G = sk.gradients
CONTEXTS = ["eager", "jit"]


def grad_of(fn, x, *, context):
    """``(fn(x), d fn / dx)`` by ``jax.value_and_grad``, eagerly or compiled with ``jax.jit``."""
    compute = jax.value_and_grad(fn)
    compute = jax.jit(compute) if context == "jit" else compute
    y, g = compute(jnp.asarray(x, jnp.float32))
    return np.asarray(y), np.asarray(g)


def pull_back(fn, x, dy):
    """``dy``'s vector-Jacobian product through ``fn`` at ``x``."""
    _, vjp = jax.vjp(fn, jnp.asarray(x, jnp.float32))
    return np.asarray(vjp(jnp.asarray(dy, jnp.float32))[0])


@pytest.mark.parametrize("context", CONTEXTS)
def test_scale_is_the_gradient_times_the_factor(context):
    x = np.array([1.0, -2.0, 0.25], np.float32)
    y, g = grad_of(lambda t: jnp.sum(G.scale(t, 5.0) ** 2), x, context=context)
    np.testing.assert_allclose(y, np.sum(x**2), rtol=1e-6)
    np.testing.assert_allclose(g, 5.0 * 2.0 * x, rtol=1e-6)
    _, g = grad_of(lambda t: jnp.sum(G.scale(t, jnp.float32(-1.0)) * 3.0), x, context=context)
    np.testing.assert_allclose(g, [-3.0, -3.0, -3.0])


@pytest.mark.parametrize("context", CONTEXTS)
def test_clip_is_the_gradient_clipped(context):
    x = np.array([0.5, -2.0, 3.0, 0.0], np.float32)
    w = np.array([-1.0, 0.05, 3.0, -0.02], np.float32)
    y, g = grad_of(lambda t: jnp.sum(w * G.clip(t, -0.1, 0.1)), x, context=context)
    np.testing.assert_allclose(y, np.sum(w * x), rtol=1e-6)
    np.testing.assert_allclose(g, np.clip(w, -0.1, 0.1), rtol=1e-6)


@pytest.mark.parametrize("context", CONTEXTS)
def test_clip_norm_between_two_matmuls(context):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3, 4)).astype(np.float32)
    w1 = rng.normal(size=(4, 5)).astype(np.float32)
    w2 = rng.normal(size=(5, 2)).astype(np.float32)
    y, g = grad_of(lambda t: jnp.sum(G.clip_norm(t @ w1, 0.5) @ w2), x, context=context)
    dh = np.tile(w2.sum(axis=1), (3, 1))  # d/dh of sum(h @ w2), then its norm clipped to 0.5
    assert np.linalg.norm(dh) > 0.5
    np.testing.assert_allclose(y, np.sum(x @ w1 @ w2), rtol=1e-5)
    np.testing.assert_allclose(g, dh * (0.5 / np.linalg.norm(dh)) @ w1.T, rtol=1e-5)


def test_clip_norm_per_sample_and_a_zero_gradient():
    dy = np.array([[3.0, 4.0], [0.3, 0.4]], np.float32)
    g = pull_back(lambda t: G.clip_norm(t, 1.0, axes=[1]), np.zeros((2, 2)), dy)
    np.testing.assert_allclose(g, [[0.6, 0.8], [0.3, 0.4]], rtol=1e-6)
    g = jax.grad(lambda t: jnp.sum(G.clip_norm(t, 1.0) * 0.0))(jnp.ones(3))
    np.testing.assert_array_equal(np.asarray(g), [0.0, 0.0, 0.0])  # no NaN from a zero norm


@pytest.mark.parametrize("context", CONTEXTS)
def test_straight_through_is_the_backward_functions_gradient(context):
    x = np.array([0.2, 0.7, -1.4, 2.5], np.float32)
    st_round = G.straight_through(keras.ops.round, lambda t: t)
    y, g = grad_of(lambda t: jnp.sum(3.0 * st_round(t)), x, context=context)
    np.testing.assert_allclose(y, 3.0 * np.sum(np.round(x)))
    np.testing.assert_allclose(g, [3.0] * 4)
    st_square = G.straight_through(keras.ops.round, lambda t: t**2)
    _, g = grad_of(lambda t: jnp.sum(st_square(t)), x, context=context)
    np.testing.assert_allclose(g, 2 * x, rtol=1e-6)


def np_mod(x, y):
    return np.mod(x, y).astype(np.float32)


def np_mod_grad(x, y, dy):
    return dy, -dy * np.floor(x / y)


@pytest.mark.parametrize("context", CONTEXTS)
def test_numpy_function_gradient_is_the_declared_one(context):
    mod = G.numpy_function(np_mod, np_mod_grad)
    x = np.array([5.3, -2.5, 7.0, 0.4], np.float32)
    y = np.array([2.0, 1.5, -3.0, 0.3], np.float32)
    compute = jax.value_and_grad(lambda a, b: jnp.sum(mod(a, b) * jnp.arange(1.0, 5.0)), argnums=(0, 1))
    value, (gx, gy) = (jax.jit(compute) if context == "jit" else compute)(x, y)
    weights = np.arange(1.0, 5.0)
    np.testing.assert_allclose(value, np.sum(np.mod(x, y) * weights), rtol=1e-6)
    np.testing.assert_allclose(gx, weights)
    np.testing.assert_allclose(gy, -weights * np.floor(x / y))
    assert mod(x, y).shape == (4,) and mod(x, y).dtype == jnp.float32


def test_numpy_function_broadcast_integer_inputs_and_vmap():
    mod = G.numpy_function(np_mod, np_mod_grad)
    x = np.array([[5.0, 7.0], [-1.0, 2.5]], np.float32)
    g = jax.grad(lambda b: jnp.sum(mod(x, b)))(jnp.float32(2.0))
    np.testing.assert_allclose(g, -np.floor(x / 2.0).sum())  # summed over the broadcast axes

    shift = G.numpy_function(lambda a, n: (a + n).astype(np.float32), lambda a, n, dy: (2.0 * dy, None))
    g = jax.jit(jax.grad(lambda a: jnp.sum(shift(a, jnp.array([1, 2, 3])))))(jnp.zeros(3))
    np.testing.assert_allclose(g, [2.0, 2.0, 2.0])

    per_row = jax.vmap(jax.grad(lambda a: jnp.sum(mod(a, jnp.float32(3.0)))))(jnp.ones((2, 3)))
    np.testing.assert_allclose(per_row, np.ones((2, 3)))


def test_numpy_function_of_another_shape_declares_it():
    rng = np.random.default_rng(2)
    a = rng.normal(size=(3, 4)).astype(np.float32)
    b = rng.normal(size=(4, 2)).astype(np.float32)
    product = G.numpy_function(
        lambda a, b: (a @ b).astype(np.float32),
        lambda a, b, dy: (dy @ b.T, a.T @ dy),
        output_shape=lambda a_shape, b_shape: (a_shape[0], b_shape[1]),
    )
    ga, gb = jax.jit(jax.grad(lambda a, b: jnp.sum(product(a, b) ** 2), argnums=(0, 1)))(a, b)
    np.testing.assert_allclose(ga, 2 * (a @ b) @ b.T, rtol=1e-5)
    np.testing.assert_allclose(gb, 2 * a.T @ (a @ b), rtol=1e-5)

    undeclared = G.numpy_function(lambda a, b: (a @ b).astype(np.float32), lambda a, b, dy: (None, None))
    with pytest.raises(ValueError, match="JAX backend .* do not broadcast, so pass output_shape="):
        undeclared(a, b)
    summed = G.numpy_function(lambda a: a.sum(0), lambda a, dy: np.broadcast_to(dy, a.shape))
    with pytest.raises(Exception, match=r"shape \(4,\) where \(3, 4\) was declared"):
        np.asarray(summed(a))


def test_numpy_function_bad_grad_fn_is_clear():
    broken = G.numpy_function(np_mod, lambda x, y, dy: (dy,))
    with pytest.raises(Exception, match="one gradient per input"):
        np.asarray(jax.grad(lambda a: jnp.sum(broken(a, jnp.float32(2.0))))(jnp.ones(2)))


NESTED = [
    # (name, y(u) applied to u = w * x, closed form of d/dw of sum(dy/dx) at w = 1.5)
    ("scale", lambda u: jnp.sum(G.scale(u, 5.0)), 5.0 * 3),
    ("clip", lambda u: jnp.sum(jnp.array([-1.0, 0.05, 3.0]) * G.clip(u, -0.1, 0.1)), -0.1 + 0.05 + 0.1),
    ("clip_norm", lambda u: jnp.sum(jnp.array([3.0, 0.0, 4.0]) * G.clip_norm(u, 1.0)), 0.6 + 0.8),
    ("straight_through", lambda u: jnp.sum(G.straight_through(keras.ops.round, lambda t: t)(u)), 3.0),
    ("straight_through_square", lambda u: jnp.sum(G.straight_through(keras.ops.round, jnp.square)(u)), 4 * 1.5 * 0.6),
    ("numpy_function", lambda u: jnp.sum(G.numpy_function(np_mod, np_mod_grad)(u, jnp.float32(7.0))), 3.0),
]


@pytest.mark.parametrize("context", CONTEXTS)
@pytest.mark.parametrize("name,y_of_u,expected", NESTED, ids=[n[0] for n in NESTED])
def test_under_nested_grads(name, y_of_u, expected, context):
    """Gradient-penalty shape: an outer jax.grad differentiates a gradient taken by an inner one."""
    x = jnp.array([0.3, 0.2, 0.1])

    def total(w):
        return jnp.sum(jax.grad(lambda x: y_of_u(w * x))(x))

    outer = jax.grad(total)
    np.testing.assert_allclose((jax.jit(outer) if context == "jit" else outer)(1.5), expected, rtol=1e-5)


def test_an_outer_grad_of_a_value_taken_inside_an_inner_one_sees_the_override():
    """loss = y + sum(dy/dx): d/dw counts the override on both terms, as nested TensorFlow tapes do
    (``jax.custom_gradient`` alone gives 0.6 + 15: the value's term unscaled)."""
    x = jnp.array([0.3, 0.2, 0.1])

    def loss(w, f):
        value, grad = jax.value_and_grad(lambda x: f(w * x))(x)
        return value + jnp.sum(grad)

    np.testing.assert_allclose(jax.grad(loss)(1.5, lambda u: jnp.sum(G.scale(u, 5.0))), 5 * 0.6 + 5 * 3, rtol=1e-6)
    st_round = G.straight_through(keras.ops.round, lambda t: t)
    np.testing.assert_allclose(jax.grad(loss)(1.5, lambda u: jnp.sum(st_round(u))), 0.6 + 3, rtol=1e-6)


def test_forward_mode_is_refused_by_jax():
    with pytest.raises(TypeError, match="forward-mode"):
        jax.jvp(lambda t: G.scale(t, 2.0), (jnp.ones(2),), (jnp.ones(2),))


def test_float16_gradients_keep_their_dtype():
    g = jax.grad(lambda t: jnp.sum(G.clip(G.scale(t, 3.0), -1.0, 1.0) * jnp.array([2.0, 0.5], jnp.float16)))(
        jnp.array([1.0, -2.0], jnp.float16)
    )
    assert g.dtype == jnp.float16
    np.testing.assert_allclose(np.asarray(g), [3.0, 1.5])


def _two_linear_layers(middle, seed=0):
    inp = keras.Input((3,))
    h = keras.layers.Dense(4, use_bias=False, name="first")(inp)
    out = keras.layers.Dense(2, use_bias=False, name="second")(middle(h))
    model = keras.Model(inp, out)
    rng = np.random.default_rng(seed)
    model.get_layer("first").set_weights([rng.normal(size=(3, 4)).astype(np.float32)])
    model.get_layer("second").set_weights([rng.normal(size=(4, 2)).astype(np.float32)])
    return model


def _one_sgd_step(model, x, t, lr=0.1):
    model.compile(optimizer=keras.optimizers.SGD(lr), loss="mse")
    model.fit(x, t, batch_size=len(x), epochs=1, shuffle=False, verbose=0)


def _manual_first_layer_step(w1, w2, x, t, backward_at_h, lr=0.1, forward=lambda h: h):
    """One SGD step on w1 for mse(forward(x w1) w2, t), with dL/dh passed through ``backward_at_h``."""
    out = forward(x @ w1) @ w2
    d_out = 2.0 * (out - t) / out.size
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
        lambda: keras.layers.Lambda(G.straight_through(keras.ops.round, lambda t: t)),
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
def test_one_fit_step_on_jax(name, middle, backward_at_h, forward):
    rng = np.random.default_rng(1)
    x, t = rng.normal(size=(8, 3)).astype(np.float32), rng.normal(size=(8, 2)).astype(np.float32)
    model = _two_linear_layers(middle())
    w1, w2 = (w.copy() for w in model.get_weights())
    _one_sgd_step(model, x, t)
    expected = _manual_first_layer_step(w1, w2, x, t, backward_at_h, forward=forward or (lambda h: h))
    np.testing.assert_allclose(model.get_layer("first").get_weights()[0], expected, rtol=1e-5, atol=1e-6)
    if name == "scale_zero":
        np.testing.assert_array_equal(model.get_layer("first").get_weights()[0], w1)


SAVE_AND_LOAD = """
import sys
sys.modules["tensorflow"] = None  # as if TensorFlow were not installed (Keras' saving imports it if it is)
import jax, jax.numpy as jnp, keras, numpy as np
import saliency_kit as sk
inp = keras.Input((3,))
h = keras.layers.Dense(4)(inp)
h = sk.layers.GradientScale(0.5, name="gs")(h)
h = sk.layers.GradientClip(-0.2, 0.3, name="gc")(h)
h = sk.layers.GradientClipNorm(2.0, per_sample=True, name="gn")(h)
model = keras.Model(inp, keras.layers.Dense(1)(h))
model.save(sys.argv[1])
loaded = keras.models.load_model(sys.argv[1])  # safe mode: no custom_objects, no unsafe code
x = jnp.asarray(np.random.default_rng(0).normal(size=(5, 3)), jnp.float32)
grads = [np.asarray(jax.grad(lambda x: jnp.sum(m(x)))(x)) for m in (model, loaded)]
np.testing.assert_allclose(grads[1], grads[0], rtol=1e-6)
assert (loaded.get_layer("gc").low, loaded.get_layer("gc").high, loaded.get_layer("gn").per_sample) == (-0.2, 0.3, True)
print("loaded")
"""


def test_layers_save_and_load_on_jax_without_tensorflow(tmp_path):
    root = pathlib.Path(sk.__file__).resolve().parents[1]
    env = {**os.environ, "KERAS_BACKEND": "jax", "PYTHONPATH": str(root)}
    out = subprocess.run(
        [sys.executable, "-c", SAVE_AND_LOAD, str(tmp_path / "m.keras")], capture_output=True, text=True, env=env
    )
    assert out.returncode == 0 and out.stdout.strip() == "loaded", out.stderr[-2000:]
