"""Backward rules for ReLU-family activations: the forward pass stays, the gradient changes.

A rule is a :class:`ModifiedBackprop`. Bound to one activation (a :class:`ReluFamily`: plain ReLU,
ReLU6, leaky or thresholded ReLU) it is a callable ``rule(x) -> y`` whose forward pass is exactly
that activation and whose backward pass is ``rule.grad(x, y, dy)``. :func:`saliency_kit.rewrite`
binds a rule to every ReLU-family activation of a model; you can also call a rule directly, as in
Lasagne's ``ModifiedBackprop`` recipe::

    guided = sk.GuidedBackprop()          # bound to plain ReLU
    y = guided(x)                         # == relu(x); dy/dx follows guided backprop

Subclass :class:`ModifiedBackprop` and implement ``grad`` for a rule of your own; register the
subclass with ``keras.saving.register_keras_serializable`` if models using it are to be saved.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from typing import Any

import keras
from keras import ops

__all__ = [
    "PLAIN_RELU",
    "is_relu_rule",
    "ReluFamily",
    "ModifiedBackprop",
    "GuidedBackprop",
    "DeconvBackprop",
    "as_rule",
    "relu_family_of_activation",
    "relu_family_of_function",
]


@dataclasses.dataclass(frozen=True)
class ReluFamily:
    """One member of the ReLU family, as ``keras.activations.relu`` parameterises it.

    ``f(x) = max_value``                         if ``x >= max_value``
    ``f(x) = x``                                 if ``threshold < x < max_value``
    ``f(x) = negative_slope * (x - threshold)``  if ``x < threshold``

    ``forward`` is Keras' own implementation (so outputs are bit-identical to the layer's), and
    ``derivative`` is ``f'(x)``; at the kinks it follows TensorFlow's ReLU, ReLU6 and leaky-ReLU
    kernels (1 only strictly inside ``(threshold, max_value)``; ``negative_slope`` at ``x == 0`` for a
    leaky ReLU without threshold).
    """

    negative_slope: float = 0.0
    max_value: float | None = None
    threshold: float = 0.0

    @property
    def is_plain(self) -> bool:
        return self.negative_slope == 0.0 and self.max_value is None and self.threshold == 0.0

    @property
    def nonnegative(self) -> bool:
        """Whether every output is ``>= 0`` (no negative slope, threshold and cap not below 0)."""
        return (
            self.negative_slope == 0.0 and self.threshold >= 0.0 and (self.max_value is None or self.max_value >= 0.0)
        )

    @property
    def name(self) -> str:
        if self.is_plain:
            return "relu"
        if self.max_value == 6.0 and self.negative_slope == 0.0 and self.threshold == 0.0:
            return "relu6"
        parts = [f"{k}={v}" for k, v in self.as_dict().items() if v != ReluFamily.__dataclass_fields__[k].default]
        return f"relu({', '.join(parts)})"

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)

    def forward(self, x: Any) -> Any:
        """``f(x)`` computed exactly as ``keras.activations.relu`` computes it."""
        return keras.activations.relu(
            x, negative_slope=self.negative_slope, max_value=self.max_value, threshold=self.threshold
        )

    def derivative(self, x: Any) -> Any:
        """``f'(x)``, same shape and dtype as ``x``."""
        one = ops.ones_like(x)
        zero = ops.zeros_like(x)
        if self.is_plain:
            return ops.where(ops.greater(x, 0), one, zero)
        threshold = ops.cast(self.threshold, x.dtype)
        inside = ops.greater(x, threshold)
        if self.max_value is not None:
            inside = ops.logical_and(inside, ops.less(x, ops.cast(self.max_value, x.dtype)))
        below = ops.less_equal(x, threshold) if self.threshold == 0.0 else ops.less(x, threshold)
        slope = ops.multiply(ops.cast(self.negative_slope, x.dtype), one)
        return ops.where(inside, one, ops.where(below, slope, zero))

    def backward(self, x: Any, dy: Any) -> Any:
        """``dy · f'(x)``. On TensorFlow, its own gradient kernel where the activation is one op
        (``ReluGrad``, ``Relu6Grad``, ``LeakyReluGrad``: one fused pass); else a product."""
        if keras.backend.backend() == "tensorflow":
            fused = self._tensorflow_backward(x, dy)
            if fused is not None:
                return fused
        return ops.multiply(dy, self.derivative(x))

    def _tensorflow_backward(self, x: Any, dy: Any) -> Any:
        """TensorFlow's fused gradient kernel of this activation, or ``None`` if it has none."""
        import tensorflow as tf

        if self.is_plain:
            return tf.raw_ops.ReluGrad(gradients=dy, features=x)
        if self.threshold == 0.0 and self.negative_slope == 0.0 and self.max_value == 6.0:
            return tf.raw_ops.Relu6Grad(gradients=dy, features=x)
        if self.threshold == 0.0 and self.max_value is None:
            return tf.raw_ops.LeakyReluGrad(gradients=dy, features=x, alpha=self.negative_slope)
        return None


PLAIN_RELU = ReluFamily()


class ModifiedBackprop:
    """Base class of a backward rule for ReLU-family activations.

    Subclasses implement :meth:`grad`. The forward pass is always the bound activation itself,
    unchanged (``max_value``, ``negative_slope`` and ``threshold`` included).

    Args:
        activation: the activation this rule is bound to: a :class:`ReluFamily`, or ``None`` for
            plain ReLU. :func:`saliency_kit.rewrite` binds a copy of the rule to each activation it
            rewrites, so one rule object serves a whole model.
    """

    def __init__(self, activation: ReluFamily | None = None) -> None:
        self.activation = activation if activation is not None else PLAIN_RELU

    def grad(self, x: Any, y: Any, dy: Any) -> Any:
        """The gradient to pass back. ``x``: the activation's input, ``y``: its output,
        ``dy``: the incoming gradient; all of one shape and dtype. Returns ``dx`` of that shape."""
        raise NotImplementedError(f"{type(self).__name__} must implement grad(self, x, y, dy)")

    def derivative(self, x: Any) -> Any:
        """``f'(x)`` of the bound activation, for use inside :meth:`grad`."""
        return self.activation.derivative(x)

    def bind(self, activation: ReluFamily) -> ModifiedBackprop:
        """A shallow copy of this rule bound to ``activation``."""
        bound = copy.copy(self)
        bound.activation = activation
        return bound

    def __call__(self, x: Any) -> Any:
        """``f(x)`` on the forward pass, :meth:`grad` on the backward pass."""

        @ops.custom_gradient
        def modified(x: Any) -> Any:
            y = self.activation.forward(x)

            def backward(*grads: Any, upstream: Any = None) -> Any:  # PyTorch passes it as `upstream`
                return self.grad(x, y, upstream if upstream is not None else grads[0])

            return y, backward

        return modified(x)

    # Keras serialisation, so that a rewritten model can be saved and loaded again.
    def get_config(self) -> dict:
        return {"activation": self.activation.as_dict()}

    @classmethod
    def from_config(cls, config: dict) -> ModifiedBackprop:
        config = dict(config)
        activation = ReluFamily(**config.pop("activation", {}))
        rule = cls(**config)
        return rule.bind(activation)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(activation={self.activation.name})"


@keras.saving.register_keras_serializable(package="saliency_kit")
class GuidedBackprop(ModifiedBackprop):
    """Guided backpropagation (Springenberg et al., 2015).

    ``dx = dy * f'(x) * 1[dy > 0]``: only positive gradients pass, and only where the unit was
    active on the forward pass (for plain ReLU, ``f'(x) = 1[x > 0]``).
    """

    def grad(self, x: Any, y: Any, dy: Any) -> Any:
        return self.activation.backward(x, ops.relu(dy))  # dy · 1[dy > 0] · f'(x)


@keras.saving.register_keras_serializable(package="saliency_kit")
class DeconvBackprop(ModifiedBackprop):
    """The deconvnet rule (Zeiler & Fergus, 2014): ``dx = max(dy, 0)``, ignoring the forward mask."""

    def grad(self, x: Any, y: Any, dy: Any) -> Any:
        return ops.relu(dy)


_NAMED_RULES = {"guided": GuidedBackprop, "deconv": DeconvBackprop}


def as_rule(rule: Any) -> ModifiedBackprop:
    """``"guided"``, ``"deconv"`` or a :class:`ModifiedBackprop` instance -> a rule instance."""
    if isinstance(rule, ModifiedBackprop):
        return rule
    if isinstance(rule, str) and rule in _NAMED_RULES:
        return _NAMED_RULES[rule]()
    if isinstance(rule, type) and issubclass(rule, ModifiedBackprop):
        raise ValueError(f"rule must be an instance, not the class {rule.__name__}: pass {rule.__name__}()")
    raise ValueError(f"rule must be 'guided', 'deconv' or a ModifiedBackprop instance; received {rule!r}")


def _known_relu_functions() -> tuple[dict, dict]:
    """Functions users pass as ``activation=`` that are ReLU-family, with their parameters."""
    table = {
        keras.activations.relu: PLAIN_RELU,
        keras.activations.relu6: ReluFamily(max_value=6.0),
        keras.ops.relu: PLAIN_RELU,
        keras.ops.relu6: ReluFamily(max_value=6.0),
    }
    leaky = {keras.activations.leaky_relu: "negative_slope", keras.ops.leaky_relu: "negative_slope"}
    if keras.backend.backend() == "tensorflow":  # tf.nn's, only where TensorFlow runs
        import tensorflow as tf

        table.update({tf.nn.relu: PLAIN_RELU, tf.nn.relu6: ReluFamily(max_value=6.0)})
        leaky[tf.nn.leaky_relu] = "alpha"
    return table, leaky


_KNOWN_RELU, _LEAKY = _known_relu_functions()
_LEAKY_DEFAULT = dict.fromkeys(_LEAKY, 0.2)


def relu_family_of_function(fn: Any) -> ReluFamily | None:
    """The :class:`ReluFamily` computed by activation function ``fn``, or ``None`` if it is not one.

    Recognises ``keras.activations.relu/relu6/leaky_relu``, the same in ``keras.ops`` and
    ``tf.nn``, and ``functools.partial`` of them with keyword parameters.
    """
    keywords = {}
    if isinstance(fn, functools.partial) and not fn.args:
        keywords, fn = dict(fn.keywords), fn.func
    try:
        if fn in _KNOWN_RELU:
            base = _KNOWN_RELU[fn]
            if not keywords:
                return base
            params = {**base.as_dict(), **{k: v for k, v in keywords.items() if k in base.as_dict()}}
            if set(keywords) - set(params):
                return None
            max_value = params["max_value"]
            return ReluFamily(
                negative_slope=float(params["negative_slope"]),
                max_value=float(max_value) if max_value is not None else None,
                threshold=float(params["threshold"]),
            )
        if fn in _LEAKY:
            slope = keywords.get(_LEAKY[fn], _LEAKY_DEFAULT[fn])
            return ReluFamily(negative_slope=float(slope))
    except TypeError:  # unhashable callables cannot be ReLU functions
        return None
    return None


def relu_family_of_activation(op: Any) -> ReluFamily | None:
    """The :class:`ReluFamily` a *stand-alone* activation ``op`` computes, or ``None``.

    Stand-alone activations: a ``keras.layers.ReLU``/``LeakyReLU`` (any arguments, also when
    passed as another layer's ``activation=``), an ``Activation`` layer, and a bare operation of a
    functional graph (``keras.ops.relu(x)``, ``keras.activations.relu(x, ...)``). A layer with a
    fused ``activation=`` is not one (the rewrite and LRP each decide what to do with those).
    """
    if isinstance(op, keras.layers.ReLU):
        max_value = None if op.max_value is None else float(op.max_value)
        return ReluFamily(float(op.negative_slope), max_value, float(op.threshold))
    if isinstance(op, keras.layers.LeakyReLU):
        return ReluFamily(negative_slope=float(op.negative_slope))
    if isinstance(op, keras.layers.Activation):
        return relu_family_of_function(op.activation) if callable(op.activation) else None
    if isinstance(op, keras.layers.Layer):
        return None
    kind = type(op).__name__  # bare operations recorded in a functional graph
    if kind == "Relu":
        return ReluFamily()
    if kind == "Relu6":
        return ReluFamily(max_value=6.0)
    if kind == "LeakyRelu":
        return ReluFamily(negative_slope=float(op.negative_slope))
    if kind == "ReLU" and hasattr(op, "threshold"):  # keras.activations.relu(x, ...) symbolically
        max_value = None if op.max_value is None else float(op.max_value)
        return ReluFamily(float(op.negative_slope), max_value, float(op.threshold))
    return None


def is_relu_rule(rule: Any) -> bool:
    """Whether ``rule`` is a rule for ReLU-family ops (``"guided"``, ``"deconv"``, a
    ``ModifiedBackprop``), which each backend's op-level pass applies; LRP composites and DeepLIFT
    rewrite linear layers too and go through ``sk.rewrite``."""
    return isinstance(rule, (str, ModifiedBackprop))
