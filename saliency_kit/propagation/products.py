"""The product of two branches, ``y = a ⊙ b`` (``keras.layers.Multiply`` or ``*``), with a backward
rule that shares the output's relevance between its factors.

A product is not linear in its inputs together, so neither the plain gradient nor a linear rule
applies: the plain gradient gives ``a ⊙ ∂y/∂a = b ⊙ ∂y/∂b = y``, each factor the whole relevance,
twice the total.

* **DeepLIFT** (rows of inputs and baselines interleaved, or read against a shared reference):
  the exact split of the difference, ``Δy = (b + b₀)/2 ⊙ Δa + (a + a₀)/2 ⊙ Δb``, so the
  multipliers are ``m_a = (b + b₀)/2`` and ``m_b = (a + a₀)/2`` and summation to delta holds
  through the product. A factor equal in the
  input and the baseline rows (a held input) gets no share and the other factor's multiplier is
  its value: a product with a constant is linear.
* **LRP** (gradient form, ``R = value ⊙ gradient``): DeepLIFT's split with a zero reference,
  ``R_a = R_b = R_y / 2``, so relevance is conserved. With ``to_relevance`` (the product reads
  the model inputs) the gradient returned *is* the relevance.

The same split holds for any bilinear map ``y = f(a, b)`` (an attention's scores ``Q·Kᵀ``, its
probabilities times the values): :func:`bilinear_gate` gives DeepLIFT's multipliers
``∂f(a, (b + b₀)/2)/∂a`` and ``∂f((a + a₀)/2, b)/∂b``, as ``f(a, b) − f(a₀, b₀) =
f(Δa, (b + b₀)/2) + f((a + a₀)/2, Δb)``.

A product with one factor that depends on no explained value (a mask, a gate computed from ids)
is linear in the other and keeps its plain gradient; :func:`~saliency_kit.propagation.canonizers.model_facts`
decides which.
"""

from __future__ import annotations

from typing import Any

import keras
from keras import ops

from .autodiff import custom_gradient, pullback
from .gates import halves, interleave, shared_reference

__all__ = ["ProductLayer", "bilinear_gate", "product_gate"]


def product_gate(a: Any, b: Any, rule: str, to_relevance: bool = False, site: Any = None) -> Any:
    """``a ⊙ b`` unchanged; backward by ``rule``: ``"deeplift"`` (rows interleaved, or within a
    :class:`~saliency_kit.propagation.gates.SharedReference`, ``site`` the calling layer) or
    ``"lrp"`` (see the module docstring). ``a`` and ``b`` broadcast against each other as ``*`` does."""
    shared = shared_reference() if rule == "deeplift" else None
    reference = shared.exchange(site, a, b) if shared is not None else None
    if shared is not None and reference is None:  # the shared reference's own pass
        return a * b

    @custom_gradient
    def gate(a: Any, b: Any) -> Any:
        y = a * b

        def midpoints(
            t: Any, t0: Any = None
        ) -> Any:  # (t + t₀)/2 in the input rows (0 in interleaved baseline rows), at y's shape
            if t0 is not None:
                return (ops.broadcast_to(t, ops.shape(y)) + t0) / 2
            t1, t0 = halves(ops.broadcast_to(t, ops.shape(y)))
            return interleave((t1 + t0) / 2, ops.zeros_like(t1))

        def backward(dy: Any) -> Any:
            if rule != "deeplift":
                share_a, share_b = b / 2, a / 2
            elif reference is not None:
                share_a, share_b = midpoints(b, reference[1]), midpoints(a, reference[0])
            else:
                share_a, share_b = midpoints(b), midpoints(a)
            _, pull = pullback(  # dy ⊙ share, summed back over broadcast axes
                lambda a, b: a * ops.stop_gradient(share_a) + ops.stop_gradient(share_b) * b, a, b
            )
            da, db = pull(dy)
            return (a * da, b * db) if to_relevance else (da, db)

        return y, backward

    return gate(a, b)


def bilinear_gate(function: Any, a: Any, b: Any, site: Any = None) -> Any:
    """``function(a, b)`` (bilinear, rows along the first axis of both) unchanged; backward:
    DeepLIFT's exact split of its difference (see the module docstring), rows interleaved or,
    within a :class:`~saliency_kit.propagation.gates.SharedReference`, read against the reference
    (``site``: the calling layer)."""
    shared = shared_reference()
    reference = shared.exchange(site, a, b) if shared is not None else None
    if shared is not None and reference is None:  # the shared reference's own pass
        return function(a, b)

    def midpoint(t: Any, t0: Any = None) -> Any:  # (t + t₀)/2 in the input rows; 0 in interleaved baseline rows
        if t0 is not None:
            return t + (t0 - t) / 2
        t1, t0 = halves(t)
        return interleave(t1 + (t0 - t1) / 2, ops.zeros_like(t1))

    @custom_gradient
    def gate(a: Any, b: Any) -> Any:
        def backward(dy: Any) -> Any:
            if reference is not None:
                a_mid, b_mid = midpoint(a, reference[0]), midpoint(b, reference[1])
            else:
                a_mid, b_mid = midpoint(a), midpoint(b)
            _, pull = pullback(
                lambda a, b: function(a, ops.stop_gradient(b_mid)) + function(ops.stop_gradient(a_mid), b), a, b
            )
            return tuple(pull(dy))

        return function(a, b), backward

    return gate(a, b)


class ProductLayer(keras.layers.Layer):
    """In the copy, the place of a product of two branches (a ``Multiply`` layer, called on a
    list, or ``keras.ops.multiply``, called on two tensors), with :func:`product_gate`'s rule."""

    def __init__(self, rule: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.rule = rule
        self.to_relevance = False

    def call(self, *inputs: Any) -> Any:
        factors = inputs[0] if len(inputs) == 1 else inputs
        a, b = factors
        return product_gate(a, b, self.rule, self.to_relevance, site=self)

    def compute_output_spec(self, *inputs: Any) -> Any:
        factors = inputs[0] if len(inputs) == 1 else inputs
        return keras.ops.multiply(factors[0], factors[1])  # a KerasTensor of the broadcast shape
