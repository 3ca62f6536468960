"""DeepLIFT (Shrikumar et al. 2017), Rescale rule, as a rewrite of the model.

``rewrite_deeplift(model)`` returns a copy that takes inputs and their baselines interleaved in one
batch, ``[x_0, x₀_0, x_1, x₀_1, ...]`` (``2B`` rows: rows ``2i`` and ``2i + 1`` are a pair), and
computes the same outputs as ``model`` on each row. Its backward pass gives, in the even rows,
DeepLIFT's *multipliers* ``m`` (odd rows: zero); the attributions are ``(x − x₀) ⊙ m`` and sum to
``s(x) − s(x₀)`` (summation to delta). Within a
:class:`~saliency_kit.propagation.gates.SharedReference`, as the engine runs it, one baseline row
shared by every input runs through it first, on its own, and then the inputs alone (``B`` rows),
their gates reading the baseline's values back: the baseline costs one row forward, no backward.

- Linear layers (Dense, convolutions, BatchNorm at inference, average pooling, Add, Subtract,
  Concatenate, padding, reshaping): the plain gradient, which for a linear map is its multiplier.
- A product of two branches: the multipliers ``(b + b₀)/2`` and ``(a + a₀)/2``, the exact split
  of ``Δ(a ⊙ b)`` (:mod:`~saliency_kit.propagation.products`).
- Every ReLU-family activation: the Rescale rule ``m = (f(x) − f(x₀)) / (x − x₀)``, the plain
  derivative where ``|x − x₀| ≤ 1e-7`` (:func:`~saliency_kit.propagation.gates.rescale_gate`).
- Max pooling: Captum's rule, which keeps summation to delta: the output difference
  ``y − y₀`` is split into ``max(y, y₀) − y₀`` (sent to the winner in ``x``) and ``y − max(y, y₀)``
  (sent to the winner in ``x₀``), and each input's share is divided by its ``x − x₀``
  (:func:`~saliency_kit.propagation.gates.maxpool_gate`).
"""

from __future__ import annotations

import keras

from ..rules.relu import relu_family_of_function
from . import canonizers
from .core import linear_parts
from .gates import maxpool_gate, rescale_gate
from .products import ProductLayer
from .rewriting import WrapperLayer, clone_layer, rewrite_planned

__all__ = ["DeepLiftLayer", "DeepLiftRewrite", "rewrite_deeplift"]


class DeepLiftRewrite:
    """The ``rule`` that makes ``sk.rewrite``/the engine build :func:`rewrite_deeplift` models."""

    def rewrite_model(self, model):
        return rewrite_deeplift(model)

    def __eq__(self, other):
        return type(other) is type(self)

    def __hash__(self):
        return hash(type(self))

    def __repr__(self) -> str:
        return "DeepLiftRewrite()"


class DeepLiftLayer(WrapperLayer):
    """A layer of the copy with DeepLIFT's backward: ``kind`` is ``"max_pooling"``, ``"relu"``
    (``family`` its ReLU family) or ``"linear"`` (``family``: its fused activation's, or ``None``)."""

    def __init__(self, inner, kind: str, family=None, **kwargs):
        super().__init__(inner, **kwargs)
        self.kind = kind
        self.family = family

    def call(self, x, training=None, mask=None):
        if self.kind == "max_pooling":
            pool = self.inner.call
            return maxpool_gate(pool, x, pool(x), site=self)
        if self.kind == "relu":
            return rescale_gate(self.family, x, site=self)
        z = x
        for part in linear_parts(self.inner):
            z = part.apply(z, part.kernels, part.bias)
        if self.family is not None:
            return rescale_gate(self.family, z, site=self)
        return z


def rewrite_deeplift(model: keras.Model) -> keras.Model:
    """A copy of ``model`` taking inputs and baselines interleaved (``2B`` rows) whose input
    gradient, in the even rows, holds DeepLIFT's multipliers (see the module docstring). ``model`` is never modified.

    ``rewritten_layers``: ``{layer path: rule}`` (``"rescale"``, ``"maxpool"``). A final
    softmax/sigmoid fused into the last layer becomes a separate ``Activation``. ``ValueError``
    naming a layer without a DeepLIFT rule here (attention, normalisation over features, ...).
    """
    if not isinstance(model, keras.Model):
        raise TypeError(f"rewrite_deeplift expects a keras.Model; received {type(model).__name__}.")
    facts = canonizers.model_facts(model)
    plan = {}
    for fact in facts:
        op = fact.op
        if fact.kind == "max_pooling":
            plan[id(op)] = (fact, "maxpool")
        elif fact.kind == "relu":
            plan[id(op)] = (fact, "rescale")
        elif fact.kind == "product":
            plan[id(op)] = (fact, "product")
        elif fact.kind == "linear" and not canonizers.is_linear_activation(getattr(op, "activation", None)):
            plan[id(op)] = (fact, "rescale" if relu_family_of_function(op.activation) else "squash apart")

    def wrap(fact, rule):
        op = fact.op
        if fact.kind == "product":
            return ProductLayer("deeplift", name=op.name)
        if fact.kind == "max_pooling":
            return DeepLiftLayer(clone_layer(op), "max_pooling")
        if fact.kind == "relu":
            family = canonizers.relu_family_of(op)
            inner = (
                clone_layer(op)
                if isinstance(op, keras.layers.Layer)
                else keras.layers.Activation("linear", name=op.name)
            )
            return DeepLiftLayer(inner, "relu", family)
        return DeepLiftLayer(clone_layer(op), "linear", relu_family_of_function(op.activation))

    new_model = rewrite_planned(model, facts, plan, wrap, what="DeepLIFT rewrite")
    new_model.rewritten_layers = {fact.path: rule for fact, rule in plan.values()}
    return new_model
