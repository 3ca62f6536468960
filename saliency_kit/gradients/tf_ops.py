"""The gradient tools' TensorFlow mechanisms (see :mod:`.ops`): a function with its own gradient
by ``keras.ops.custom_gradient`` (``tf.custom_gradient``), a vector-Jacobian product by
``tf.GradientTape`` and a NumPy call by ``tf.numpy_function``. Imported only on TensorFlow.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import keras
import tensorflow as tf

__all__ = ["custom_gradient", "vjp", "broadcast_shape", "numpy_dtype", "host_call"]


def custom_gradient(forward: Callable[..., Any], backward: Callable[[Sequence[Any], Any], Any]) -> Callable:
    """``op(*xs)`` returning ``forward(*xs)`` (one tensor), whose gradient for the incoming ``dy`` is
    ``backward(xs, dy)``: one gradient per input (``None`` for none); an input alone gets its
    gradient alone. Every tape that watches the inputs, nested ones included, uses ``backward``."""

    @keras.ops.custom_gradient
    def op(*xs: Any) -> Any:
        def grad(dy: Any) -> Any:
            return backward(xs, dy)

        return forward(*xs), grad

    return op


def vjp(fn: Callable[[Any], Any], x: Any, dy: Any) -> Any:
    """``dy``'s pull-back through ``fn`` at ``x``: ``sum(dy * d fn(x) / dx)``, shaped like ``x``."""
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = fn(x)
    return tape.gradient(y, x, output_gradients=dy)


def broadcast_shape(shapes: Sequence[tuple | None]) -> tf.TensorShape:
    """The broadcast of static shapes (``None`` for an unknown rank or dimension); unknown when
    they do not broadcast."""
    shape = tf.TensorShape(shapes[0])
    try:
        for other in shapes[1:]:
            shape = tf.broadcast_static_shape(shape, tf.TensorShape(other))
    except ValueError:
        return tf.TensorShape(None)
    return shape


def numpy_dtype(dtype: Any) -> Any:
    """The NumPy dtype of a TensorFlow dtype (or name)."""
    return tf.as_dtype(dtype).as_numpy_dtype


def host_call(fn: Callable, args: list[Any], results: Sequence[tuple[Any, Any]]) -> list[Any]:
    """``fn(*arrays)`` run in NumPy; ``results`` lists each result's ``(static shape, dtype)``
    (a shape of ``None``: unknown). Returns one tensor per result, its static shape set."""
    out = tf.numpy_function(fn, args, [tf.as_dtype(dtype) for _, dtype in results], stateful=False)
    out = out if isinstance(out, (list, tuple)) else [out]
    for tensor, (shape, _) in zip(out, results):
        tensor.set_shape(tf.TensorShape(shape))
    return list(out)
