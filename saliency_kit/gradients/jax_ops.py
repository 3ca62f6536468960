"""The gradient tools' JAX mechanisms (see :mod:`.ops`): a function with its own gradient by
``jax.custom_vjp``, a vector-Jacobian product by ``jax.vjp`` and a NumPy call by
``jax.pure_callback``. Imported only on JAX.

``keras.ops.custom_gradient`` is not used here: on JAX it is ``jax.custom_gradient``, whose forward
pass runs the function as plain code under every outer transformation. An outer ``jax.grad`` that
differentiates a value computed inside an inner one (a loss plus its gradient's norm) then sees the
plain derivative of the forward, not the override (``scale(x, 5)`` counts once there, not five
times, unlike TensorFlow's nested tapes), and a forward that JAX cannot differentiate (a NumPy call)
fails. Its other limits: several outputs' gradients arrive as one tuple (TensorFlow passes one
argument each), keyword arguments are refused, and the gradient function is traced when the
forward runs, so it sees no concrete values. :func:`custom_gradient` below calls itself from its
forward rule, so that every level of differentiation sees the override.

JAX compiles a program before running it, so every NumPy call declares its results' shapes and
dtypes first; a result of another shape is refused when it arrives, naming both shapes. Like any
``custom_vjp`` function, the tools are differentiated in reverse mode only: ``jax.jvp``,
``jax.jacfwd`` and ``jax.hessian`` refuse them with JAX's own error.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

__all__ = ["custom_gradient", "vjp", "broadcast_shape", "numpy_dtype", "host_call"]


def custom_gradient(forward: Callable[..., Any], backward: Callable[[Sequence[Any], Any], Any]) -> Callable:
    """``op(*xs)`` returning ``forward(*xs)`` (one array), whose gradient for the incoming ``dy`` is
    ``backward(xs, dy)``: one gradient per input (``None`` for none, as for integer inputs); an
    input alone gets its gradient alone. Every level of ``jax.grad``, nested ones included, uses
    ``backward``; ``backward``'s own operations are differentiated by the levels above."""

    @jax.custom_vjp
    def op(*xs: Any) -> Any:
        return forward(*xs)

    def forward_rule(*xs: Any) -> tuple[Any, tuple[Any, ...]]:
        return op(*xs), xs  # op itself, not forward: an outer level sees the override too

    def backward_rule(xs: tuple[Any, ...], dy: Any) -> tuple[Any, ...]:
        grads = backward(xs, dy)
        return tuple(grads) if isinstance(grads, (tuple, list)) else (grads,)

    op.defvjp(forward_rule, backward_rule)
    return op


def vjp(fn: Callable[[Any], Any], x: Any, dy: Any) -> Any:
    """``dy``'s pull-back through ``fn`` at ``x``: ``sum(dy * d fn(x) / dx)``, shaped like ``x``."""
    _, pull_back = jax.vjp(fn, x)
    (dx,) = pull_back(dy)
    return dx


def broadcast_shape(shapes: Sequence[tuple]) -> tuple[Any, ...]:
    """The broadcast of the inputs' shapes, which a NumPy call's result is declared to have when
    it declares nothing else. A dimension may be symbolic (Keras infers a layer's output shape
    with a symbolic batch size)."""
    rank = max(len(shape) for shape in shapes)
    padded = [(1,) * (rank - len(shape)) + tuple(shape) for shape in shapes]
    result = []
    for dims in zip(*padded):
        sizes = [d for d in dims if not (isinstance(d, int) and d == 1)]
        if any(not _same_size(d, sizes[0]) for d in sizes[1:]):
            raise ValueError(
                f"numpy_function on the JAX backend declares its result's shape before running fn: the "
                f"inputs' shapes {', '.join(map(str, shapes))} do not broadcast, so pass "
                "output_shape=lambda *shapes: RESULT_SHAPE"
            )
        result.append(sizes[0] if sizes else 1)
    return tuple(result)


def _same_size(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:  # two symbolic sizes JAX cannot compare
        return False


def numpy_dtype(dtype: Any) -> np.dtype:
    """The NumPy dtype of a JAX dtype (or name)."""
    return np.dtype(jax.numpy.dtype(dtype))


def host_call(fn: Callable, args: list[Any], results: Sequence[tuple[Any, Any]]) -> list[Any]:
    """``fn(*arrays)`` run in NumPy (``jax.pure_callback``, once per sample under ``jax.vmap``);
    ``results`` lists each result's ``(shape, dtype)``. Returns one array per result."""
    specs = [jax.ShapeDtypeStruct(tuple(shape), numpy_dtype(dtype)) for shape, dtype in results]

    def checked(*arrays: np.ndarray) -> list[np.ndarray]:
        out = fn(*arrays)
        out = list(out) if isinstance(out, (list, tuple)) else [out]
        if len(out) != len(specs):
            raise ValueError(f"a NumPy function declared {len(specs)} results and returned {len(out)}")
        for value, spec in zip(out, specs):
            if np.shape(value) != spec.shape:
                raise ValueError(
                    f"a NumPy function returned a result of shape {np.shape(value)} where {spec.shape} "
                    "was declared (numpy_function: pass output_shape= for a result of another shape)"
                )
        return [np.asarray(value, spec.dtype) for value, spec in zip(out, specs)]

    return list(jax.pure_callback(checked, specs, *args, vmap_method="sequential"))
