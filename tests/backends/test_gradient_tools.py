"""sk.gradients and sk.layers give the same gradients on every backend they run on: each tool,
written in keras.ops, against its NumPy closed form (run under TensorFlow, KERAS_BACKEND=jax and
KERAS_BACKEND=torch)."""

import keras
import numpy as np
import pytest

import saliency_kit as sk

G = sk.gradients
X = np.array([[0.4, 1.6], [2.2, -0.7]], np.float32)
W = np.array([[1.0, -1.0], [0.3, 0.05]], np.float32)
B = np.array([[0.7, 0.7, 1.0], [0.7, 0.7, 1.0]], np.float32)


def gradients(fn, *arrays):
    """The gradients of ``sum(fn(*arrays))`` with respect to each array, by the active backend."""
    tensors = [keras.ops.convert_to_tensor(a) for a in arrays]
    if keras.backend.backend() == "jax":
        import jax

        grads = jax.grad(lambda *t: keras.ops.sum(fn(*t)), argnums=tuple(range(len(tensors))))(*tensors)
    elif keras.backend.backend() == "torch":
        import torch

        tensors = [t.detach().requires_grad_(True) for t in tensors]
        grads = torch.autograd.grad(keras.ops.sum(fn(*tensors)), tensors)
        return [g.numpy() for g in grads]
    else:
        import tensorflow as tf

        with tf.GradientTape() as tape:
            tape.watch(tensors)
            total = keras.ops.sum(fn(*tensors))
        grads = tape.gradient(total, tensors)
    return [np.asarray(g) for g in grads]


def _norm_clipped(d, max_norm):
    return d * min(1.0, max_norm / np.linalg.norm(d))


CASES = [
    # (name, fn, inputs, closed-form gradients of sum(fn(*inputs))); keras.ops.multiply, as a PyTorch
    # tensor that requires a gradient does not multiply a NumPy array
    ("scale", lambda x: G.scale(x, -1.5), [X], [np.full_like(X, -1.5)]),
    ("clip", lambda x: keras.ops.multiply(G.clip(x, -0.1, 0.5), W), [X], [np.clip(W, -0.1, 0.5)]),
    ("clip_norm", lambda x: G.clip_norm(3 * x, 1.0), [X], [3 * _norm_clipped(np.ones_like(X), 1.0)]),
    (
        "clip_norm_per_sample",
        lambda x: keras.ops.multiply(G.clip_norm(x, 1.0, axes=[1]), np.float32([[3.0, 4.0]])),
        [X],
        [np.tile([[0.6, 0.8]], (2, 1))],
    ),
    ("straight_through", G.straight_through(keras.ops.round, lambda t: t**3), [X], [3 * X**2]),
    (
        "numpy_function",
        G.numpy_function(np.mod, lambda x, y, dy: (dy, -dy * np.floor(x / y))),
        [X, B[:, :2]],
        [np.ones_like(X), -np.floor(X / B[:, :2])],
    ),
    (
        "numpy_function_of_another_shape",
        G.numpy_function(np.matmul, lambda a, b, dy: (dy @ b.T, a.T @ dy), output_shape=lambda a, b: (a[0], b[1])),
        [X, B],
        [np.ones((2, 3), np.float32) @ B.T, X.T @ np.ones((2, 3), np.float32)],
    ),
    ("GradientScale", sk.layers.GradientScale(0.5), [X], [np.full_like(X, 0.5)]),
    ("GradientClip", lambda x: sk.layers.GradientClip(-0.2, 0.2)(x) * 3.0, [X], [np.full_like(X, 0.2)]),
    ("GradientClipNorm", lambda x: sk.layers.GradientClipNorm(1.0)(x), [X], [_norm_clipped(np.ones_like(X), 1.0)]),
]


@pytest.mark.parametrize("name,fn,inputs,expected", CASES, ids=[c[0] for c in CASES])
def test_each_tool_is_its_closed_form(name, fn, inputs, expected):
    for got, want in zip(gradients(fn, *inputs), expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_the_forward_pass_is_unchanged():
    for fn in (lambda x: G.scale(x, 3.0), lambda x: G.clip(x, 0.0, 0.0), lambda x: G.clip_norm(x, 0.1)):
        np.testing.assert_array_equal(np.asarray(fn(keras.ops.convert_to_tensor(X))), X)
    rounded = G.straight_through(keras.ops.round, lambda t: t)(keras.ops.convert_to_tensor(X))
    np.testing.assert_array_equal(np.asarray(rounded), np.round(X))
