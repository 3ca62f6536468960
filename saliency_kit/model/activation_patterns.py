"""ReLU-family activations made of several TensorFlow ops, recognised in a graph.

``keras.activations.relu`` with a ``threshold``, or with a ``max_value`` other than 6 (and
``negative_slope`` together with either), is not one op but several (``Relu`` or ``SelectV2``, then
``Minimum``/``Maximum``, and for a leaky one ``Neg``, ``Relu``, ``Mul``, ``Sub``); so are the same
activations written by hand (``tf.minimum(tf.nn.relu(x), 3)``, ``tf.clip_by_value(tf.nn.relu(x), 0, 3)``,
``tf.where(x > t, x, 0)``, ``x * cast(x > t)``, ``where(x > 0, x, a·x)``, ``maximum(x, a·x)``).
:func:`match_activation` recognises them from the op computing the output: it returns a
:class:`FoundActivation` (the input, the :class:`~saliency_kit.rules.ReluFamily` with its constants,
the ops on the gradient's path and off it), ``None``, or raises :class:`Unsupported` when the
pattern's parameters are not constants. :mod:`.override` marks what it finds.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import tensorflow as tf

from ..rules import ReluFamily

__all__ = ["FoundActivation", "LAST_OP_TYPES", "RELU_OP_TYPES", "Unsupported", "family_of_op", "match_activation"]

#: The op types whose gradients a ``relu_rule`` block replaces (:mod:`.override`).
RELU_OP_TYPES = ("Relu", "Relu6", "LeakyRelu")


def family_of_op(op: Any) -> ReluFamily:
    if op.type == "Relu6":
        return ReluFamily(max_value=6.0)
    if op.type == "LeakyRelu":
        return ReluFamily(negative_slope=_decimal(np.float32(op.get_attr("alpha"))))  # a float attr
    return ReluFamily()


class Unsupported(Exception):
    """A ReLU-family pattern whose parameters are not constants: no rule can be bound to it."""


@dataclasses.dataclass
class FoundActivation:
    """One ReLU-family activation ``y = f(x)`` found in a graph.

    ``path``: ``[(op, main input)]`` from the op computing ``y`` down to the op whose main input is
    ``x``: the gradient flows along it. ``others``: ops off that path (a threshold's comparison, a
    leaky activation's negative part) that take no gradient.
    """

    x: tf.Tensor
    family: ReluFamily | None  # None: a PReLU (learned slope), which keeps its plain gradient
    path: list
    others: list = dataclasses.field(default_factory=list)

    @property
    def relu(self) -> ReluFamily:
        """``family`` where it cannot be a PReLU's (an inner activation: ``_inner`` skips those)."""
        if self.family is None:
            raise Unsupported("a PReLU (learned slope) inside another ReLU-family activation")
        return self.family

    @property
    def ops(self) -> list:
        return [op for op, _ in self.path] + self.others


#: Op types that can end a ReLU-family activation made of several ops.
LAST_OP_TYPES = ("Minimum", "Maximum", "SelectV2", "Select", "Mul", "Sub", "AddV2", "Add")


def _constant(tensor: tf.Tensor) -> float | None:
    """The one value a constant tensor holds (a scalar, an array of one repeated value, ``zeros_like``,
    ``fill``), else None."""
    kind = tensor.op.type
    if kind in ("ZerosLike", "OnesLike"):
        return 0.0 if kind == "ZerosLike" else 1.0
    if kind == "Fill":
        return _constant(tensor.op.inputs[1])
    value = tf.get_static_value(tensor)
    if value is None:
        return None
    value = np.asarray(value)
    if value.size == 0 or not np.issubdtype(value.dtype, np.number) or np.any(value != value.flat[0]):
        return None
    return _decimal(value.flat[0])


def _decimal(value: Any) -> float:
    """The shortest decimal that is ``value`` in its own precision (float32 ``0.1`` -> ``0.1``, not
    ``0.10000000149``): the same number once cast back, and the family reads as it was written."""
    return float(str(value))


def _same(a: Any, b: Any) -> bool:
    return a.name == b.name  # tensors of one graph


def _only_feeds(tensor: tf.Tensor, op: Any) -> bool:
    consumers = tensor.consumers()
    return len(consumers) == 1 and consumers[0].name == op.name


def _threshold(greater: Any, x: Any) -> float | None:
    """``t`` when op ``greater`` is ``Greater(x, t)``; ``Unsupported`` when ``t`` is not a constant."""
    if greater.type != "Greater" or not _same(greater.inputs[0], x):
        return None
    threshold = _constant(greater.inputs[1])
    if threshold is None:
        raise Unsupported(f"a thresholded ReLU ({greater.name}) whose threshold is not a constant")
    return threshold


def _with_constant(op: Any) -> tuple[Any, Any, Any]:
    """``(other input, its index, the constant)`` of a binary op with one constant input."""
    for main in (0, 1):
        value = _constant(op.inputs[1 - main])
        if value is not None and _constant(op.inputs[main]) is None:
            return op.inputs[main], main, value
    return None, None, None


def _times(tensor: tf.Tensor, x: Any) -> float | None:
    """``a`` when ``tensor`` is ``a * x`` with a constant ``a``."""
    op = tensor.op
    if op.type != "Mul":
        return None
    for main in (0, 1):
        if _same(op.inputs[main], x):
            return _constant(op.inputs[1 - main])
    return None


def _inner(tensor: tf.Tensor, consumer: Any) -> FoundActivation | None:
    """The ReLU-family activation computing ``tensor``, when ``consumer`` is its only use."""
    found = match_activation(tensor) if _only_feeds(tensor, consumer) else None
    return None if found is None or found.family is None else found


def _negative_part(mul: Any, x: Any) -> tuple[Any, float | None, list] | None:
    """``(factor, threshold, ops)`` when op ``mul`` is ``factor * relu(-x + threshold)`` (Keras'
    leaky composite; ``factor`` the tensor multiplying the ReLU)."""
    for part in (0, 1):
        relu = mul.inputs[part].op
        if relu.type != "Relu" or not _only_feeds(mul.inputs[part], mul):
            continue
        inner, ops, threshold = relu.inputs[0].op, [mul, relu], 0.0
        if inner.type in ("AddV2", "Add"):
            negated, _, threshold = _with_constant(inner)
            if negated is None:
                continue
            ops.append(inner)
            inner = negated.op
        if inner.type != "Neg" or not _same(inner.inputs[0], x):
            continue
        return mul.inputs[1 - part], threshold, ops + [inner]
    return None


def match_activation(tensor: Any) -> FoundActivation | None:
    """The ReLU-family activation that computes ``tensor``, as Keras composes it or as written by
    hand, or None.

    One op: ``Relu``, ``Relu6``, ``LeakyRelu``. A threshold: ``SelectV2(Greater(x, t), x, 0)``
    (``tf.where``) or ``x * Cast(Greater(x, t))``. A ceiling: ``Minimum(f(x), c)``, then optionally
    ``Maximum(·, 0)`` (``clip_by_value``). Leaky with a ceiling or threshold:
    ``f(x) - slope * Relu(-x + t)``; leaky by hand: ``where(x > 0, x, slope * x)``,
    ``maximum(x, slope * x)``, ``relu(x) - slope * relu(-x)``. Inner results must have no other use. A PReLU,
    ``relu(x) + (-alpha) * relu(-x)`` with a learned ``alpha``, is found with ``family=None``: it is
    not of the family (no constant slope), and its ReLUs are not the model's ReLUs either.
    """
    op = tensor.op
    kind = op.type
    if kind in RELU_OP_TYPES:
        return FoundActivation(op.inputs[0], family_of_op(op), [(op, 0)])
    if kind in ("SelectV2", "Select"):  # where(x > t, x, 0), or where(x > 0, x, slope * x)
        condition, x, otherwise = op.inputs
        slope = 0.0 if _constant(otherwise) == 0.0 else _times(otherwise, x)
        threshold = None if slope is None else _threshold(condition.op, x)
        if threshold is None or (slope and threshold):
            return None  # slope · x below a threshold is not of the family
        family = ReluFamily(negative_slope=slope) if slope else ReluFamily(threshold=threshold)
        return FoundActivation(x, family, [(op, 1)], [condition.op] + ([otherwise.op] if slope else []))
    if kind == "Mul":
        for main in (0, 1):
            x, gate = op.inputs[main], op.inputs[1 - main].op
            if gate.type == "Cast" and (threshold := _threshold(gate.inputs[0].op, x)) is not None:
                return FoundActivation(x, ReluFamily(threshold=threshold), [(op, main)], [gate, gate.inputs[0].op])
        return None
    if kind == "Minimum":
        inner, main, ceiling = _with_constant(op)
        found = None if inner is None else _inner(inner, op)
        if found is None or ceiling <= max(found.relu.threshold, 0.0):
            return None
        family = found.relu
        if family.max_value is None or ceiling < family.max_value:
            family = dataclasses.replace(family, max_value=ceiling)
        return FoundActivation(found.x, family, [(op, main)] + found.path, found.others)
    if kind == "Maximum":
        for main in (0, 1):  # max(x, slope · x), 0 < slope < 1: a leaky ReLU written by hand
            x, other = op.inputs[main], op.inputs[1 - main]
            slope = _times(other, x)
            if slope is not None and 0.0 < slope < 1.0:
                return FoundActivation(x, ReluFamily(negative_slope=slope), [(op, main)], [other.op])
        inner, main, floor = _with_constant(op)
        found = None if inner is None or floor != 0.0 else _inner(inner, op)
        if found is None or found.relu.negative_slope != 0.0 or found.relu.threshold < 0.0:
            return None  # max(f(x), 0) == f(x) only for these
        return FoundActivation(found.x, found.relu, [(op, main)] + found.path, found.others)
    if kind in ("Sub", "AddV2", "Add"):  # f(x) - slope * relu(t - x), or f(x) + (-slope) * relu(-x)
        for main in (0,) if kind == "Sub" else (0, 1):
            found = _leaky(op, main)
            if found is not None:
                return found
    return None


def _leaky(op: Any, main: int) -> FoundActivation | None:
    """``Sub``/``Add`` op ``op`` as ``f(x) ∓ factor * relu(t - x)``, ``f(x)`` its input ``main``."""
    core, negative = op.inputs[main], op.inputs[1 - main]
    if negative.op.type != "Mul" or not _only_feeds(negative, op):
        return None
    found = _inner(core, op)
    if found is None or found.relu.negative_slope != 0.0:
        return None
    part = _negative_part(negative.op, found.x)
    if part is None or part[1] != found.relu.threshold:
        return None
    factor, _, ops = part
    path, others = [(op, main)] + found.path, found.others + ops
    slope = _constant(factor)
    if slope is None:
        if op.type == "Sub":
            raise Unsupported(f"a leaky ReLU ({op.name}) whose negative slope is not a constant")
        return FoundActivation(found.x, None, path, others)  # a PReLU
    return FoundActivation(
        found.x, dataclasses.replace(found.relu, negative_slope=slope if op.type == "Sub" else -slope), path, others
    )
