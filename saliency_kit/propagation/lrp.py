"""``rewrite_lrp(model, composite)``: a copy of ``model`` whose input gradient times the input is the
LRP relevance of the differentiated score.

The copy carries relevance in *gradient form*: at every tensor ``a`` of the copy, the relevance is
``R_a = a ⊙ ∂s/∂a`` (``s`` the differentiated score). That holds at the top (``R = s``), and each
rewritten layer keeps it: a linear layer's backward takes ``R_out = z ⊙ dz``, applies its rule
and returns ``dx = R_in / x`` (computed without dividing for the rules whose relevance is
proportional to ``x``); an activation with :class:`~saliency_kit.propagation.rules.Pass` returns
``dx = dy · f(x) / x``. Layers that only move, copy or add values (padding, reshaping,
``Concatenate``, ``Add``, ``Subtract``, max pooling) keep their plain gradient, which in this form
*is* the relevance rule (see :mod:`saliency_kit.propagation.canonizers`); a product of two
branches splits its relevance equally (:mod:`saliency_kit.propagation.products`).

Flat, WSquare and ZBox give relevance that is not proportional to the input; where an input is
exactly 0 its relevance cannot be written as ``x · gradient``. ``rewrite_lrp(..., input_relevance=True)``
returns a copy whose input gradient *is* the relevance (what the ``"lrp"`` method uses).
"""

from __future__ import annotations

import keras
import tensorflow as tf

from ..model import keras_private
from ..rules.relu import relu_family_of_function
from . import canonizers
from .core import LinearRule, linear_parts
from .gates import pass_gate, rule_gate
from .products import ProductLayer
from .rewriting import WrapperLayer, clone_layer, rewrite_planned
from .rules import Epsilon, Pass

__all__ = ["PassLayer", "RuleLayer", "rewrite_lrp"]


class RuleLayer(WrapperLayer):
    """A linear layer with an LRP rule on its backward pass, its fused activation split off with
    :class:`~saliency_kit.propagation.rules.Pass`, and possibly a BatchNorm merged in."""

    def __init__(self, inner, rule: LinearRule, **kwargs):
        super().__init__(inner, **kwargs)
        self.rule = rule
        self.to_relevance = False
        self.nonnegative_input = False  # its input comes from a ReLU: x⁺ = x (set after copying)
        self.absorbed = lambda: None  # the merged BatchNormalization's wrapper, set after copying

    def call(self, x, training=None, mask=None):
        bn = self.absorbed()
        out = x
        parts = linear_parts(self.inner, absorbed_bn=bn.inner if bn is not None else None)
        for i, part in enumerate(parts):
            z = part.apply(out, part.kernels, part.bias)
            out = rule_gate(self.rule, part, out, z, self.to_relevance and i == 0, self.nonnegative_input and i == 0)
        activation = getattr(self.inner, "activation", None)
        family = relu_family_of_function(activation) if activation is not None else None
        if family is not None:
            out = pass_gate(Pass(), out, family.forward(out), False, family)
        return out


class PassLayer(WrapperLayer):
    """An element-wise layer (ReLU family, unmerged BatchNorm, Rescaling) with ``Pass``; a
    BatchNorm merged into the layer before it is the identity once ``merged`` is set."""

    def __init__(self, inner, **kwargs):
        super().__init__(inner, **kwargs)
        self.to_relevance = False
        self.merged = False

    def call(self, x, training=None, mask=None):
        if self.merged:
            return tf.identity(x)
        y = self.inner(x, training=False) if keras_private.call_takes_training(self.inner) else self.inner(x)
        return pass_gate(Pass(), x, y, self.to_relevance, canonizers.relu_family_of(self.inner))

    def compute_output_spec(self, x, training=None, mask=None):
        return self.inner.compute_output_spec(x)


def rewrite_lrp(model: keras.Model, composite, *, input_relevance: bool = False) -> keras.Model:
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
    plan: dict[int, tuple[canonizers.LayerFacts, LinearRule | Pass | str]] = {}  # id(original op) -> (fact, rule)
    for fact in facts:
        if fact.kind in ("linear", "average_pooling"):
            rule = composite.rule_for(fact.op, fact.path, fact.first)
            if rule is None and fact.kind == "average_pooling":
                rule = Epsilon(composite.pooling_stabilizer)
            if not isinstance(rule, LinearRule):
                raise ValueError(
                    f"the composite gives layer {fact.path!r} ({type(fact.op).__name__}) no rule for linear "
                    f"layers; add an entry for it (its class, name or 'first'); received {rule!r}."
                )
            plan[id(fact.op)] = (fact, rule)
        elif fact.kind in ("relu", "affine"):
            plan[id(fact.op)] = (fact, Pass())
        elif fact.kind == "product":
            plan[id(fact.op)] = (fact, "product")
    if not plan:
        raise ValueError(f"model {model.name!r} has no layer for an LRP rule; received {len(facts)} layers.")

    def wrap(fact, rule):
        if fact.kind == "product":
            return ProductLayer("lrp", name=fact.op.name)
        if isinstance(rule, LinearRule):
            return RuleLayer(clone_layer(fact.op), rule)
        if fact.kind == "relu" and not isinstance(fact.op, keras.layers.Layer):
            family = canonizers.relu_family_of(fact.op)
            return PassLayer(keras.layers.Activation(lambda x: family.forward(x), name=fact.op.name))
        return PassLayer(clone_layer(fact.op))

    def link(wrappers):
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
    new_model.composite = composite
    return new_model
