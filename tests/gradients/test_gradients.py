"""sk.gradients and sk.layers: textbook cases, each eagerly, in tf.function, under nested tapes and in fit."""

import ast
import os
import pathlib
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import saliency_kit as sk
from saliency_kit.gradients import ops

G = sk.gradients
CONTEXTS = ["eager", "tf.function"]


def run(context, fn, *args):
    """Call ``fn(*args)`` eagerly or as a compiled tf.function."""
    return (tf.function(fn) if context == "tf.function" else fn)(*args)


def grad_of(fn, x, *, context):
    def compute(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = fn(x)
        return y, tape.gradient(y, x)

    y, g = run(context, compute, tf.constant(x, tf.float32))
    return y.numpy(), g.numpy()


@pytest.mark.parametrize("context", CONTEXTS)
def test_clip_identity_gradient_to_a_tenth(context):
    x = np.array([0.5, -2.0, 3.0, 0.0], np.float32)
    w = np.array([-1.0, 0.05, 3.0, -0.02], np.float32)
    y, g = grad_of(lambda t: tf.reduce_sum(w * G.clip(t, -0.1, 0.1)), x, context=context)
    np.testing.assert_allclose(y, np.sum(w * x), rtol=1e-6)
    np.testing.assert_allclose(g, [-0.1, 0.05, 0.1, -0.02], rtol=1e-6)


@pytest.mark.parametrize("context", CONTEXTS)
def test_scale_gradient_by_five(context):
    x = np.array([1.0, -2.0, 0.25], np.float32)
    y, g = grad_of(lambda t: tf.reduce_sum(G.scale(t, 5.0) ** 2), x, context=context)
    np.testing.assert_allclose(y, np.sum(x**2), rtol=1e-6)
    np.testing.assert_allclose(g, 5.0 * 2.0 * x, rtol=1e-6)


@pytest.mark.parametrize("context", CONTEXTS)
def test_scale_by_a_tensor_factor_and_reversal(context):
    x = np.array([1.0, 2.0], np.float32)
    _, g = grad_of(lambda t: tf.reduce_sum(G.scale(t, tf.constant(-1.0)) * 3.0), x, context=context)
    np.testing.assert_allclose(g, [-3.0, -3.0])


@pytest.mark.parametrize("context", CONTEXTS)
def test_clip_norm_between_two_matmuls(context):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3, 4)).astype(np.float32)
    w1 = rng.normal(size=(4, 5)).astype(np.float32)
    w2 = rng.normal(size=(5, 2)).astype(np.float32)
    max_norm = 0.5

    y, g = grad_of(lambda t: tf.reduce_sum(G.clip_norm(t @ w1, max_norm) @ w2), x, context=context)

    # By hand: d/dh of sum(h @ w2) is w2's row sums at every (sample, unit); clip its norm; chain.
    dh = np.tile(w2.sum(axis=1), (3, 1))
    dh_clipped = dh * min(1.0, max_norm / np.linalg.norm(dh))
    np.testing.assert_allclose(y, np.sum(x @ w1 @ w2), rtol=1e-5)
    np.testing.assert_allclose(g, dh_clipped @ w1.T, rtol=1e-5)
    assert np.linalg.norm(dh) > max_norm  # the case really clips


def test_clip_norm_per_sample_axes():
    dy = tf.constant([[3.0, 4.0], [0.3, 0.4]])
    x = tf.zeros((2, 2))
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = G.clip_norm(x, 1.0, axes=[1])
    g = tape.gradient(y, x, output_gradients=dy).numpy()
    np.testing.assert_allclose(g, [[0.6, 0.8], [0.3, 0.4]], rtol=1e-6)


def np_mod(x, y):
    return np.mod(x, y).astype(np.float32)


def np_mod_grad(x, y, dy):
    return dy, -dy * np.floor(x / y)


@pytest.mark.parametrize("context", CONTEXTS)
def test_numpy_mod_against_tensorflow_floormod(context):
    """x mod y written in NumPy, gradients 1 and -floor(x/y), against TF's own FloorMod gradient."""
    mod = G.numpy_function(np_mod, np_mod_grad)
    x = tf.constant([5.3, -2.5, 7.0, 0.4])
    y = tf.constant([2.0, 1.5, -3.0, 0.3])

    def both(x, y):
        with tf.GradientTape(persistent=True) as tape:
            tape.watch([x, y])
            ours = mod(x, y)
            theirs = tf.math.floormod(x, y)
        return ours, theirs, tape.gradient(ours, [x, y]), tape.gradient(theirs, [x, y])

    ours, theirs, our_grads, their_grads = run(context, both, x, y)
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-6)
    for a, b in zip(our_grads, their_grads):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6)
    np.testing.assert_allclose(our_grads[1].numpy(), -np.floor(x.numpy() / y.numpy()))
    assert ours.shape == (4,)  # the static shape survives the NumPy call


def test_numpy_function_broadcast_gradient_and_bad_grad_fn():
    mod = G.numpy_function(np_mod, np_mod_grad)
    x = tf.constant([[5.0, 7.0], [-1.0, 2.5]])
    y = tf.constant(2.0)
    with tf.GradientTape() as tape:
        tape.watch(y)
        out = mod(x, y)
    # dy is summed over the axes y was broadcast along
    np.testing.assert_allclose(tape.gradient(out, y).numpy(), -np.floor(x.numpy() / 2.0).sum())

    broken = G.numpy_function(np_mod, lambda x, y, dy: (dy,))
    with tf.GradientTape() as tape:
        tape.watch(x)
        out = broken(x, y)
    with pytest.raises(Exception, match="one gradient per input"):
        tape.gradient(out, x)


@pytest.mark.parametrize("context", CONTEXTS)
def test_straight_through_rounding(context):
    st_round = G.straight_through(tf.round, tf.identity)
    x = np.array([0.2, 0.7, -1.4, 2.5], np.float32)
    y, g = grad_of(lambda t: tf.reduce_sum(3.0 * st_round(t)), x, context=context)
    np.testing.assert_allclose(y, 3.0 * np.sum(np.round(x)))
    np.testing.assert_allclose(g, [3.0] * 4)
    # the gradient is the backward function's own derivative, not always 1
    st_square = G.straight_through(tf.round, lambda t: t**2)
    _, g = grad_of(lambda t: tf.reduce_sum(st_square(t)), x, context=context)
    np.testing.assert_allclose(g, 2 * x, rtol=1e-6)


NESTED = [
    # (name, y(u) applied to u = w * x, closed form of d/dw of sum(dy/dx))
    ("scale", lambda u: tf.reduce_sum(G.scale(u, 5.0)), lambda c: 5.0 * 3),
    (
        "clip",
        lambda u: tf.reduce_sum(tf.constant([-1.0, 0.05, 3.0]) * G.clip(u, -0.1, 0.1)),
        lambda c: -0.1 + 0.05 + 0.1,
    ),
    ("clip_norm", lambda u: tf.reduce_sum(tf.constant([3.0, 0.0, 4.0]) * G.clip_norm(u, 1.0)), lambda c: 0.6 + 0.8),
    ("straight_through", lambda u: tf.reduce_sum(G.straight_through(tf.round, tf.identity)(u)), lambda c: 3.0),
    (
        "numpy_function",
        lambda u: tf.reduce_sum(G.numpy_function(np_mod, np_mod_grad)(u, tf.constant(7.0))),
        lambda c: 3.0,
    ),
]


@pytest.mark.parametrize("context", CONTEXTS)
@pytest.mark.parametrize("name,y_of_u,expected", NESTED, ids=[n[0] for n in NESTED])
def test_under_nested_tapes(name, y_of_u, expected, context):
    """Gradient-penalty shape: an outer tape differentiates a gradient taken by an inner tape."""

    def compute(w, x):
        with tf.GradientTape() as outer:
            outer.watch(w)
            with tf.GradientTape() as inner:
                inner.watch(x)
                y = y_of_u(w * x)
            dydx = inner.gradient(y, x)
            total = tf.reduce_sum(dydx)
        return outer.gradient(total, w)

    w = tf.constant(1.5)
    x = tf.constant([0.3, 0.2, 0.1])
    np.testing.assert_allclose(run(context, compute, w, x).numpy(), expected(None), rtol=1e-5)


def _two_linear_layers(middle, seed=0):
    inp = keras.Input((3,))
    h = keras.layers.Dense(4, use_bias=False, name="first")(inp)
    h = middle(h)
    out = keras.layers.Dense(2, use_bias=False, name="second")(h)
    model = keras.Model(inp, out)
    rng = np.random.default_rng(seed)
    model.get_layer("first").set_weights([rng.normal(size=(3, 4)).astype(np.float32)])
    model.get_layer("second").set_weights([rng.normal(size=(4, 2)).astype(np.float32)])
    return model


def _one_sgd_step(model, x, t, lr=0.1):
    model.compile(optimizer=keras.optimizers.SGD(lr), loss="mse")
    model.fit(x, t, batch_size=len(x), epochs=1, shuffle=False, verbose=0)


@pytest.fixture
def regression_data():
    rng = np.random.default_rng(1)
    return rng.normal(size=(8, 3)).astype(np.float32), rng.normal(size=(8, 2)).astype(np.float32)


def _manual_first_layer_step(w1, w2, x, t, backward_at_h, lr=0.1, forward=lambda h: h):
    """One SGD step on w1 for mse(forward(x w1) w2, t), with dL/dh passed through ``backward_at_h``."""
    out = forward(x @ w1) @ w2
    d_out = 2.0 * (out - t) / out.size
    return w1 - lr * x.T @ backward_at_h(d_out @ w2.T)


def test_gradient_scale_layer_in_fit(regression_data):
    x, t = regression_data
    frozen = _two_linear_layers(sk.layers.GradientScale(0.0))
    before = [v.numpy().copy() for v in frozen.trainable_variables]
    _one_sgd_step(frozen, x, t)
    np.testing.assert_array_equal(frozen.get_layer("first").get_weights()[0], before[0])
    assert not np.allclose(frozen.get_layer("second").get_weights()[0], before[1])

    model = _two_linear_layers(sk.layers.GradientScale(-2.0))
    w1, w2 = (w.copy() for w in model.get_weights())
    _one_sgd_step(model, x, t)
    expected = _manual_first_layer_step(w1, w2, x, t, lambda d: -2.0 * d)
    np.testing.assert_allclose(model.get_layer("first").get_weights()[0], expected, rtol=1e-5, atol=1e-6)


def test_gradient_clip_layers_in_fit(regression_data):
    x, t = regression_data
    model = _two_linear_layers(sk.layers.GradientClip(-0.01, 0.01))
    w1, w2 = (w.copy() for w in model.get_weights())
    _one_sgd_step(model, x, t)
    expected = _manual_first_layer_step(w1, w2, x, t, lambda d: np.clip(d, -0.01, 0.01))
    np.testing.assert_allclose(model.get_layer("first").get_weights()[0], expected, rtol=1e-5, atol=1e-7)

    model = _two_linear_layers(sk.layers.GradientClipNorm(0.05))
    w1, w2 = (w.copy() for w in model.get_weights())
    _one_sgd_step(model, x, t)
    expected = _manual_first_layer_step(w1, w2, x, t, lambda d: d * min(1.0, 0.05 / np.linalg.norm(d)))
    np.testing.assert_allclose(model.get_layer("first").get_weights()[0], expected, rtol=1e-5, atol=1e-7)


def test_straight_through_in_fit(regression_data):
    """Quantisation-aware training: round on the forward pass, identity gradient on the backward."""
    x, t = regression_data
    st_round = G.straight_through(tf.round, tf.identity)
    model = _two_linear_layers(keras.layers.Lambda(st_round))
    w1, w2 = (w.copy() for w in model.get_weights())
    _one_sgd_step(model, x, t)
    expected = _manual_first_layer_step(w1, w2, x, t, lambda d: d, forward=np.round)
    np.testing.assert_allclose(model.get_layer("first").get_weights()[0], expected, rtol=1e-5, atol=1e-6)


def test_numpy_function_in_fit(regression_data):
    """A NumPy cube whose declared gradient is 3 (its true one is 3 h**2): the declared one trains."""
    x, t = regression_data
    cube = G.numpy_function(lambda h: h**3, lambda h, dy: 3.0 * dy)
    model = _two_linear_layers(keras.layers.Lambda(cube))
    w1, w2 = (w.copy() for w in model.get_weights())
    _one_sgd_step(model, x, t)
    expected = _manual_first_layer_step(w1, w2, x, t, lambda d: 3.0 * d, forward=lambda h: h**3)
    np.testing.assert_allclose(model.get_layer("first").get_weights()[0], expected, rtol=1e-5, atol=1e-6)


def test_layers_save_and_load(tmp_path):
    inp = keras.Input((3,))
    h = keras.layers.Dense(4)(inp)
    h = sk.layers.GradientScale(0.5, name="gs")(h)
    h = sk.layers.GradientClip(-0.2, 0.3, name="gc")(h)
    h = sk.layers.GradientClipNorm(2.0, per_sample=True, name="gn")(h)
    model = keras.Model(inp, keras.layers.Dense(1)(h))
    path = tmp_path / "m.keras"
    model.save(path)
    loaded = keras.models.load_model(path)  # safe mode: no custom_objects needed, no unsafe code
    assert loaded.get_layer("gs").factor == 0.5
    assert (loaded.get_layer("gc").low, loaded.get_layer("gc").high) == (-0.2, 0.3)
    assert loaded.get_layer("gn").per_sample is True

    x = tf.constant(np.random.default_rng(0).normal(size=(5, 3)), tf.float32)

    def grads(m):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf.reduce_sum(m(x))
        return tape.gradient(y, x).numpy()

    np.testing.assert_allclose(grads(loaded), grads(model), rtol=1e-6)
    np.testing.assert_allclose(loaded(x).numpy(), model(x).numpy(), rtol=1e-6)


def test_bad_arguments_are_clear():
    with pytest.raises(ValueError, match="low <= high"):
        G.clip(tf.ones(2), 1.0, -1.0)
    with pytest.raises(ValueError, match="max_norm > 0"):
        G.clip_norm(tf.ones(2), 0.0)
    with pytest.raises(ValueError, match="low <= high"):
        sk.layers.GradientClip(1.0, 0.0)


def test_float16_gradients_keep_their_dtype():
    x = tf.constant([1.0, -2.0], tf.float16)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf.reduce_sum(G.clip(G.scale(x, 3.0), -1.0, 1.0) * tf.constant([2.0, 0.5], tf.float16))
    g = tape.gradient(y, x)
    assert g.dtype == tf.float16
    np.testing.assert_allclose(g.numpy(), [3.0, 1.5])


def test_another_backend_is_refused_in_one_line():
    """On a Keras backend the tools do not run on, calling one names the backend and what to use."""
    code = (
        "import numpy as np\n"
        "import saliency_kit.gradients as G\n"
        "try:\n    G.scale(np.ones(2, np.float32), 2.0)\n"
        "except RuntimeError as error:\n    print(type(error).__name__, error)\n"
    )
    root = pathlib.Path(sk.__file__).resolve().parents[1]
    env = {**os.environ, "KERAS_BACKEND": "numpy", "PYTHONPATH": str(root)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    line = out.stdout.strip()
    assert line.startswith("BackendError") and "'numpy'" in line, out
    assert "KERAS_BACKEND=jax" in line and "KERAS_BACKEND=torch" in line, out
    assert len(line.splitlines()) == 1


def test_every_backend_module_offers_the_same_mechanisms():
    """Each module of ops.BACKEND_MODULES defines the same functions (read, not imported: each
    imports its own framework)."""
    folder = pathlib.Path(ops.__file__).parent
    offered = {}
    for backend, module in ops.BACKEND_MODULES.items():
        tree = ast.parse((folder / f"{module}.py").read_text(encoding="utf-8"))
        exported = next(
            ast.literal_eval(node.value)
            for node in tree.body
            if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "__all__"
        )
        defined = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
        assert set(exported) <= defined, (backend, set(exported) - defined)
        offered[backend] = sorted(exported)
    assert (
        offered["tensorflow"]
        == offered["jax"]
        == offered["torch"]
        == ["broadcast_shape", "custom_gradient", "host_call", "numpy_dtype", "vjp"]
    )
