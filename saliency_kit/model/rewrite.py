"""``rewrite(model, rule)``: a model computing what ``model`` computes whose ReLU-family operations
use ``rule`` on the backward pass — every one the model runs.

Functional and Sequential models (nested at any depth) are copied with :func:`.copy.copy_model`
(checked against the original on a generated input) and, in the copy:

* every ReLU-family activation visible at the layer level — ``Activation("relu")``,
  ``keras.layers.ReLU``/``LeakyReLU`` with any arguments, any layer built with ``activation=``
  ``relu``/``relu6``/``leaky_relu`` (by name, from ``keras.activations``, ``keras.ops``, ``tf.nn``,
  a ``functools.partial`` of those, or a ``keras.layers.ReLU()`` instance), recurrent layers with
  ``activation="relu"``, ``keras.ops.relu`` nodes of a functional graph — computes its own forward
  pass exactly and ``rule.grad`` backward (:func:`.override.rule_activation`);
* every layer that may compute ReLUs out of sight — ``Lambda``, ``TimeDistributed``,
  ``Bidirectional``, recurrent layers, custom layers (``tf.nn.relu``/``keras.ops.relu`` in their
  ``call``), layers with an activation function not known to be something else (an inline
  ``lambda``) — runs inside a ``tf.function`` traced under :func:`.override.relu_rule`, so the
  ``Relu``/``Relu6``/``LeakyRelu`` ops it creates (while-loop bodies included) take the rule.

Subclassed models cannot be rebuilt layer by layer: the result wraps the original (never changed)
and runs it in a ``tf.function`` traced under :func:`.override.relu_rule`.

Either way gradients follow the rule eagerly, inside ``tf.function``, with ``GradientTape`` or
``tf.gradients``; the user's model is only read, so a gradient of it traced before or after, or
taken at the same time in another thread, stays plain.
"""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from ..rules import ModifiedBackprop, as_rule
from . import keras_private
from .copy import check_copy, copy_model, layer_config, rebuild_layer
from .override import OverrideReport, relu_rule, rule_activation
from .relu_layers import find_relu_activations, may_hide_relus, nothing_to_rewrite, relu_family_of_operation
from .walker import is_graph_model, walk

__all__ = [
    "rewrite",
    "nothing_to_rewrite",
    "find_relu_activations",
    "may_hide_relus",
    "RuleActivation",
    "RuleScope",
    "RewrittenModel",
    "relu_family_of_operation",
]


# -- what counts as a ReLU at the layer level -------------------------------------------------------
# -- the pieces put into the copy ------------------------------------------------------------------
@keras.saving.register_keras_serializable(package="saliency_kit")
class RuleActivation:
    """An activation function: ``rule.activation`` forward, ``rule.grad`` backward (``rule`` bound)."""

    def __init__(self, rule: ModifiedBackprop):
        self.rule = rule
        self.__name__ = f"{type(rule).__name__.lower()}_{rule.activation.name}"

    def __call__(self, x: Any) -> tf.Tensor:
        return rule_activation(x, self.rule)

    def get_config(self) -> dict:
        return {"rule": keras.saving.serialize_keras_object(self.rule)}

    @classmethod
    def from_config(cls, config: dict) -> RuleActivation:
        return cls(keras.saving.deserialize_keras_object(config["rule"]))


class RuleScope(keras.layers.Layer):
    """Runs ``layer`` in a ``tf.function`` traced under :func:`relu_rule`: each ReLU-family op it
    creates (while-loop bodies included) takes ``rule``. Same name, variables and outputs as
    ``layer``. ``report``: what the last trace changed."""

    def __init__(self, layer: Any, rule: ModifiedBackprop, path: str | None = None, **kwargs: Any):
        super().__init__(name=layer.name, dtype=layer.dtype_policy, **kwargs)
        self.layer = layer
        self.rule = rule
        self.layer_path = path or layer.name
        self.report: OverrideReport | None = None
        self._traced_call = tf.function(self._scoped_call, autograph=False)

    def _scoped_call(self, args: Any, kwargs: Any) -> Any:
        with relu_rule(self.rule) as report:
            outputs = self.layer(*args, **kwargs)
        report.check(f"layer {self.layer_path!r} ({type(self.layer).__name__})")
        self.report = report
        return outputs

    def build(self, *args: Any, **kwargs: Any) -> None:
        pass  # the inner layer builds itself when first called (compute_output_spec)

    def call(self, *args: Any, training: bool | None = None, **kwargs: Any) -> Any:
        if training is not None and keras_private.call_takes_training(self.layer):
            kwargs["training"] = bool(training)
        return self._traced_call(args, kwargs)

    def compute_output_spec(self, *args: Any, training: bool | None = None, **kwargs: Any) -> Any:
        return self.layer(*args, **kwargs)  # symbolic: builds the inner layer too


class RewrittenModel(keras.Model):
    """A subclassed model with a backward rule: the original's forward pass, run in a
    ``tf.function`` traced under :func:`relu_rule`. The original is only called, never changed."""

    def __init__(self, model: keras.Model, rule: ModifiedBackprop, **kwargs: Any):
        super().__init__(name=f"{model.name}_{type(rule).__name__.lower()}", **kwargs)
        self.wrapped = model
        self.rule = rule
        self.report: OverrideReport | None = None
        self._traced_call = tf.function(self._scoped_call, autograph=False)

    def _scoped_call(self, x: Any, training: bool | None) -> Any:
        with relu_rule(self.rule) as report:
            outputs = self.wrapped(x, training=training)
        report.check(f"model {self.wrapped.name!r} ({type(self.wrapped).__name__})")
        self.report = report
        return outputs

    def call(self, x: Any, training: bool = False) -> Any:
        return self._traced_call(x, bool(training))


# -- rewrite ---------------------------------------------------------------------------------------
def _rewritten_clone(op: Any, bound: ModifiedBackprop) -> keras.layers.Layer:
    """A new layer computing what ``op`` computes, with ``bound`` as its activation."""
    activation = RuleActivation(bound)
    if (
        isinstance(op, keras.layers.Layer)
        and hasattr(op, "activation")
        and not isinstance(op, (keras.layers.ReLU, keras.layers.LeakyReLU))
    ):
        config = layer_config(op, activation)
        if "activation" not in config:
            raise ValueError(
                f"cannot rewrite layer {op.name!r} ({type(op).__name__}): it has a ReLU activation "
                f"but its get_config() has no 'activation' entry to rebuild it with; received {type(op).__name__}."
            )
        clone = type(op).from_config(config)
        if getattr(clone, "activation", None) is not activation:
            raise ValueError(
                f"cannot rewrite layer {op.name!r} ({type(op).__name__}): its constructor does not "
                "keep the activation it is given, so the rule could not be put in its place; "
                f"received {type(op).__name__}."
            )
        return clone
    # a stand-alone activation (ReLU/LeakyReLU layer or a bare functional op) becomes an
    # Activation layer of the same name
    return keras.layers.Activation(activation, name=op.name, dtype=getattr(op, "dtype_policy", None))


def rewrite(model: keras.Model, rule: Any) -> keras.Model:
    """A model whose ReLU-family operations use ``rule`` on the backward pass.

    Args:
        model: a ``keras.Model``: Functional or Sequential (nested models, wrappers, recurrent
            and custom layers included), or a built/called subclassed model. Never modified.
        rule: ``"guided"``, ``"deconv"`` or a :class:`~saliency_kit.ModifiedBackprop` instance;
            or anything with a ``rewrite_model(model)`` method (an LRP composite, the DeepLIFT
            rewrite), which is called instead and rewrites the linear layers as well.

    Returns:
        A ``keras.Model`` computing ``model``'s outputs (checked on a generated input). Attributes:
        ``rewritten_layers`` (paths of the layers whose backward pass changed, ``"outer/inner"``
        inside nested models; for a subclassed model, the op names), ``rewritten_ops`` (for layers
        changed at the op level — custom calls, Lambdas, wrappers, recurrent layers —
        ``{path: [op names]}``).

    Raises:
        TypeError: ``model`` is not a ``keras.Model``.
        ValueError: no ReLU-family operation (the message names the activations found), a layer
            that cannot be copied or reached (named), or a copy that computes something else.
    """
    if hasattr(rule, "rewrite_model"):  # a rewrite of the linear layers too (LRP composites, DeepLIFT)
        return rule.rewrite_model(model)
    rule = as_rule(rule)
    if not isinstance(model, keras.Model):
        raise TypeError(f"rewrite expects a keras.Model; received {type(model).__name__}.")
    if not is_graph_model(model):
        return _rewrite_subclassed(model, rule)

    plan = {}  # id(op) -> (path, ReluFamily | None); None: scope it
    order: dict[str, int] = {}
    for visit in walk(model):
        if not visit.in_graph or is_graph_model(visit.layer) or id(visit.layer) in plan:
            continue
        family = relu_family_of_operation(visit.layer)
        if family is not None or may_hide_relus(visit.layer):
            plan[id(visit.layer)] = (visit.path, family)
            order[visit.path] = len(order)
    if not plan:
        raise nothing_to_rewrite(model)

    scopes: list[RuleScope] = []
    changed: list[str] = []

    def replace(op: Any) -> keras.layers.Layer | None:
        if id(op) not in plan:
            return None
        path, family = plan[id(op)]
        if family is not None:
            changed.append(path)
            return _rewritten_clone(op, rule.bind(family))
        scope = RuleScope(rebuild_layer(op), rule, path)
        scopes.append(scope)
        return scope

    new_model = copy_model(model, replace, what="rewrite")  # the check traces every RuleScope
    rewritten_ops = {s.layer_path: list(s.report.ops) for s in scopes if s.report is not None and s.report.ops}
    changed.extend(rewritten_ops)
    if not changed:
        raise nothing_to_rewrite(model)
    new_model.rewritten_layers = sorted(changed, key=order.__getitem__)
    new_model.rewritten_ops = rewritten_ops
    return new_model


def _rewrite_subclassed(model: keras.Model, rule: Any) -> keras.Model:
    wrapper = RewrittenModel(model, rule)
    check_copy(model, wrapper, what="rewrite")  # also traces it, filling in the report
    if wrapper.report is None or not wrapper.report.ops:
        raise nothing_to_rewrite(model)
    wrapper.rewritten_layers = list(wrapper.report.ops)
    wrapper.rewritten_ops = {model.name: list(wrapper.report.ops)}
    return wrapper
