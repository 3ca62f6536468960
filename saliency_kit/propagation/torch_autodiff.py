"""The differentiation primitives of :mod:`.autodiff` on PyTorch (imported only there).

* :func:`custom_gradient`: a ``torch.autograd.Function`` whose forward runs ``forward`` and keeps
  its ``backward``, called (with autograd enabled, so its own pullbacks can run) when the outer
  gradient reaches it;
* :func:`pullback`: the function run on detached copies of its arguments that need their
  gradient, its vector-Jacobian products taken by ``torch.autograd.grad`` on that small graph (the
  value is for the pull-back only: callers use the forward value of their own computation);
* :func:`linearized`: the Jacobian-vector product by the double-backward identity
  ``J·t = ∂⟨Jᵀu, t⟩/∂u`` (``Jᵀu`` is linear in ``u``), from the one evaluation the pull-back uses.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = ["custom_gradient", "pullback", "linearized"]


class _Gate(torch.autograd.Function):
    """``forward(*args) -> (y, backward)`` as an autograd function: its gradients are
    ``backward(dy)``, one per argument (``None`` for none)."""

    @staticmethod
    def forward(ctx: Any, forward: Callable, *args: Any) -> Any:
        y, backward = forward(*args)
        ctx.backward_fn = backward
        ctx.several = isinstance(y, (tuple, list))
        outputs = tuple(y) if ctx.several else (y,)
        outputs = tuple(o.clone() if any(o is a for a in args) else o for o in outputs)  # a new tensor each
        return outputs if ctx.several else outputs[0]

    @staticmethod
    def backward(ctx: Any, *dys: Any) -> tuple:
        with torch.enable_grad():
            grads = ctx.backward_fn(dys if ctx.several else dys[0])
        grads = tuple(grads) if isinstance(grads, (tuple, list)) else (grads,)
        return (None, *grads)


def custom_gradient(forward: Callable) -> Callable:
    """``forward(*args) -> (y, backward)`` as a function whose gradient is ``backward(dy)``, as
    ``tf.custom_gradient`` has it (see :func:`saliency_kit.propagation.autodiff.custom_gradient`)."""

    def gated(*args: Any) -> Any:
        return _Gate.apply(forward, *args)

    return gated


def _leaf(x: Any) -> Any:
    return x.detach().requires_grad_(x.dtype.is_floating_point)


def _grads(y: Any, leaves: list, cotangent: Any, create_graph: bool = False) -> list:
    """``∂⟨cotangent, y⟩/∂leaf`` for each leaf (zeros where ``y`` does not depend on it)."""
    if not y.requires_grad:
        return [torch.zeros_like(leaf) for leaf in leaves]
    with torch.enable_grad():
        grads = torch.autograd.grad(
            y, leaves, cotangent, retain_graph=True, create_graph=create_graph, allow_unused=True
        )
    return [torch.zeros_like(leaf) if g is None else g for g, leaf in zip(grads, leaves)]


def pullback(fn: Callable, *xs: Any) -> tuple[Any, Callable]:
    """``(fn(*xs), pull)`` with ``pull(cotangent)`` the gradient of ``⟨cotangent, fn(*xs)⟩`` with
    respect to each of ``xs`` (see :func:`saliency_kit.propagation.autodiff.pullback`)."""
    leaves = [_leaf(x) for x in xs]
    with torch.enable_grad():
        y = fn(*leaves)

    def pull(cotangent: Any) -> Any:
        grads = _grads(y, leaves, cotangent)
        return grads[0] if len(xs) == 1 else grads

    return y, pull


def linearized(fn: Callable, x: Any, tangent: Any) -> tuple[Any, Any, Callable]:
    """``(fn(x), J·tangent, pull)`` (see :func:`saliency_kit.propagation.autodiff.linearized`)."""
    leaf = _leaf(x)
    with torch.enable_grad():
        y = fn(leaf)
        if not y.requires_grad:
            return y, torch.zeros_like(y), lambda cotangent: torch.zeros_like(x)
        probe = torch.zeros_like(y, requires_grad=True)
        (transposed,) = _grads(y, [leaf], probe, create_graph=True)
        if not transposed.requires_grad:  # fn is constant in x
            product = torch.zeros_like(y)
        else:
            (product,) = torch.autograd.grad(transposed, probe, tangent, retain_graph=True)
    return y, product, lambda cotangent: _grads(y, [leaf], cotangent)[0]
