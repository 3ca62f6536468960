"""``rewrite_lrp(model, composite)``: a copy of ``model`` whose input gradient times the input is the
LRP relevance of the differentiated score.

The copy carries relevance in *gradient form*: at every tensor ``a`` of the copy, the relevance is
``R_a = a ⊙ ∂s/∂a`` (``s`` the differentiated score). That holds at the top (``R = s``), and each
rewritten layer keeps it: a linear layer's backward takes ``R_out = z ⊙ dz``, applies its rule
and returns ``dx = R_in / x`` (computed without dividing for the rules whose relevance is
proportional to ``x``); an activation with :class:`~saliency_kit.rules.Pass` returns
``dx = dy · f(x) / x``. Layers that only move, copy or add values (padding, reshaping,
``Concatenate``, ``Add``, max pooling) keep their plain gradient, which in this form *is* the
relevance rule (see :mod:`saliency_kit.propagation.canonizers`).

Flat, WSquare and ZBox give relevance that is not proportional to the input; where an input is
exactly 0 its relevance cannot be written as ``x · gradient``. ``rewrite_lrp(..., input_relevance=True)``
returns a copy whose input gradient *is* the relevance (what the ``"lrp"`` method uses).
"""
from __future__ import annotations

import dataclasses

import keras
import tensorflow as tf

from . import canonizers
from .composites import get as get_composite
from ..model import keras_private
from ..model.copy import check_copy, copy_model
from .rules import Epsilon, LinearPart, LinearRule, Pass
from ..rules.relu import relu_family_of_function

__all__ = ["LRPRewrite", "linear_parts", "rewrite_lrp"]


@dataclasses.dataclass(frozen=True)
class LRPRewrite:
    """The ``rule`` that makes ``sk.rewrite``/the engine build :func:`rewrite_lrp` models, keyed by
    value: a composite name (or a :class:`~saliency_kit.propagation.composites.Composite`), its options as
    sorted ``(name, value)`` pairs, and whether the input gradient is the relevance itself."""

    composite: object = "epsilon_plus_flat"
    options: tuple = ()
    input_relevance: bool = False

    def rewrite_model(self, model):
        return rewrite_lrp(model, self.composite, input_relevance=self.input_relevance, **dict(self.options))


# ---------------------------------------------------------------------------------------------
# Linear parts of the supported layers


def _add_bias(z, bias, layer):
    if bias is None:
        return z
    if getattr(layer, "data_format", "channels_last") == "channels_first":
        bias = tf.reshape(bias, [1, -1] + [1] * (len(z.shape) - 2))
    return z + bias


def linear_parts(layer, absorbed_bn=None) -> list[LinearPart]:
    """The linear maps ``layer`` computes, in order (two for a separable convolution), with its
    current parameters; ``absorbed_bn`` a BatchNormalization merged into the last one."""
    dtype = layer.compute_dtype

    def value(variable):
        return tf.cast(tf.convert_to_tensor(variable), dtype)

    bias = value(layer.bias) if getattr(layer, "use_bias", False) else None
    if isinstance(layer, keras.layers.Dense):
        parts = [LinearPart(lambda x, k, b: _add_bias(tf.matmul(x, k["kernel"]) if len(x.shape) == 2
                                                      else tf.tensordot(x, k["kernel"], 1), b, layer),
                            {"kernel": value(layer.kernel)}, bias)]
    elif isinstance(layer, (keras.layers.SeparableConv1D, keras.layers.SeparableConv2D)):
        parts = _separable_parts(layer, value, bias)
    elif isinstance(layer, (keras.layers.DepthwiseConv1D, keras.layers.DepthwiseConv2D)):
        def depthwise(x, k, b):
            z = keras.ops.depthwise_conv(x, k["kernel"], strides=layer.strides, padding=layer.padding,
                                         data_format=layer.data_format, dilation_rate=layer.dilation_rate)
            return _add_bias(z, b, layer)
        parts = [LinearPart(depthwise, {"kernel": value(layer.kernel)}, bias)]
    elif isinstance(layer, (keras.layers.Conv1D, keras.layers.Conv2D, keras.layers.Conv3D)):
        parts = [LinearPart(lambda x, k, b: _add_bias(layer.convolution_op(x, k["kernel"]), b, layer),
                            {"kernel": value(layer.kernel)}, bias)]
    elif isinstance(layer, canonizers.AVERAGE_POOLING):
        parts = [LinearPart(lambda x, k, b: layer.call(x), {}, None)]
    else:
        raise ValueError(f"layer {layer.name!r} ({type(layer).__name__}) has no linear part; "
                         f"received {type(layer).__name__}.")
    if absorbed_bn is not None:
        parts[-1] = _merge(parts[-1], layer, absorbed_bn, dtype)
    return parts


def _separable_parts(layer, value, bias):
    rank = 1 if isinstance(layer, keras.layers.SeparableConv1D) else 2

    def depthwise(x, k, b):
        return keras.ops.depthwise_conv(x, k["depthwise_kernel"], strides=layer.strides, padding=layer.padding,
                                        data_format=layer.data_format, dilation_rate=layer.dilation_rate)

    def pointwise(x, k, b):
        z = keras.ops.conv(x, k["pointwise_kernel"], strides=(1,) * rank, padding="valid",
                           data_format=layer.data_format)
        return _add_bias(z, b, layer)

    return [LinearPart(depthwise, {"depthwise_kernel": value(layer.depthwise_kernel)}, None),
            LinearPart(pointwise, {"pointwise_kernel": value(layer.pointwise_kernel)}, bias)]


def _merge(part: LinearPart, layer, bn, dtype) -> LinearPart:
    """``part`` followed by ``bn`` as one linear part: ``w·s``, ``b·s + t`` (canonizers' merge)."""
    scale, shift = canonizers.batchnorm_affine(bn, dtype)
    (name, kernel), = part.kernels.items()
    if isinstance(layer, (keras.layers.DepthwiseConv1D, keras.layers.DepthwiseConv2D)):
        merged = kernel * tf.reshape(scale, kernel.shape[-2:])
    else:
        merged = kernel * scale
    bias = shift if part.bias is None else part.bias * scale + shift
    return LinearPart(part.apply, {name: merged}, bias)


# ---------------------------------------------------------------------------------------------
# The backward passes


def _rule_gate(rule: LinearRule, part: LinearPart, x, z, to_relevance: bool):
    """``z`` unchanged; its gradient w.r.t. ``x`` replaced by ``rule``'s (in gradient form, or
    the relevance itself when ``to_relevance``)."""

    @tf.custom_gradient
    def gate(x, z):
        def backward(dz):
            coefficients, constant = rule.backward(part, x, z, z * dz)
            if to_relevance:
                dx = x * coefficients + (constant if constant is not None else 0)
            else:
                dx = coefficients if constant is None else coefficients + tf.math.divide_no_nan(constant, x)
            return dx, None

        return tf.identity(z), backward

    return gate(x, z)


def _pass_gate(x, y, to_relevance: bool):
    """``y`` unchanged; relevance passes from ``y`` to ``x`` unchanged (:class:`Pass`)."""

    @tf.custom_gradient
    def gate(x, y):
        def backward(dy):
            if to_relevance:
                return dy, None
            return Pass().gradient(x, y, dy), None

        return tf.identity(y), backward

    return gate(x, y)


class RuleLayer(keras.layers.Layer):
    """A linear layer (its clone ``inner``, whose weights it uses) with an LRP rule on its backward
    pass, its fused activation split off with :class:`Pass`, and possibly a BatchNorm merged in."""

    def __init__(self, inner, rule: LinearRule, **kwargs):
        super().__init__(name=inner.name, dtype=inner.dtype_policy, **kwargs)
        self.inner = inner
        self.rule = rule
        self.to_relevance = False
        self._absorbed = lambda: None  # the merged BatchNormalization's layer, set after copying

    def build(self, input_shape):
        if not self.inner.built:
            self.inner.build(input_shape)

    def call(self, x, training=None, mask=None):
        bn = self._absorbed()
        out = x
        parts = linear_parts(self.inner, absorbed_bn=bn.inner if bn is not None else None)
        for i, part in enumerate(parts):
            z = part.apply(out, part.kernels, part.bias)
            out = _rule_gate(self.rule, part, out, z, self.to_relevance and i == 0)
        activation = getattr(self.inner, "activation", None)
        family = relu_family_of_function(activation) if activation is not None else None
        if family is not None:
            out = _pass_gate(out, family.forward(out), False)
        return out

    def compute_output_spec(self, x, training=None, mask=None):
        spec = self.inner.compute_output_spec(x)
        return keras.KerasTensor(spec.shape, dtype=self.compute_dtype)


class PassLayer(keras.layers.Layer):
    """An element-wise layer (ReLU family, unmerged BatchNorm, Rescaling) with :class:`Pass`; a
    BatchNorm merged into the layer before it is the identity once ``merged`` is set."""

    def __init__(self, inner, **kwargs):
        super().__init__(name=inner.name, dtype=inner.dtype_policy, **kwargs)
        self.inner = inner
        self.to_relevance = False
        self.merged = False

    def build(self, input_shape):
        if not self.inner.built:
            self.inner.build(input_shape)

    def call(self, x, training=None, mask=None):
        if self.merged:
            return tf.identity(x)
        y = self.inner(x, training=False) if keras_private.call_takes_training(self.inner) else self.inner(x)
        return _pass_gate(x, y, self.to_relevance)

    def compute_output_spec(self, x, training=None, mask=None):
        return self.inner.compute_output_spec(x)


# ---------------------------------------------------------------------------------------------
# The rewrite


def _clone(op):
    return type(op).from_config(op.get_config())


def rewrite_lrp(model: keras.Model, composite="epsilon_plus_flat", *, input_relevance: bool = False,
                **options) -> keras.Model:
    """A new model whose input gradient times the input is the LRP relevance of the score.

    Args:
        model: a functional or Sequential ``keras.Model`` (nested ones included); never modified.
        composite: a :class:`~saliency_kit.propagation.composites.Composite` or a registered name
            (``saliency_kit.propagation.composites.names()``); ``options`` (``epsilon``, ``gamma``, ``low``,
            ``high``, ``stabilizer``) build a named one.
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
    composite = get_composite(composite, **options)
    facts = canonizers.model_facts(model)
    plan = {}  # id(original op) -> (fact, rule)
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
    if not plan:
        raise ValueError(f"model {model.name!r} has no layer for an LRP rule; received {len(facts)} layers.")

    wrappers = {}

    def replace(op):
        if id(op) not in plan:
            return None
        fact, rule = plan[id(op)]
        inner = _clone(op)
        if isinstance(rule, LinearRule):
            wrapper = RuleLayer(inner, rule)
        elif fact.kind == "relu" and not isinstance(op, keras.layers.Layer):
            family = canonizers.relu_family_of(op)
            wrapper = PassLayer(keras.layers.Activation(lambda x: family.forward(x), name=op.name))
        else:
            wrapper = PassLayer(inner)
        wrappers[id(op)] = wrapper
        return wrapper

    new_model = copy_model(model, replace, check=False)  # checked once finished, below

    # Canonizers that link layers of the copy: merged BatchNorms, the first layers' relevance.
    for fact in facts:
        if fact.absorbs is not None and id(fact.op) in wrappers:
            bn_wrapper = wrappers[id(fact.absorbs.op)]
            bn_wrapper.merged = True
            wrappers[id(fact.op)]._absorbed = (lambda w: (lambda: w))(bn_wrapper)
        if input_relevance and fact.first and id(fact.op) in wrappers:
            wrappers[id(fact.op)].to_relevance = True
    new_model = _squash_apart(model, new_model, facts)
    check_copy(model, new_model, what="LRP rewrite")

    new_model.rewritten_layers = {
        fact.path: (f"merged into {fact.merged_into.path!r}" if fact.merged_into is not None else plan[id(fact.op)][1])
        for fact in facts if id(fact.op) in plan
    }
    new_model.composite = composite
    return new_model



def _squash_apart(model, new_model, facts):
    """A final layer's fused softmax/sigmoid as a separate ``Activation`` after the rewritten layer
    (which computes the logits), so that scores can be taken before it."""
    final = [f for f in facts if f.final and f.kind == "linear"
             and not canonizers.is_linear_activation(getattr(f.op, "activation", None))
             and relu_family_of_function(f.op.activation) is None]
    if not final:
        return new_model
    activation = final[0].op.activation
    squashed = keras.layers.Activation(activation, name=f"{final[0].op.name}_{canonizers.activation_name(activation)}")
    outputs = squashed(new_model.outputs[0])
    return keras.Model(new_model.inputs, outputs, name=new_model.name)
