"""Gradient overrides: keep the forward pass, change the backward pass.

Every function here is written once in ``keras.ops`` and runs on Keras' TensorFlow, JAX and
PyTorch backends: eagerly, inside ``tf.function`` or ``jax.jit``, inside Keras models trained with
``fit``, and under nested ``tf.GradientTape``s, ``jax.grad``s or ``torch.autograd.grad``s with
``create_graph=True``. The three things a backend does its own way (a function with its own
gradient, the gradient of a function at a point, calling NumPy from a compiled program) live in
:mod:`.tf_ops`, :mod:`.jax_ops` and :mod:`.torch_ops`. For layers you can put in a
model (and save), see :mod:`saliency_kit.gradients.layers`.

=======================================  =====================  ==================================
call                                     forward                backward (``dx`` for incoming ``dy``)
=======================================  =====================  ==================================
``scale(x, factor)``                     ``x``                  ``dy * factor``
``clip(x, low, high)``                   ``x``                  ``clip(dy, low, high)`` element-wise
``clip_norm(x, max_norm)``               ``x``                  ``dy * min(1, max_norm / ||dy||)``
``straight_through(fwd, bwd)(x)``        ``fwd(x)``             ``dy * d bwd / dx``
``numpy_function(fn, grad_fn)(*xs)``     ``fn(*xs)`` (NumPy)    ``grad_fn(*xs, dy)`` (NumPy)
=======================================  =====================  ==================================

Under nested tapes (or ``jax.grad`` of a ``jax.grad``, or PyTorch gradients taken with
``create_graph=True``) the override applies at every order: with
``y = scale(x, 5)``, every derivative that passes through ``y`` is multiplied by 5, including when
an outer tape differentiates a gradient computed by an inner one. ``numpy_function``'s gradient is
computed in NumPy and has no gradient of its own (an outer tape sees it as a constant).

On JAX each tool is a ``custom_vjp`` function, so it is differentiated in reverse mode only
(``jax.grad``, ``jax.vjp``, ``jax.jacrev``, Keras' ``fit``); ``jax.jvp``, ``jax.jacfwd`` and
``jax.hessian`` refuse it with JAX's own error. On PyTorch each tool is a
``torch.autograd.Function`` without a forward-mode rule: ``backward()``, ``torch.autograd.grad``
and Keras' ``fit`` differentiate it, and so do ``torch.func.grad``, ``vjp``, ``jacrev`` and
``vmap`` (all but ``numpy_function``, which needs its inputs' values); ``torch.func.jvp`` and
``jacfwd`` refuse it with PyTorch's own error. Other Keras backends are refused in one line.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

import keras
import numpy as np

from ..keras_backend import BackendError

__all__ = ["scale", "clip", "clip_norm", "straight_through", "numpy_function"]

# Keras backend -> the module of its own gradient mechanisms (each defines the same five functions)
BACKEND_MODULES = {"tensorflow": "tf_ops", "jax": "jax_ops", "torch": "torch_ops"}


def _backend() -> ModuleType:
    """The active backend's module of :data:`BACKEND_MODULES`, imported on first use so that a JAX
    or PyTorch process never imports TensorFlow; another backend is refused in one line."""
    name = keras.backend.backend()
    if name not in BACKEND_MODULES:
        raise BackendError(
            f"sk.gradients runs on Keras' TensorFlow, JAX and PyTorch backends; received backend {name!r}: "
            "set KERAS_BACKEND=tensorflow, KERAS_BACKEND=jax or KERAS_BACKEND=torch"
        )
    return importlib.import_module(f".{BACKEND_MODULES[name]}", __package__)


def _as_tensor(x: Any) -> Any:
    if isinstance(x, keras.Variable) or not keras.ops.is_tensor(x):
        return keras.ops.convert_to_tensor(x)
    return x  # a backend tensor (or a tf.Variable) goes in as it is


def _with_gradient(x: Any, backward: Callable[[Any], Any]) -> Any:
    """``x`` unchanged on the forward pass, ``backward(dy)`` as its gradient."""
    op = _backend().custom_gradient(keras.ops.copy, lambda xs, dy: backward(dy))
    return op(_as_tensor(x))


def scale(x: Any, factor: Any) -> Any:
    """Identity on the forward pass; the gradient is multiplied by ``factor``.

    ``factor`` is a Python number or a scalar tensor (``-1`` reverses the gradient, as in
    domain-adversarial training; ``0`` stops it while keeping the value).
    """
    return _with_gradient(x, lambda dy: dy * keras.ops.cast(factor, dy.dtype))


def clip(x: Any, low: Any, high: Any) -> Any:
    """Identity on the forward pass; the gradient is clipped element-wise to ``[low, high]``."""
    if isinstance(low, (int, float)) and isinstance(high, (int, float)) and low > high:
        raise ValueError(f"clip needs low <= high; received low={low}, high={high}")

    def backward(dy: Any) -> Any:
        return keras.ops.clip(dy, keras.ops.cast(low, dy.dtype), keras.ops.cast(high, dy.dtype))

    return _with_gradient(x, backward)


def clip_norm(x: Any, max_norm: Any, axes: Any = None) -> Any:
    """Identity on the forward pass; the gradient is rescaled so that its L2 norm is at most
    ``max_norm`` (the formula of ``tf.clip_by_norm``).

    Args:
        x: any float tensor.
        max_norm: a positive number.
        axes: the axes the norm is taken over; ``None`` (default) takes it over the whole
            gradient, ``axes=range(1, rank)`` clips each sample of a batch separately.
    """
    if isinstance(max_norm, (int, float)) and max_norm <= 0:
        raise ValueError(f"clip_norm needs max_norm > 0; received {max_norm}")
    axis = None if axes is None else tuple(int(a) for a in axes)
    return _with_gradient(x, lambda dy: _clip_by_norm(dy, max_norm, axis))


def _clip_by_norm(dy: Any, max_norm: Any, axis: tuple[int, ...] | None) -> Any:
    """``dy * max_norm / max(||dy||, max_norm)``, the norm over ``axis`` (all axes for ``None``),
    computed as ``tf.clip_by_norm`` does (a zero ``dy`` has norm 0, without a NaN gradient)."""
    ops = keras.ops
    max_norm = ops.cast(max_norm, dy.dtype)
    squares = ops.sum(dy * dy, axis=axis, keepdims=True)
    positive = squares > 0
    norm = ops.where(positive, ops.sqrt(ops.where(positive, squares, ops.ones_like(squares))), squares)
    return ops.copy((dy * max_norm) / ops.maximum(norm, max_norm))


def straight_through(forward: Callable, backward: Callable) -> Callable:
    """A function ``f`` with ``f(x) == forward(x)`` and ``df/dx == d backward(x) / dx``.

    The classic straight-through estimator is ``straight_through(keras.ops.round, lambda t: t)``
    (``straight_through(tf.round, tf.identity)`` on TensorFlow): rounding on the forward pass, the
    identity's gradient on the backward pass. ``forward`` and ``backward`` take and return one
    tensor of the same shape; ``backward`` must be differentiable by the active backend.
    ``forward(x)`` is returned exactly as computed (it is not rebuilt as
    ``backward(x) + stop_gradient(forward(x) - backward(x))``, which rounds differently).
    """

    def f(x: Any) -> Any:
        backend = _backend()
        op = backend.custom_gradient(forward, lambda xs, dy: backend.vjp(backward, xs[0], dy))
        return op(_as_tensor(x))

    f.__name__ = f"straight_through_{getattr(forward, '__name__', 'forward')}"
    return f


def numpy_function(
    fn: Callable, grad_fn: Callable, output_dtype: Any = "float32", output_shape: Callable | None = None
) -> Callable:
    """A differentiable op from a NumPy function and a NumPy gradient.

    Args:
        fn: ``fn(*arrays) -> array``, run on the host on the forward pass (``tf.numpy_function`` on
            TensorFlow, ``jax.pure_callback`` on JAX, called directly on PyTorch).
        grad_fn: ``grad_fn(*arrays, dy) -> one gradient per input`` (a tuple, or a single array
            when there is one input); NumPy arrays in and out. Each gradient is cast to its input's
            dtype and must have its input's shape (or the output's, for an input that was
            broadcast: it is summed back). ``None`` marks an input with no gradient.
        output_dtype: dtype of ``fn``'s result (a name such as ``"float32"``, or a dtype).
        output_shape: ``output_shape(*input_shapes) -> shape`` of ``fn``'s result, each shape a
            tuple; ``None`` (default) declares the broadcast of the inputs' shapes, as element-wise
            functions keep. JAX needs every result's shape before running ``fn``: give it when
            ``fn`` changes the shape.

    Returns:
        ``op(*tensors) -> tensor``. On TensorFlow the result's static shape is ``output_shape``'s,
        else the broadcast of the inputs' static shapes, else unknown; on JAX it is
        ``output_shape``'s or the broadcast (inputs that do not broadcast are refused); on PyTorch
        the result is checked against ``output_shape``'s or the broadcast (any shape when the
        inputs do not broadcast). The op is
        not differentiable twice (an outer tape sees its gradient as constant).

    Example, the element-wise ``x mod y`` with ``d/dx = 1`` and ``d/dy = -floor(x / y)``::

        mod = numpy_function(np.mod, lambda x, y, dy: (dy, -dy * np.floor(x / y)))
    """

    def op(*given: Any) -> Any:
        tensors = [_as_tensor(t) for t in given]
        if not tensors:
            raise ValueError("a numpy_function op needs at least one input tensor")
        backend = _backend()
        dtype = keras.backend.standardize_dtype(output_dtype)
        shapes = [_static_shape(t) for t in tensors]
        shape = backend.broadcast_shape(shapes) if output_shape is None else tuple(output_shape(*shapes))
        differentiable = [_differentiable(t) for t in tensors]
        grad_dtypes = [t.dtype if d else "float32" for t, d in zip(tensors, differentiable)]
        numpy_dtypes = [backend.numpy_dtype(d) for d in grad_dtypes]

        def forward(*xs: Any) -> Any:
            (y,) = backend.host_call(fn, list(xs), [(shape, dtype)])
            return y

        def backward(xs: Sequence[Any], dy: Any) -> tuple[Any, ...]:
            held = [keras.ops.stop_gradient(t) for t in [*xs, dy]]  # constants to an outer tape
            grads = backend.host_call(
                lambda *args: _checked_grads(grad_fn, args, len(xs), numpy_dtypes),
                held,
                list(zip(shapes, grad_dtypes)),
            )
            return tuple(g if d else None for g, d in zip(grads, differentiable))  # integers: none

        return backend.custom_gradient(forward, backward)(*tensors)

    op.__name__ = getattr(fn, "__name__", "numpy_function")
    return op


def _static_shape(x: Any) -> tuple | None:
    try:
        return tuple(x.shape)
    except (TypeError, ValueError):  # a TensorFlow tensor of unknown rank
        return None


def _differentiable(x: Any) -> bool:
    return keras.backend.standardize_dtype(x.dtype).startswith(("float", "bfloat", "complex"))


def _checked_grads(grad_fn: Any, args: Any, n_inputs: Any, dtypes: Sequence[Any]) -> Any:
    """Call ``grad_fn`` and return one array per input, of the input's shape and (NumPy) dtype."""
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
        out.append(g.astype(dtype))
    return out


def _unbroadcast(g: np.ndarray, shape: tuple) -> np.ndarray:
    """Sum ``g`` over the axes along which an input of ``shape`` was broadcast."""
    if np.broadcast_shapes(g.shape, shape) != g.shape:
        raise ValueError("not a broadcast of the input")
    extra = g.ndim - len(shape)
    g = g.sum(axis=tuple(range(extra))) if extra else g
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and g.shape[i] != 1)
    return g.sum(axis=axes, keepdims=True) if axes else g
