"""Gradient overrides: keep the forward pass, change the backward pass.

Every function here works eagerly, inside ``tf.function``, inside Keras models trained with
``fit`` and under nested ``tf.GradientTape``s. For layers you can put in a model (and save), see
:mod:`saliency_kit.gradients.layers`.

=======================================  =====================  ==================================
call                                     forward                backward (``dx`` for incoming ``dy``)
=======================================  =====================  ==================================
``scale(x, factor)``                     ``x``                  ``dy * factor``
``clip(x, low, high)``                   ``x``                  ``clip(dy, low, high)`` element-wise
``clip_norm(x, max_norm)``               ``x``                  ``dy * min(1, max_norm / ||dy||)``
``straight_through(fwd, bwd)(x)``        ``fwd(x)``             ``dy * d bwd / dx``
``numpy_function(fn, grad_fn)(*xs)``     ``fn(*xs)`` (NumPy)    ``grad_fn(*xs, dy)`` (NumPy)
=======================================  =====================  ==================================

Under nested tapes the override applies at every order: with ``y = scale(x, 5)``, every
derivative that passes through ``y`` is multiplied by 5, including when an outer tape
differentiates a gradient computed by an inner one. ``numpy_function``'s gradient is computed in
NumPy and has no gradient of its own (an outer tape sees it as a constant).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

__all__ = ["scale", "clip", "clip_norm", "straight_through", "numpy_function"]


def _as_tensor(x: Any) -> Any:
    return x if isinstance(x, (tf.Tensor, tf.Variable)) else tf.convert_to_tensor(x)


def scale(x: Any, factor: Any) -> Any:
    """Identity on the forward pass; the gradient is multiplied by ``factor``.

    ``factor`` is a Python number or a scalar tensor (``-1`` reverses the gradient, as in
    domain-adversarial training; ``0`` stops it while keeping the value).
    """

    @tf.custom_gradient
    def _scale(x: Any) -> Any:
        def backward(dy: Any) -> Any:
            return dy * tf.cast(factor, dy.dtype)

        return tf.identity(x), backward

    return _scale(_as_tensor(x))


def clip(x: Any, low: Any, high: Any) -> Any:
    """Identity on the forward pass; the gradient is clipped element-wise to ``[low, high]``."""
    if isinstance(low, (int, float)) and isinstance(high, (int, float)) and low > high:
        raise ValueError(f"clip needs low <= high; received low={low}, high={high}")

    @tf.custom_gradient
    def _clip(x: Any) -> Any:
        def backward(dy: Any) -> Any:
            return tf.clip_by_value(dy, tf.cast(low, dy.dtype), tf.cast(high, dy.dtype))

        return tf.identity(x), backward

    return _clip(_as_tensor(x))


def clip_norm(x: Any, max_norm: Any, axes: Any = None) -> Any:
    """Identity on the forward pass; the gradient is rescaled so that its L2 norm is at most
    ``max_norm`` (``tf.clip_by_norm``).

    Args:
        x: any float tensor.
        max_norm: a positive number.
        axes: the axes the norm is taken over; ``None`` (default) takes it over the whole
            gradient, ``axes=range(1, rank)`` clips each sample of a batch separately.
    """
    if isinstance(max_norm, (int, float)) and max_norm <= 0:
        raise ValueError(f"clip_norm needs max_norm > 0; received {max_norm}")

    @tf.custom_gradient
    def _clip_norm(x: Any) -> Any:
        def backward(dy: Any) -> Any:
            return tf.clip_by_norm(dy, tf.cast(max_norm, dy.dtype), axes=axes)

        return tf.identity(x), backward

    return _clip_norm(_as_tensor(x))


def straight_through(forward: Callable, backward: Callable) -> Callable:
    """A function ``f`` with ``f(x) == forward(x)`` and ``df/dx == d backward(x) / dx``.

    The classic straight-through estimator is ``straight_through(tf.round, tf.identity)``:
    rounding on the forward pass, the identity's gradient on the backward pass.
    ``forward`` and ``backward`` take and return one tensor of the same shape; ``backward`` must be
    differentiable. ``forward(x)`` is returned exactly as computed (it is not rebuilt as
    ``backward(x) + stop_gradient(forward(x) - backward(x))``, which rounds differently).
    """

    def f(x: Any) -> Any:
        x = _as_tensor(x)

        @tf.custom_gradient
        def _straight_through(x: Any) -> Any:
            def grad(dy: Any) -> Any:
                with tf.GradientTape() as tape:
                    tape.watch(x)
                    surrogate = backward(x)
                return tape.gradient(surrogate, x, output_gradients=dy)

            return forward(x), grad

        return _straight_through(x)

    f.__name__ = f"straight_through_{getattr(forward, '__name__', 'forward')}"
    return f


def numpy_function(fn: Callable, grad_fn: Callable, output_dtype: Any = tf.float32) -> Callable:
    """A differentiable TensorFlow op from a NumPy function and a NumPy gradient.

    Args:
        fn: ``fn(*arrays) -> array``, run with ``tf.numpy_function`` on the forward pass.
        grad_fn: ``grad_fn(*arrays, dy) -> one gradient per input`` (a tuple, or a single array
            when there is one input); NumPy arrays in and out. Each gradient is cast to its input's
            dtype and must have its input's shape. ``None`` marks an input with no gradient.
        output_dtype: dtype of ``fn``'s result.

    Returns:
        ``op(*tensors) -> tensor``. The result's static shape is the broadcast of the inputs'
        static shapes when ``fn`` keeps that shape (as element-wise functions do), otherwise
        unknown; the op is not differentiable twice (an outer tape sees its gradient as constant).

    Example, the element-wise ``x mod y`` with ``d/dx = 1`` and ``d/dy = -floor(x / y)``::

        mod = numpy_function(np.mod, lambda x, y, dy: (dy, -dy * np.floor(x / y)))
    """
    output_dtype = tf.as_dtype(output_dtype)

    def op(*given: Any) -> Any:
        tensors = [_as_tensor(t) for t in given]
        if not tensors:
            raise ValueError("a numpy_function op needs at least one input tensor")

        @tf.custom_gradient
        def _op(*xs: Any) -> Any:
            y = tf.numpy_function(fn, list(xs), output_dtype, stateful=False)
            y.set_shape(_broadcast_static_shape(xs))

            def backward(dy: Any) -> Any:
                dtypes = [x.dtype if x.dtype.is_floating or x.dtype.is_complex else tf.float32 for x in xs]
                grads = tf.numpy_function(
                    lambda *args: _checked_grads(grad_fn, args, len(xs), dtypes),
                    [*xs, dy],
                    dtypes,
                    stateful=False,
                )
                grads = grads if isinstance(grads, (list, tuple)) else [grads]
                result: list[Any] = []
                for x, g in zip(xs, grads):
                    if not (x.dtype.is_floating or x.dtype.is_complex):
                        result.append(None)  # integer inputs have no gradient
                        continue
                    g.set_shape(x.shape)
                    result.append(g)
                return result

            return y, backward

        return _op(*tensors)

    op.__name__ = getattr(fn, "__name__", "numpy_function")
    return op


def _broadcast_static_shape(xs: Sequence[tf.Tensor]) -> tf.TensorShape:
    shape = tf.TensorShape(xs[0].shape)
    try:
        for x in xs[1:]:
            shape = tf.broadcast_static_shape(shape, x.shape)
    except ValueError:
        return tf.TensorShape(None)
    return shape


def _checked_grads(grad_fn: Any, args: Any, n_inputs: Any, dtypes: Any) -> Any:
    """Call ``grad_fn`` and return one array per input, of the input's shape and dtype."""
    *inputs, dy = args
    grads = grad_fn(*inputs, dy)
    if n_inputs == 1 and not isinstance(grads, (tuple, list)):
        grads = (grads,)
    if len(grads) != n_inputs:
        raise ValueError(
            f"numpy_function's grad_fn returned {len(grads)} gradients for {n_inputs} inputs; "
            "it must return one gradient per input (None for none)"
        )
    out = []
    for x, g, dtype in zip(inputs, grads, dtypes):
        g = np.zeros(np.shape(x)) if g is None else np.asarray(g)
        if g.shape != np.shape(x):
            try:  # a gradient for a broadcast input arrives in the output's shape: sum it back
                g = _unbroadcast(g, np.shape(x))
            except ValueError:
                raise ValueError(
                    f"numpy_function's grad_fn returned a gradient of shape {g.shape} for an input "
                    f"of shape {np.shape(x)}"
                ) from None
        out.append(g.astype(dtype.as_numpy_dtype))
    return out


def _unbroadcast(g: np.ndarray, shape: tuple) -> np.ndarray:
    """Sum ``g`` over the axes along which an input of ``shape`` was broadcast."""
    if np.broadcast_shapes(g.shape, shape) != g.shape:
        raise ValueError("not a broadcast of the input")
    extra = g.ndim - len(shape)
    g = g.sum(axis=tuple(range(extra))) if extra else g
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and g.shape[i] != 1)
    return g.sum(axis=axes, keepdims=True) if axes else g
