"""The gradient tools' PyTorch mechanisms (see :mod:`.ops`): a function with its own gradient by a
``torch.autograd.Function``, a vector-Jacobian product by ``torch.autograd.grad`` and a NumPy call
run directly on the host. Imported only on PyTorch.

The ``torch.autograd.Function``'s backward is written in differentiable operations: under
``torch.autograd.grad(..., create_graph=True)`` (or ``backward(create_graph=True)``) PyTorch records
them, so an outer level that differentiates a gradient computed by an inner one sees the override at
every order, as nested TensorFlow tapes do. A value of the op differentiated by an outer level goes
through the same backward, so ``scale(x, 5)`` counts five times on every term of a loss that adds
an inner gradient to the value it was taken of. The tools built of PyTorch operations also run
under ``torch.func.grad``, ``torch.func.vjp``, ``torch.func.jacrev`` and ``torch.func.vmap`` (the
batching rule is generated); forward mode (``torch.func.jvp``, ``torch.func.jacfwd``) is refused
with PyTorch's own error, as JAX refuses ``jax.jvp``.

PyTorch runs operations as they are called, so a NumPy call needs no declared result: the declared
shapes and dtypes are checked when the result arrives (a result of another shape is refused,
naming both shapes); it needs the tensors' values, so ``numpy_function`` runs under
``torch.autograd`` but not inside ``torch.func`` transforms. On the ``"meta"`` device, where Keras
infers a layer's output shape without computing, a NumPy call returns empty results of the declared
shapes without running.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import keras
import numpy as np
import torch

__all__ = ["custom_gradient", "vjp", "broadcast_shape", "numpy_dtype", "host_call"]


def custom_gradient(forward: Callable[..., Any], backward: Callable[[Sequence[Any], Any], Any]) -> Callable:
    """``op(*xs)`` returning ``forward(*xs)`` (one tensor), whose gradient for the incoming ``dy`` is
    ``backward(xs, dy)``: one gradient per input (``None`` for none, as for integer inputs); an
    input alone gets its gradient alone. Every level of differentiation, nested ones included, uses
    ``backward``; ``backward``'s own operations are differentiated by the levels above."""

    class Op(torch.autograd.Function):
        generate_vmap_rule = True

        @staticmethod
        def forward(*xs: torch.Tensor) -> Any:
            return forward(*xs)

        @staticmethod
        def setup_context(ctx: Any, inputs: tuple[torch.Tensor, ...], output: Any) -> None:
            ctx.save_for_backward(*inputs)

        @staticmethod
        def backward(ctx: Any, dy: torch.Tensor) -> Any:
            grads = backward(ctx.saved_tensors, dy)
            return tuple(grads) if isinstance(grads, (tuple, list)) else grads

    def op(*xs: Any) -> Any:
        return Op.apply(*xs)

    return op


def vjp(fn: Callable[[Any], Any], x: Any, dy: Any) -> Any:
    """``dy``'s pull-back through ``fn`` at ``x``: ``sum(dy * d fn(x) / dx)``, shaped like ``x``.
    Recorded for a further level when gradient recording is on (a ``create_graph=True`` backward):
    differentiable in ``dy`` and, where ``x`` itself has a gradient, in ``x``."""
    keep_graph = torch.is_grad_enabled()
    with torch.enable_grad():
        point = x if x.requires_grad else x.detach().requires_grad_(True)
        y = fn(point)
        if not y.requires_grad:  # fn does not depend on x
            return torch.zeros_like(x)
        (dx,) = torch.autograd.grad(y, point, dy, create_graph=keep_graph, allow_unused=True)
    return torch.zeros_like(x) if dx is None else dx


def broadcast_shape(shapes: Sequence[tuple]) -> tuple[int, ...] | None:
    """The broadcast of the inputs' shapes, which a NumPy call's result is declared to have when
    it declares nothing else; ``None`` (any shape accepted) when they do not broadcast."""
    try:
        return tuple(torch.broadcast_shapes(*(torch.Size(shape) for shape in shapes)))
    except RuntimeError:
        return None


def numpy_dtype(dtype: Any) -> np.dtype:
    """The NumPy dtype a PyTorch dtype (or name) travels as on the host; ``bfloat16``, which NumPy
    lacks, as ``float32``."""
    name = keras.backend.standardize_dtype(dtype)
    return np.dtype("float32" if name == "bfloat16" else name)


def host_call(fn: Callable, args: list[Any], results: Sequence[tuple[Any, Any]]) -> list[Any]:
    """``fn(*arrays)`` run in NumPy on the tensors' values; ``results`` lists each result's
    ``(shape, dtype)`` (a shape of ``None``: any). Returns one tensor per result, of its declared
    dtype, on the first argument's device; not differentiable (wrap it in :func:`custom_gradient`)."""
    device = args[0].device
    dtypes = [_torch_dtype(dtype) for _, dtype in results]
    if device.type == "meta" and all(shape is not None for shape, _ in results):
        return [torch.empty(tuple(shape), dtype=d, device=device) for (shape, _), d in zip(results, dtypes)]
    arrays = [_to_numpy(t) for t in args]
    out = fn(*arrays)
    out = list(out) if isinstance(out, (list, tuple)) else [out]
    if len(out) != len(results):
        raise ValueError(f"a NumPy function declared {len(results)} results and returned {len(out)}")
    tensors = []
    for value, (shape, dtype), torch_dtype in zip(out, results, dtypes):
        if shape is not None and np.shape(value) != tuple(shape):
            raise ValueError(
                f"a NumPy function returned a result of shape {np.shape(value)} where {tuple(shape)} "
                "was declared (numpy_function: pass output_shape= for a result of another shape)"
            )
        array = np.ascontiguousarray(value, numpy_dtype(dtype))
        tensors.append(torch.from_numpy(array).to(device=device, dtype=torch_dtype))
    return tensors


def _torch_dtype(dtype: Any) -> torch.dtype:
    return getattr(torch, keras.backend.standardize_dtype(dtype))


def _to_numpy(x: torch.Tensor) -> np.ndarray:
    x = x.detach().cpu()
    try:
        return x.float().numpy() if x.dtype == torch.bfloat16 else x.numpy()
    except RuntimeError:  # a tensor of torch.func's transforms, which has no values of its own
        raise ValueError(
            "numpy_function on the PyTorch backend runs under torch.autograd (backward(), "
            "torch.autograd.grad, Keras' fit), not inside torch.func transforms (grad, vmap, jacrev)"
        ) from None
