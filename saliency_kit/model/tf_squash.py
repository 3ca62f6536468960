"""A final softmax/sigmoid recognised from a layer's traced TensorFlow graph (:mod:`.squash` on
TensorFlow).

A layer (a ``Lambda``, an ``Activation`` holding a lambda, a ``keras.ops`` node, a layer of the
user's own, a subclassed model) is traced into a TensorFlow graph on a symbolic input; its
output *ends in a squash* when the last operations are a ``Sigmoid`` or ``Softmax`` (TensorFlow's
``Softmax`` is over the last axis), or one written out in ops (``exp(a) / Σ exp(a)`` over the last
axis, stable or not; ``1 / (1 + exp(-a))``), followed only by operations that keep values
(``Identity``, ``Cast``, reshapes). The values before it are then the squash's input, re-shaped and re-cast as
the output was: :func:`before_squash` takes them from the graph the layer ran in (inside the
engine's compiled kernel, where every model runs), so the layer is not re-written and its
variables are its own.

A squash inside a separately compiled ``tf.function`` the layer calls is seen (its function's
graph is looked into) but cannot be looked behind: :func:`traced_squash` says ``"opaque"``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

__all__ = ["traced_squash", "before_squash", "eager_or_traced", "SQUASH_OPS"]

#: TensorFlow op type -> the squash it is
SQUASH_OPS = {"Sigmoid": "sigmoid", "Softmax": "softmax"}
_SAME_VALUES = ("Identity", "Cast", "Reshape", "Squeeze", "ExpandDims", "EnsureShape")
_CALLS = ("PartitionedCall", "StatefulPartitionedCall")


def _is_const(tensor: tf.Tensor, value: float) -> bool:
    constant = tf.get_static_value(tensor)
    return constant is not None and np.size(constant) == 1 and float(np.ravel(constant)[0]) == value


def _skip(tensor: tf.Tensor, *types: Any) -> tf.Tensor:
    while tensor.op.type in types and tensor.op.inputs:
        tensor = tensor.op.inputs[0]
    return tensor


def _by_hand(tensor: tf.Tensor) -> tuple[str, tf.Tensor] | None:
    """``(squash, its input)`` for a softmax or sigmoid written out in ops, else ``None``:
    ``exp(a) / Σ exp(a)`` over the last axis (``a`` possibly minus its maximum, the stable form),
    ``1 / (1 + exp(-a))`` (also as ``Reciprocal`` or ``Inv``)."""
    op = tensor.op
    if op.type in ("Reciprocal", "Inv") or op.type in ("RealDiv", "Div") and _is_const(op.inputs[0], 1.0):
        total = _skip(op.inputs[-1], "Identity").op
        if total.type in ("AddV2", "Add"):
            parts = [t for t in total.inputs if not _is_const(t, 1.0)]
            if len(parts) == 1 and len(total.inputs) == 2 and parts[0].op.type == "Exp":
                negated = parts[0].op.inputs[0]
                if negated.op.type == "Neg":
                    return "sigmoid", negated.op.inputs[0]
        return None
    if op.type not in ("RealDiv", "Div"):
        return None
    numerator, denominator = _skip(op.inputs[0], "Identity"), _skip(op.inputs[1], "Identity")
    if numerator.op.type != "Exp" or denominator.op.type != "Sum":
        return None
    if _skip(denominator.op.inputs[0], "Identity").name != numerator.name:
        return None
    axes = np.ravel(tf.get_static_value(denominator.op.inputs[1]))
    rank = len(numerator.shape)
    if axes is None or len(axes) != 1 or int(axes[0]) % rank != rank - 1:
        return None
    logits = numerator.op.inputs[0]
    if logits.op.type == "Sub" and _skip(logits.op.inputs[1], "Identity", "StopGradient").op.type == "Max":
        logits = logits.op.inputs[0]  # the stable form subtracts the row's maximum
    return "softmax", logits


def _squash_of(tensor: tf.Tensor) -> tuple[str | None, tf.Tensor | None, list]:
    """``(squash, its input, value-keeping ops after it from the squash outwards)`` when ``tensor``
    ends in a softmax/sigmoid (an op, or written out in ops), else ``(None, None, chain)``."""
    chain = []
    while tensor.op.type in _SAME_VALUES and tensor.op.inputs:
        chain.append(tensor.op)
        tensor = tensor.op.inputs[0]
    if tensor.op.type in SQUASH_OPS:
        return SQUASH_OPS[tensor.op.type], tensor.op.inputs[0], chain[::-1]
    found = _by_hand(tensor)
    if found:
        return found[0], found[1], chain[::-1]
    return None, None, chain


def _inside_call(tensor: tf.Tensor, graph: Any) -> str | None:
    """The squash ending a separately compiled function whose output ``tensor`` is, if any."""
    while tensor.op.type in _SAME_VALUES and tensor.op.inputs:
        tensor = tensor.op.inputs[0]
    if tensor.op.type not in _CALLS:
        return None
    try:
        body = graph._get_function(tensor.op.get_attr("f").name).graph  # noqa: SLF001 - read only
        inner = body.outputs[tensor.value_index]
    except Exception:  # noqa: BLE001 - a function we cannot read: nothing to say about it
        return None
    squash, _, _ = _squash_of(inner)
    return squash or _inside_call(inner, body)


def traced_squash(call: Callable, specs: Sequence[tuple]) -> tuple[str, str] | None:
    """``(kind, squash)`` for ``call(*symbolic inputs)``'s single output, else ``None``; ``specs``
    the inputs' ``(shape, dtype)``.

    ``squash`` is ``"sigmoid"`` or ``"softmax"``; ``kind`` is ``"traced"`` (:func:`before_squash`
    reaches the values before it) or ``"opaque"`` (the squash ends a separately compiled function
    the call runs, which cannot be looked behind). ``None`` also when ``call`` cannot be traced on
    symbolic inputs.
    """
    try:
        tensor_specs = [tf.TensorSpec(shape, dtype) for shape, dtype in specs]
        concrete = tf.function(call, autograph=False).get_concrete_function(*tensor_specs)
    except Exception:  # noqa: BLE001 - a layer that cannot be traced symbolically: not recognised
        return None
    outputs = tf.nest.flatten(concrete.structured_outputs)
    if len(outputs) != 1 or not isinstance(outputs[0], tf.Tensor):
        return None
    squash, _, _ = _squash_of(outputs[0])
    if squash is not None:
        return "traced", squash
    inner = _inside_call(outputs[0], concrete.graph)
    return ("opaque", inner) if inner else None


def before_squash(output: Any) -> Any:
    """The values before the final softmax/sigmoid of ``output``, a tensor of a graph being traced
    (``ValueError`` when it does not end in one): the squash's input, passed through the same
    value-keeping operations (casts, reshapes) that followed the squash."""
    squash, values, chain = _squash_of(output)
    if squash is None:
        raise ValueError(
            "the final softmax/sigmoid found when the model was first traced is not there when it "
            f"runs; use score='output'; received an output made by {output.op.type!r}."
        )
    for after in chain:
        if after.type == "Cast":
            values = tf.cast(values, after.get_attr("DstT"))
        elif after.type in ("Reshape", "Squeeze", "ExpandDims", "EnsureShape"):
            values = tf.reshape(values, tf.shape(after.outputs[0]))
    return values


def eager_or_traced(call: Callable) -> Callable:
    """``call`` followed by :func:`before_squash`, eagerly too (then traced for the occasion)."""

    def run(*args: Any, **kwargs: Any) -> Any:
        if tf.inside_function():
            return before_squash(call(*args, **kwargs))
        return tf.function(lambda *a: before_squash(call(*a, **kwargs)), autograph=False)(*args)

    return run
