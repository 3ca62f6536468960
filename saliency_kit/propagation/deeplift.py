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
- Every element-wise activation (the ReLU family, GELU, tanh, sigmoid, ...): the Rescale rule
  ``m = (f(x) − f(x₀)) / (x − x₀)``, the plain derivative where ``|x − x₀| ≤ 1e-7``
  (:func:`~saliency_kit.propagation.gates.rescale_gate`).
- Layer normalisation and multi-head attention (:mod:`~saliency_kit.propagation.transformer`):
  the bilinear products ``Q·Kᵀ`` and ``P·V`` by the exact split above, softmax and layer norm by
  the midpoint Jacobian rescaled per output (:func:`~saliency_kit.propagation.gates.midpoint_gate`),
  which keeps summation to delta exact; custom layers built of these and linear operations
  (:mod:`~saliency_kit.propagation.custom`).
- Max pooling: Captum's rule, which keeps summation to delta: the output difference
  ``y − y₀`` is split into ``max(y, y₀) − y₀`` (sent to the winner in ``x``) and ``y − max(y, y₀)``
  (sent to the winner in ``x₀``), and each input's share is divided by its ``x − x₀``
  (:func:`~saliency_kit.propagation.gates.maxpool_gate`).
"""

from __future__ import annotations

from typing import Any

import keras

from . import canonizers
from .core import linear_parts
from .custom import build_like, custom_layer
from .elementwise import activation_family
from .gates import maxpool_gate, rescale_gate
from .lrp import placed_rules
from .products import ProductLayer
from .rewriting import WrapperLayer, clone_layer, rewrite_planned
from .transformer import AttentionLayer, LayerNormLayer

__all__ = ["DeepLiftLayer", "DeepLiftRewrite", "rewrite_deeplift"]


class DeepLiftRewrite:
    """The ``rule`` that makes ``sk.rewrite``/the engine build :func:`rewrite_deeplift` models."""

    def rewrite_model(self, model: Any) -> Any:
        return rewrite_deeplift(model)

    def __eq__(self, other: Any) -> Any:
        return type(other) is type(self)

    def __hash__(self) -> Any:
        return hash(type(self))

    def __repr__(self) -> str:
        return "DeepLiftRewrite()"


class DeepLiftLayer(WrapperLayer):
    """A layer of the copy with DeepLIFT's backward: ``kind`` is ``"max_pooling"``, ``"relu"``
    (``family`` its ReLU family) or ``"linear"`` (``family``: its fused activation's, or ``None``)."""

    def __init__(self, inner: Any, kind: str, family: Any = None, **kwargs: Any) -> None:
        super().__init__(inner, **kwargs)
        self.kind = kind
        self.family = family

    def call(self, x: Any, training: bool | None = None, mask: Any = None) -> Any:
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
    naming a layer without a DeepLIFT rule here (a softmax inside the model, a custom layer whose
    call is not linear outside its sublayers, ...).
    """
    if not isinstance(model, keras.Model):
        raise TypeError(f"rewrite_deeplift expects a keras.Model; received {type(model).__name__}.")
    facts = canonizers.model_facts(model)
    plan = {}
    for fact in facts:
        rule = _rule_of(fact)
        if rule is not None:
            plan[id(fact.op)] = (fact, rule)

    def wrap(fact: Any, rule: Any) -> Any:
        return _wrap(fact)

    new_model = rewrite_planned(model, facts, plan, wrap, what="DeepLIFT rewrite")
    new_model.rewritten_layers = {fact.path: rule for fact, rule in plan.values()}
    new_model.rewritten_layers.update(placed_rules(new_model))
    return new_model


def _rule_of(fact: Any) -> str | None:
    """The DeepLIFT rule of ``fact``'s layer, or ``None`` (its gradient is its multiplier)."""
    op = fact.op
    if fact.kind == "max_pooling":
        return "maxpool"
    if fact.kind in ("relu", "elementwise"):
        return "rescale"
    if fact.kind == "product":
        return "product"
    if fact.kind == "layer_norm":
        return "midpoint"
    if fact.kind in ("attention", "custom"):
        return fact.kind
    if fact.kind == "linear" and not canonizers.is_linear_activation(getattr(op, "activation", None)):
        return "rescale" if _fused_family(fact) is not None else "squash apart"
    return None


def _fused_family(fact: Any) -> Any:
    activation = getattr(fact.op, "activation", None)
    if fact.final and canonizers.activation_name(activation) in canonizers.SQUASHERS:
        return None
    return activation_family(activation)


def _wrap(fact: Any, inner: Any = None) -> Any:
    """The layer put in place of ``fact``'s (``inner``: the existing layer to run, inside a
    custom layer's clone; else a clone of it)."""
    op = fact.op
    if fact.kind == "product":
        return ProductLayer("deeplift", name=op.name)
    if fact.kind == "custom":
        return custom_layer(fact, _wrap_sublayer)
    if fact.kind in ("relu", "elementwise") and not isinstance(op, keras.layers.Layer):
        family = canonizers.relu_family_of(op)
        return DeepLiftLayer(keras.layers.Activation("linear", name=op.name), "relu", family)
    inner = inner if inner is not None else clone_layer(op)
    if fact.kind == "layer_norm":
        return LayerNormLayer(inner, "deeplift")
    if fact.kind == "attention":
        build_like(inner, fact)
        return AttentionLayer(inner, "deeplift")
    if fact.kind == "max_pooling":
        return DeepLiftLayer(inner, "max_pooling")
    if fact.kind in ("relu", "elementwise"):
        activation = canonizers.relu_family_of(op) or activation_family(getattr(op, "activation", None))
        return DeepLiftLayer(inner, "relu", activation)
    return DeepLiftLayer(inner, "linear", _fused_family(fact))


def _wrap_sublayer(fact: Any) -> Any:
    """A sublayer of a custom layer with its rule, around the sublayer itself (or ``None``)."""
    if _rule_of(fact) in (None, "product", "squash apart"):
        return None
    return _wrap(fact, inner=fact.op)
