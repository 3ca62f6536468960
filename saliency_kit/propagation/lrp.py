"""``rewrite_lrp(model, composite)``: a copy of ``model`` whose input gradient times the input is the
LRP relevance of the differentiated score.

The copy carries relevance in *gradient form*: at every tensor ``a`` of the copy, the relevance is
``R_a = a ⊙ ∂s/∂a`` (``s`` the differentiated score). That holds at the top (``R = s``), and each
rewritten layer keeps it: a linear layer's backward takes ``R_out = z ⊙ dz``, applies its rule
and returns ``dx = R_in / x`` (computed without dividing for the rules whose relevance is
proportional to ``x``); an activation with :class:`~saliency_kit.propagation.lrp_rules.Pass` returns
``dx = dy · f(x) / x``. Layers that only move, copy or add values (padding, reshaping,
``Concatenate``, ``Add``, ``Subtract``, max pooling) keep their plain gradient, which in this form
*is* the relevance rule (see :mod:`saliency_kit.propagation.canonizers`); a product of two
branches splits its relevance equally (:mod:`saliency_kit.propagation.products`). Layer
normalisation and attention follow the conservative propagation of Ali et al. 2022
(:mod:`saliency_kit.propagation.transformer`); element-wise activations outside the ReLU family
(GELU, tanh) pass relevance unchanged; custom layers get the rules on their sublayers
(:mod:`saliency_kit.propagation.custom`).

Flat, WSquare and ZBox give relevance that is not proportional to the input; where an input is
exactly 0 its relevance cannot be written as ``x · gradient``. ``rewrite_lrp(..., input_relevance=True)``
returns a copy whose input gradient *is* the relevance (what the ``"lrp"`` method uses).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import keras

from ..model import keras_private
from . import canonizers
from .autodiff import eager_pullback, identity
from .core import LinearRule, linear_parts
from .custom import build_like, custom_layer
from .elementwise import activation_family
from .gates import pass_gate, relevance_gate, rule_gate
from .lrp_rules import Epsilon, Pass
from .products import ProductLayer
from .rewriting import WrapperLayer, clone_layer, rewrite_planned
from .transformer import AttentionLayer, LayerNormLayer

__all__ = ["PassLayer", "RuleLayer", "SumLayer", "placed_rules", "rewrite_lrp"]


class RuleLayer(WrapperLayer):
    """A linear layer with an LRP rule on its backward pass, its fused activation split off with
    :class:`~saliency_kit.propagation.lrp_rules.Pass`, and possibly a BatchNorm merged in."""

    def __init__(self, inner: Any, rule: LinearRule, family: Any = None, **kwargs: Any) -> None:
        super().__init__(inner, **kwargs)
        self.rule = rule
        self.family = family  # its fused element-wise activation (Pass), or None
        self.to_relevance = False
        self.nonnegative_input = False  # its input comes from a ReLU: x⁺ = x (set after copying)
        self.absorbed = lambda: None  # the merged BatchNormalization's wrapper, set after copying

    def call(self, x: Any, training: bool | None = None, mask: Any = None) -> Any:
        bn = self.absorbed()
        out = x
        parts = linear_parts(self.inner, absorbed_bn=bn.inner if bn is not None else None)
        for i, part in enumerate(parts):
            z, pull = eager_pullback(lambda x, part=part: part.apply(x, part.kernels, part.bias), out)
            part = dataclasses.replace(part, pull=pull)
            out = rule_gate(self.rule, part, out, z, self.to_relevance and i == 0, self.nonnegative_input and i == 0)
        if self.family is not None:
            out = pass_gate(Pass(), out, self.family.forward(out), False, self.family)
        return out


class PassLayer(WrapperLayer):
    """An element-wise layer (ReLU family, unmerged BatchNorm, Rescaling) with ``Pass``; a
    BatchNorm merged into the layer before it is the identity once ``merged`` is set."""

    def __init__(self, inner: Any, **kwargs: Any) -> None:
        super().__init__(inner, **kwargs)
        self.to_relevance = False
        self.merged = False

    def call(self, x: Any, training: bool | None = None, mask: Any = None) -> Any:
        if self.merged:
            return identity(x)
        y = self.inner(x, training=False) if keras_private.call_takes_training(self.inner) else self.inner(x)
        return pass_gate(Pass(), x, y, self.to_relevance, canonizers.relu_family_of(self.inner))

    def compute_output_spec(self, x: Any, training: bool | None = None, mask: Any = None) -> Any:
        return self.inner.compute_output_spec(x)


def rewrite_lrp(model: keras.Model, composite: Any, *, input_relevance: bool = False) -> keras.Model:
    """A new model whose input gradient times the input is the LRP relevance of the score.

    Args:
        model: a functional or Sequential ``keras.Model`` (nested ones included); never modified.
        composite: a :class:`~saliency_kit.propagation.composites.Composite` (a named one from
            ``saliency_kit.propagation.composites.get(name, **options)``).
        input_relevance: ``True``: the input gradient *is* the relevance (exact also where an input
            is 0 under the flat, w² and ZBox rules).

    Returns:
        A new ``keras.Model`` with the same outputs (up to float rounding where a BatchNorm was
        merged). ``rewritten_layers``: ``{layer path: rule}`` for every layer given a rule
        (``"merged into <path>"`` for merged BatchNorms).

    Raises:
        ValueError: a layer no rule covers (named), a Dense/convolution the composite gives no
            rule, or a subclassed model.
    """
    if not isinstance(model, keras.Model):
        raise TypeError(f"rewrite_lrp expects a keras.Model; received {type(model).__name__}.")
    if not callable(getattr(composite, "rule_for", None)):
        raise TypeError(
            f"rewrite_lrp expects a Composite (composites.get(name) gives a named one); "
            f"received {type(composite).__name__}."
        )
    facts = canonizers.model_facts(model)
    plan: dict[int, tuple[canonizers.LayerFacts, object]] = {}  # id(original op) -> (fact, rule)
    for fact in facts:
        rule = _rule_of(fact, composite, first=fact.first)
        if fact.kind == "sum" and not (input_relevance and fact.first):
            rule = None  # a sum's plain gradient is its rule; only where it reads the input is it turned
        if rule is not None:
            plan[id(fact.op)] = (fact, rule)
    if not plan:
        raise ValueError(f"model {model.name!r} has no layer for an LRP rule; received {len(facts)} layers.")

    def wrap(fact: Any, rule: Any) -> Any:
        return _wrap(fact, rule, composite)

    def link(wrappers: Any) -> None:
        """Canonizers that link layers of the copy: merged BatchNorms, the first layers' relevance."""
        for fact in facts:
            if fact.absorbs is not None and id(fact.op) in wrappers:
                bn_wrapper = wrappers[id(fact.absorbs.op)]
                bn_wrapper.merged = True
                wrappers[id(fact.op)].absorbed = (lambda w: lambda: w)(bn_wrapper)
            if input_relevance and fact.first and id(fact.op) in wrappers:
                wrappers[id(fact.op)].to_relevance = True
            if fact.nonnegative_input and isinstance(wrappers.get(id(fact.op)), RuleLayer):
                wrappers[id(fact.op)].nonnegative_input = True

    new_model = rewrite_planned(model, facts, plan, wrap, what="LRP rewrite", link=link)
    new_model.rewritten_layers = {
        fact.path: (f"merged into {fact.merged_into.path!r}" if fact.merged_into is not None else plan[id(fact.op)][1])
        for fact in facts
        if id(fact.op) in plan
    }
    new_model.rewritten_layers.update(placed_rules(new_model))
    new_model.composite = composite
    return new_model


def _rule_of(fact: Any, composite: Any, first: bool = False) -> Any:
    """The rule ``fact``'s layer gets (a ``LinearRule``, ``Pass``, or the name of a layer rule:
    ``"product"``, ``"layer_norm"``, ``"attention"``, ``"custom"``, ``"sum"``), or ``None``."""
    if fact.kind in ("linear", "average_pooling"):
        rule = composite.rule_for(fact.op, fact.path, first)
        if rule is None and fact.kind == "average_pooling":
            rule = Epsilon(composite.pooling_stabilizer)
        if not isinstance(rule, LinearRule):
            raise ValueError(
                f"the composite gives layer {fact.path!r} ({type(fact.op).__name__}) no rule for linear "
                f"layers; add an entry for it (its class, name or 'first'); received {rule!r}."
            )
        return rule
    if fact.kind in ("relu", "affine", "elementwise"):
        return Pass()
    if fact.kind in ("product", "layer_norm", "attention", "custom", "sum"):
        return fact.kind
    return None


def _wrap(fact: Any, rule: Any, composite: Any, inner: Any = None) -> Any:
    """The layer put in place of ``fact``'s (``inner``: the existing layer to run, inside a
    custom layer's clone; else a clone of it)."""
    op = fact.op
    if fact.kind == "product":
        return ProductLayer("lrp", name=op.name)
    if fact.kind == "sum":
        return SumLayer(op if not isinstance(op, keras.layers.Layer) else clone_layer(op), fact.input_arguments[0])
    if fact.kind == "custom":
        return custom_layer(fact, lambda sub: _wrap_sublayer(sub, composite))
    inner = inner if inner is not None else clone_layer(op)
    if fact.kind == "layer_norm":
        return LayerNormLayer(inner, "lrp")
    if fact.kind == "attention":
        build_like(inner, fact)
        return AttentionLayer(inner, "lrp", _projection_rules(fact.path, composite))
    if isinstance(rule, LinearRule):
        return RuleLayer(inner, rule, family=_fused_family(fact))
    if fact.kind == "relu" and not isinstance(op, keras.layers.Layer):
        family: Any = canonizers.relu_family_of(op)
        return PassLayer(keras.layers.Activation(lambda x: family.forward(x), name=op.name))
    return PassLayer(inner)


def _wrap_sublayer(fact: Any, composite: Any) -> Any:
    """A sublayer of a custom layer with its rule, around the sublayer itself (or ``None``)."""
    rule = _rule_of(fact, composite)
    if rule is None or fact.kind in ("product", "sum"):
        return None
    return _wrap(fact, rule, composite, inner=fact.op)


def _projection_rules(path: str, composite: Any) -> Any:
    """``projection(einsum_dense, role)`` for an attention: the value and output projections with
    the composite's rule (never a first layer's: the value projection's relevance, where it
    reads the input, is its gradient times its input); the query and key projections, which
    receive no gradient (the probabilities are constant), as they are."""

    def projection(layer: Any, role: Any) -> Any:
        if role in ("query", "key"):
            return None
        fact = canonizers.LayerFacts(f"{path}/{layer.name}", layer, "linear")
        return RuleLayer(layer, _rule_of(fact, composite), family=_fused_family(fact))

    return projection


def _fused_family(fact: Any) -> Any:
    """The element-wise activation fused into a linear layer that its wrapper applies (with
    ``Pass``), or ``None`` (linear, or a final softmax/sigmoid split apart)."""
    activation = getattr(fact.op, "activation", None)
    if fact.final and canonizers.activation_name(activation) in canonizers.SQUASHERS:
        return None
    return activation_family(activation)


def placed_rules(model: Any) -> dict:
    """``{path: rule}`` of the rule-carrying layers placed inside custom layers of a copy."""
    found = {}
    for layer in keras_private.all_sublayers(model):
        for path, wrapper in getattr(layer, "placed", ()):
            found[path] = getattr(wrapper, "rule", None) or type(wrapper).__name__
    return found


class SumLayer(keras.layers.Layer):
    """A sum (``Add``, ``Subtract``, ``+``, ``-``) that reads explained values directly: each such
    addend's input gradient is its relevance, ``a ⊙ ∂s/∂a`` (``relevance``: which flattened
    tensor arguments), so what is added to it (a position embedding) keeps its own share."""

    def __init__(self, op: Any, relevance: Any, **kwargs: Any) -> None:
        super().__init__(name=op.name, **kwargs)
        self.op = op
        self.relevance = list(relevance)
        self.to_relevance = False

    def call(self, *args: Any, **kwargs: Any) -> Any:
        flat = keras.tree.flatten((args, kwargs))
        if self.to_relevance:
            flat = [relevance_gate(t) if gated else t for t, gated in zip(flat, self.relevance)]
        args, kwargs = keras.tree.pack_sequence_as((args, kwargs), flat)
        return self.op(*args, **kwargs)

    def compute_output_spec(self, *args: Any, **kwargs: Any) -> Any:
        return self.op.compute_output_spec(*args, **kwargs)
