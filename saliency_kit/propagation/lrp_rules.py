"""The LRP rules for linear layers (ε, γ, z⁺, αβ, flat, w², z^B) and ``Pass`` for activations.

Notation (Montavon et al., "Layer-wise relevance propagation: an overview", 2019): a linear layer
computes ``z_j = sum_i x_i w_ij + b_j``; ``R_j`` is the relevance of output ``j``; a rule says how
much of it goes to input ``i``. ``x⁺ = max(x, 0)``, ``x⁻ = min(x, 0)``, likewise ``w⁺``, ``w⁻``,
``b⁺``, ``b⁻``. Every denominator is stabilised as ``stab(d) = d + ε·sign(d)`` with
``sign(0) = +1`` (Zennit's convention; ``ε`` is the rule's ``stabilizer``, or ``epsilon`` for
:class:`Epsilon`).

Each linear rule is a list of :class:`~saliency_kit.propagation.core.Branch` es (the layer run on
modified inputs with modified parameters) plus, where needed, group scales and output masks; the
mechanism, :class:`~saliency_kit.propagation.core.LinearRule`, does the rest. A new rule is a
subclass of a few lines here. ``Pass`` is the exception: it leaves relevance unchanged through an
element-wise activation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from keras import ops

from .autodiff import divide_no_nan, eager_pullback
from .core import Branch, LinearRule, linear_vjp, positive_part, stabilize, unchanged

__all__ = [
    "AlphaBeta",
    "Epsilon",
    "Flat",
    "Gamma",
    "Pass",
    "WSquare",
    "ZBox",
    "ZPlus",
]


_identity = unchanged


def _positive(w: Any) -> Any:
    return ops.maximum(w, 0)


def _negative(w: Any) -> Any:
    return ops.minimum(w, 0)


def _ones(w: Any) -> Any:
    return ops.ones_like(w)


def _square(w: Any) -> Any:
    return ops.square(w)


def _gamma_mod(gamma: float, part: Callable) -> Any:
    def modify(w: Any) -> Any:
        return w + gamma * part(w)

    return modify


class Epsilon(LinearRule):
    """LRP-ε (Bach et al. 2015): ``R_i = Σ_j x_i w_ij R_j / (z_j + ε·sign(z_j))``, ``z`` with bias.

    ``epsilon → 0`` is LRP-0, which on a ReLU network equals gradient × input.
    """

    branches = (Branch("x"),)

    def __init__(self, epsilon: float = 1e-6) -> None:
        super().__init__(stabilizer=epsilon)
        self.epsilon = self.stabilizer


class Gamma(LinearRule):
    """LRP-γ, in Zennit's form that also allows negative inputs (Montavon et al. 2019; Andéol 2021).

    Where ``z_j > 0``: ``R_i = Σ_j (x⁺_i (w_ij + γw⁺_ij) + x⁻_i (w_ij + γw⁻_ij)) R_j / stab(d⁺_j)``,
    ``d⁺_j = Σ_i [x⁺_i (w_ij + γw⁺_ij) + x⁻_i (w_ij + γw⁻_ij)] + b_j + γb⁺_j``;
    where ``z_j < 0`` the same with ``w⁺ ↔ w⁻`` swapped and ``b_j + γb⁻_j``. For non-negative inputs
    this is the textbook ``R_i = Σ_j x_i (w_ij + γw⁺_ij) R_j / Σ_i' x_i' (w_i'j + γw⁺_i'j) + b + γb⁺``.
    """

    def __init__(self, gamma: float = 0.25, stabilizer: float = 1e-6) -> None:
        super().__init__(stabilizer)
        gamma = float(gamma)
        if not gamma >= 0:
            raise ValueError(f"gamma must be non-negative; received {gamma!r}.")
        self.gamma = gamma
        up, down = _gamma_mod(gamma, _positive), _gamma_mod(gamma, _negative)
        self.branches = (
            Branch("positive", up, up, group=0),
            Branch("negative", down, None, group=0),
            Branch("positive", down, down, group=1),
            Branch("negative", up, None, group=1),
        )

    def group_masks(self) -> dict:
        return {0: "positive", 1: "negative"}

    def backward(self, part: Any, x: Any, z: Any, relevance: Any, nonnegative: bool = False) -> Any:
        """For ``x >= 0`` both denominators follow from ``z`` and one convolution,
        ``p = Σ_i x_i w⁺_ij + b⁺_j`` (as ``w⁻ = w − w⁺``): ``d = z + γp`` where ``z > 0``,
        ``d = z + γ(z − p)`` where ``z < 0``; with ``r = R / stab(d)`` and ``r⁻`` its part where
        ``z < 0``, the relevance takes two transposed convolutions,
        ``R_i = x_i (Σ_j w_ij (r_j + γr⁻_j) + γ Σ_j w⁺_ij (r_j − 2r⁻_j))``. (``R = 0`` where
        ``z = 0``: the relevance reaching a layer is ``z ⊙ ∂s/∂z``.)"""
        if not nonnegative:
            return super().backward(part, x, z, relevance)
        gamma = self.gamma
        positive = positive_part(part)
        scaled = {name: gamma * w for name, w in positive.kernels.items()}  # γw⁺: a weight-sized product
        scaled_bias = None if positive.bias is None else ops.convert_to_tensor(positive.bias) * gamma
        gamma_p, pull_scaled = eager_pullback(lambda x: part.apply(x, scaled, scaled_bias), x)
        up = z > 0
        ratio = relevance / stabilize(z + ops.where(up, gamma_p, gamma * z - gamma_p), self.stabilizer)
        down = ops.where(up, ops.zeros((), ratio.dtype), ratio)
        coefficients = linear_vjp(part, part.kernels, x, ratio + gamma * down) + linear_vjp(
            part, scaled, x, ratio - 2 * down, pull_scaled
        )
        return coefficients, None


class ZPlus(LinearRule):
    """LRP-z⁺ (α1β0; Montavon et al. 2017), allowing negative inputs as Zennit does:

    ``R_i = (x⁺_i Σ_j w⁺_ij R_j / stab(z⁺_j)) + (x⁻_i Σ_j w⁻_ij R_j / stab(z⁺_j))`` with
    ``z⁺_j = Σ_i (x⁺_i w⁺_ij + x⁻_i w⁻_ij) + b⁺_j`` (the positive contributions).
    """

    branches = (Branch("positive", _positive, _positive), Branch("negative", _negative, None))


class AlphaBeta(LinearRule):
    """LRP-αβ (Bach et al. 2015): ``R_i = α R⁺_i − β R⁻_i``, ``α − β = 1``, where

    ``R⁺_i = Σ_j (x⁺_i w⁺_ij + x⁻_i w⁻_ij) R_j / stab(z⁺_j)``, ``z⁺_j = Σ_i (x⁺ w⁺ + x⁻ w⁻) + b⁺_j``,
    ``R⁻_i = Σ_j (x⁺_i w⁻_ij + x⁻_i w⁺_ij) R_j / stab(z⁻_j)``, ``z⁻_j = Σ_i (x⁺ w⁻ + x⁻ w⁺) + b⁻_j``.
    """

    def __init__(self, alpha: float = 2.0, beta: float = 1.0, stabilizer: float = 1e-6) -> None:
        super().__init__(stabilizer)
        alpha, beta = float(alpha), float(beta)
        if alpha < 0 or beta < 0 or not np.isclose(alpha - beta, 1.0, rtol=0, atol=1e-12):
            raise ValueError(
                f"AlphaBeta needs alpha >= 0, beta >= 0 and alpha - beta = 1 (so that relevance "
                f"is conserved); received alpha={alpha!r}, beta={beta!r}."
            )
        self.alpha, self.beta = alpha, beta
        self.branches = (
            Branch("positive", _positive, _positive, group=0),
            Branch("negative", _negative, None, group=0),
            Branch("positive", _negative, _negative, group=1),
            Branch("negative", _positive, None, group=1),
        )

    def group_scales(self) -> dict:
        return {0: self.alpha, 1: -self.beta}

    def backward(self, part: Any, x: Any, z: Any, relevance: Any, nonnegative: bool = False) -> Any:
        """For ``x >= 0``: ``z⁺ = p = Σ_i x_i w⁺_ij + b⁺_j`` (one convolution) and ``z⁻ = z − p``,
        ``R_i = x_i (Σ_j w⁺_ij (r⁺_j − r⁻_j) + Σ_j w_ij r⁻_j)`` with ``r⁺ = α R / stab(z⁺)``,
        ``r⁻ = −β R / stab(z⁻)`` (as ``w⁻ = w − w⁺``): two transposed convolutions."""
        if not nonnegative:
            return super().backward(part, x, z, relevance)
        positive = positive_part(part)
        p, pull_positive = eager_pullback(lambda x: part.apply(x, positive.kernels, positive.bias), x)
        r_plus = self.alpha * relevance / stabilize(p, self.stabilizer)
        r_minus = -self.beta * relevance / stabilize(z - p, self.stabilizer)
        coefficients = linear_vjp(part, positive.kernels, x, r_plus - r_minus, pull_positive) + linear_vjp(
            part, part.kernels, x, r_minus
        )
        return coefficients, None


class Flat(LinearRule):
    """LRP-flat (Lapuschkin et al. 2019): ``R_i = Σ_j R_j / stab(n_j)``, ``n_j`` the number of
    inputs output ``j`` sees (weights and inputs set to one, no bias): relevance spread evenly
    over each receptive field, whatever the input."""

    branches = (Branch("ones", _ones, None),)


class WSquare(LinearRule):
    """LRP-w² (Montavon et al. 2017): ``R_i = Σ_j w²_ij R_j / stab(Σ_i' w²_i'j + b²_j)``; independent of
    the input (Zennit squares the bias too)."""

    branches = (Branch("ones", _square, _square),)


class ZBox(LinearRule):
    """LRP-z^B (Montavon et al. 2017), for inputs bounded by ``low ≤ x ≤ high``:

    ``R_i = Σ_j (x_i w_ij − l_i w⁺_ij − h_i w⁻_ij) R_j / stab(z_j − Σ_i (l_i w⁺_ij + h_i w⁻_ij) − b⁺_j − b⁻_j)``.

    ``low``/``high``: scalars or arrays broadcastable to one input (in the model's input space,
    i.e. after preprocessing).
    """

    def __init__(self, low: Any, high: Any, stabilizer: float = 1e-6) -> None:
        super().__init__(stabilizer)
        low_array, high_array = np.asarray(low, dtype=np.float64), np.asarray(high, dtype=np.float64)
        if not (np.all(np.isfinite(low_array)) and np.all(np.isfinite(high_array))):
            raise ValueError(f"ZBox bounds must be finite numbers; received low={low!r}, high={high!r}.")
        if np.any(
            np.broadcast_to(low_array, np.broadcast_shapes(low_array.shape, high_array.shape))
            > np.broadcast_to(high_array, np.broadcast_shapes(low_array.shape, high_array.shape))
        ):
            raise ValueError(f"ZBox needs low <= high everywhere; received low={low!r}, high={high!r}.")
        self.low, self.high = low, high
        self.branches = (
            Branch("x", _identity, _identity, sign=1.0),
            Branch("low", _positive, _positive, sign=-1.0),
            Branch("high", _negative, _negative, sign=-1.0),
        )

    def constant_input(self, name: str, x: Any) -> Any:
        if name in ("low", "high"):
            bound = np.asarray(self.low if name == "low" else self.high, dtype=np.float32)
            try:
                np.broadcast_shapes(bound.shape, tuple(1 if d is None else d for d in x.shape))
            except ValueError as error:
                raise ValueError(
                    f"ZBox {name} bound of shape {bound.shape} does not broadcast to the input of "
                    f"shape {tuple(x.shape)}; received {name}={bound!r}."
                ) from error
            return ops.broadcast_to(ops.cast(bound, x.dtype), ops.shape(x))
        return super().constant_input(name, x)


class Pass:
    """For element-wise activations: ``R_x = R_y`` (relevance passes unchanged).

    In the gradient form the rewritten models carry (relevance = value × gradient), this is
    ``dx = dy · f(x) / x`` (``0`` where ``x = 0``, where ``f(x) = 0`` for the ReLU family), which
    for ReLU and leaky ReLU is their own derivative and for ReLU6 also keeps the relevance of
    saturated units.
    """

    def gradient(self, x: Any, y: Any, dy: Any, family: Any = None) -> Any:
        """``dy · f(x) / x``; ``family``: the ReLU family ``f`` is, when it is one. For a plain ReLU
        that is exactly its derivative (``x / x = 1``), taken in one pass by the backend's fused
        kernel."""
        if family is not None and family.is_plain:
            return family.backward(x, dy)
        return dy * divide_no_nan(y, x)

    def __repr__(self) -> str:
        return "Pass()"
