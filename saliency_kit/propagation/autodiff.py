"""The automatic differentiation the propagation rules are written in, on the active backend.

Every rule (:mod:`.gates`, :mod:`.core`, :mod:`.products`, :mod:`.elementwise`) is written in
``keras.ops`` and these four functions, so that the same rule runs inside ``tf.function`` and
inside ``jax.jit``:

* :func:`custom_gradient`: ``tf.custom_gradient``'s contract on every backend (``backward``
  returns one gradient per argument, ``None`` for none);
* :func:`pullback`: the value of a function and its vector-Jacobian product;
* :func:`eager_pullback`: the value, with its vector-Jacobian product recorded by the same
  evaluation where the backend runs eagerly (PyTorch), so that a later pull-back needs no second
  forward pass;
* :func:`linearized`: the value, the Jacobian-vector product along one tangent, and the
  vector-Jacobian product, from one evaluation (DeepLIFT's midpoint rule);
* :func:`fused`: a small element-wise function compiled into one pass (XLA on TensorFlow; on JAX
  it already runs inside the caller's ``jax.jit``; ``torch.compile`` on PyTorch, for large tensors).

Each framework is imported only on its own path; PyTorch's are in :mod:`.torch_autodiff`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import keras

__all__ = ["custom_gradient", "identity", "pullback", "eager_pullback", "linearized", "fused", "divide_no_nan"]


def _on_tensorflow() -> bool:
    return keras.backend.backend() == "tensorflow"


def _on_torch() -> bool:
    return keras.backend.backend() == "torch"


def custom_gradient(forward: Callable) -> Callable:
    """``forward(*args) -> (y, backward)`` as a function of ``args`` whose gradient is
    ``backward(dy)``: one gradient per argument (the gradient itself for one argument, a tuple for
    several; ``None`` for an argument without one), as ``tf.custom_gradient`` has it."""
    if _on_tensorflow():
        import tensorflow as tf

        return tf.custom_gradient(forward)
    if _on_torch():
        from . import torch_autodiff

        return torch_autodiff.custom_gradient(forward)
    import jax
    import jax.numpy as jnp

    def with_tuple_gradients(*args: Any) -> Any:
        y, backward = forward(*args)

        def vjp(dy: Any) -> tuple:
            grads = backward(dy)
            grads = tuple(grads) if isinstance(grads, (tuple, list)) else (grads,)
            return tuple(jnp.zeros_like(a) if g is None else g for a, g in zip(args, grads))

        return y, vjp

    return jax.custom_gradient(with_tuple_gradients)


def identity(x: Any) -> Any:
    """``x`` as a new tensor (TensorFlow's ``custom_gradient`` needs its output to be one)."""
    if _on_tensorflow():
        import tensorflow as tf

        return tf.identity(x)
    return x


def pullback(fn: Callable, *xs: Any) -> tuple[Any, Callable]:
    """``(fn(*xs), pull)``: ``pull(cotangent)`` is the gradient of ``⟨cotangent, fn(*xs)⟩`` with
    respect to each of ``xs`` (the gradient itself for one argument, a list for several); ``pull``
    may be called more than once."""
    if _on_tensorflow():
        import tensorflow as tf

        with tf.GradientTape(persistent=True) as tape:
            tape.watch(list(xs))
            y = fn(*xs)

        def pull_tf(cotangent: Any) -> Any:
            grads = tape.gradient(y, list(xs), output_gradients=cotangent)
            return grads[0] if len(xs) == 1 else grads

        return y, pull_tf
    if _on_torch():
        from . import torch_autodiff

        return torch_autodiff.pullback(fn, *xs)
    import jax

    y, pull = jax.vjp(fn, *xs)

    def pull_jax(cotangent: Any) -> Any:
        grads = pull(cotangent)
        return grads[0] if len(xs) == 1 else list(grads)

    return y, pull_jax


def eager_pullback(fn: Callable, x: Any) -> tuple[Any, Callable | None]:
    """``(fn(x), pull)`` on PyTorch, where every function runs as it is called: ``pull`` (as
    :func:`pullback`'s) reuses this evaluation, where pulling back later from ``x`` alone would run
    ``fn`` a second time. ``(fn(x), None)`` on TensorFlow and JAX, whose compilers already share
    the work of a forward evaluation and its pull-back (a caller then uses :func:`pullback`)."""
    if _on_torch():
        from . import torch_autodiff

        return torch_autodiff.pullback(fn, x)
    return fn(x), None


def linearized(fn: Callable, x: Any, tangent: Any) -> tuple[Any, Any, Callable]:
    """``(fn(x), J·tangent, pull)`` with ``J`` the Jacobian of ``fn`` at ``x`` and ``pull(c) = Jᵀc``,
    from one evaluation of ``fn`` (an output that does not depend on ``x`` has a zero product)."""
    if _on_tensorflow():
        import tensorflow as tf

        with tf.GradientTape() as tape:
            tape.watch(x)
            with tf.autodiff.ForwardAccumulator(x, tangent) as forward:
                y = fn(x)
            product = forward.jvp(y, unconnected_gradients=tf.UnconnectedGradients.ZERO)
        return y, product, lambda cotangent: tape.gradient(y, x, output_gradients=cotangent)
    if _on_torch():
        from . import torch_autodiff

        return torch_autodiff.linearized(fn, x, tangent)
    import jax

    y, jvp = jax.linearize(fn, x)
    transposed = jax.linear_transpose(jvp, x)
    return y, jvp(tangent), lambda cotangent: transposed(cotangent)[0]


def fused(fn: Callable) -> Callable:
    """``fn`` (element-wise steps on tensors) compiled into one pass: ``tf.function`` with XLA on
    TensorFlow; ``torch.compile`` on PyTorch, for tensors large enough to repay it
    (:func:`~saliency_kit.propagation.torch_autodiff.fused`); on JAX ``fn`` itself (it runs inside
    the caller's ``jax.jit``)."""
    if _on_tensorflow():
        import tensorflow as tf

        return tf.function(fn, jit_compile=True, reduce_retracing=True, autograph=False)
    if _on_torch():
        from . import torch_autodiff

        return torch_autodiff.fused(fn)
    return fn


def divide_no_nan(a: Any, b: Any) -> Any:
    """``a / b``, and ``0`` where ``b == 0`` (``tf.math.divide_no_nan``)."""
    ops = keras.ops
    zero = b == 0
    quotient = a / ops.where(zero, ops.ones_like(b), b)
    return ops.where(zero, ops.zeros((), quotient.dtype), quotient)
