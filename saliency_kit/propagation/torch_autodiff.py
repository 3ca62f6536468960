"""The differentiation primitives of :mod:`.autodiff` on PyTorch (imported only there).

* :func:`custom_gradient`: a ``torch.autograd.Function`` whose forward runs ``forward`` and keeps
  its ``backward``, called when the outer gradient reaches it (with autograd off, unless that
  gradient is itself differentiated; the pull-backs below switch it on for their own graphs);
* :func:`pullback`: the function run on detached copies of its arguments that need their
  gradient, its vector-Jacobian products taken by ``torch.autograd.grad`` on that small graph (the
  value is for the pull-back only: callers use the forward value of their own computation);
* :func:`linearized`: the Jacobian-vector product by the double-backward identity
  ``J·t = ∂⟨Jᵀu, t⟩/∂u`` (``Jᵀu`` is linear in ``u``), from the one evaluation the pull-back uses;
* :func:`fused`: an element-wise function compiled by ``torch.compile`` (Inductor) for tensors
  large enough to repay its compilation, run as it is for small ones.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["custom_gradient", "pullback", "linearized", "fused"]

COMPILE_FROM = 1 << 16  # elements of the first argument from which fused functions are compiled


class _Gate(torch.autograd.Function):
    """``forward(*args) -> (y, backward)`` as an autograd function: its gradients are
    ``backward(dy)``, one per argument (``None`` for none)."""

    @staticmethod
    def forward(ctx: Any, forward: Callable, *args: Any) -> Any:
        y, backward = forward(*args)
        ctx.backward_fn = backward
        ctx.several = isinstance(y, (tuple, list))
        outputs = tuple(y) if ctx.several else (y,)
        outputs = tuple(o.view_as(o) if any(o is a for a in args) else o for o in outputs)  # a new tensor each, no copy
        return outputs if ctx.several else outputs[0]

    @staticmethod
    def backward(ctx: Any, *dys: Any) -> tuple:
        grads = ctx.backward_fn(dys if ctx.several else dys[0])  # its pull-backs enable autograd themselves
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


def fused(fn: Callable) -> Callable:
    """``fn`` (element-wise steps on tensors of one shape family) compiled by ``torch.compile`` into
    one pass over memory, where run step by step each step reads and writes whole tensors.

    Compiled only when it pays: the first argument has at least :data:`COMPILE_FROM` elements
    (compiling costs seconds, once per function, plus a little per new broadcast pattern; shapes
    are dynamic), and autograd is off (a backward pass that is not itself differentiated). Where
    PyTorch cannot compile here (no C++ compiler), a warning says so once and ``fn`` runs as it
    is: the same numbers, more slowly."""
    state: dict = {}

    def run(*args: Any) -> Any:
        if state.get("failed") or torch.is_grad_enabled() or args[0].numel() < COMPILE_FROM:
            return fn(*args)
        if "compiled" not in state:
            state["compiled"] = torch.compile(fn, dynamic=True, fullgraph=True)
        try:
            return state["compiled"](*args)
        except Exception as error:  # the compiler's own failure; fn's errors recur below, uncaught
            state["failed"] = True
            warnings.warn(
                f"torch.compile could not compile an element-wise kernel here ({type(error).__name__}: "
                f"{str(error).splitlines()[0] if str(error) else ''}); it runs uncompiled, with the same results.",
                RuntimeWarning,
                stacklevel=2,
            )
            return fn(*args)

    return run
