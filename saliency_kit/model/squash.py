"""A final softmax/sigmoid recognised from what a layer computes, not from a function's name.

A layer (a ``Lambda``, an ``Activation`` holding a lambda, a ``keras.ops`` node, a layer of the
user's own, a subclassed model) is traced into a TensorFlow graph on a symbolic input; its
output *ends in a squash* when the last operations are a ``Sigmoid`` or ``Softmax`` (TensorFlow's
``Softmax`` is over the last axis) followed only by operations that keep values (``Identity``,
``Cast``, reshapes). The values before it are then the squash's input, re-shaped and re-cast as
the output was: :func:`before_squash` takes them from the graph the layer ran in (inside the
engine's compiled kernel, where every model runs), so the layer is not re-written and its
variables are its own.

A squash inside a separately compiled ``tf.function`` the layer calls is seen (its function's
graph is looked into) but cannot be looked behind: :func:`traced_squash` says ``"opaque"``.
"""
from __future__ import annotations

from typing import Callable, Sequence

import tensorflow as tf

__all__ = ["traced_squash", "before_squash", "eager_or_traced", "SQUASH_OPS"]

#: TensorFlow op type -> the squash it is
SQUASH_OPS = {"Sigmoid": "sigmoid", "Softmax": "softmax"}
_SAME_VALUES = ("Identity", "Cast", "Reshape", "Squeeze", "ExpandDims", "EnsureShape", "StopGradient")
_CALLS = ("PartitionedCall", "StatefulPartitionedCall")


def _squash_of(tensor):
    """``(squash op, ops after it from the squash outwards)`` when ``tensor`` ends in a squash."""
    chain = []
    while tensor.op.type in _SAME_VALUES and tensor.op.inputs:
        chain.append(tensor.op)
        tensor = tensor.op.inputs[0]
    if tensor.op.type in SQUASH_OPS:
        return tensor.op, chain[::-1]
    return None, chain


def _inside_call(tensor, graph) -> str | None:
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
    op, _ = _squash_of(inner)
    return SQUASH_OPS[op.type] if op is not None else _inside_call(inner, body)


def traced_squash(call: Callable, specs: Sequence[tf.TensorSpec]) -> tuple[str, str] | None:
    """``(kind, squash)`` for ``call(*symbolic inputs)``'s single output, else ``None``.

    ``squash`` is ``"sigmoid"`` or ``"softmax"``; ``kind`` is ``"traced"`` (:func:`before_squash`
    reaches the values before it) or ``"opaque"`` (the squash ends a separately compiled function
    the call runs, which cannot be looked behind). ``None`` also when ``call`` cannot be traced on
    symbolic inputs.
    """
    try:
        concrete = tf.function(call, autograph=False).get_concrete_function(*specs)
    except Exception:  # noqa: BLE001 - a layer that cannot be traced symbolically: not recognised
        return None
    outputs = tf.nest.flatten(concrete.structured_outputs)
    if len(outputs) != 1 or not isinstance(outputs[0], tf.Tensor):
        return None
    op, _ = _squash_of(outputs[0])
    if op is not None:
        return "traced", SQUASH_OPS[op.type]
    inner = _inside_call(outputs[0], concrete.graph)
    return ("opaque", inner) if inner else None


def before_squash(output):
    """The values before the final softmax/sigmoid of ``output``, a tensor of a graph being traced
    (``ValueError`` when it does not end in one): the squash's input, passed through the same
    value-keeping operations (casts, reshapes) that followed the squash."""
    op, chain = _squash_of(output)
    if op is None:
        raise ValueError(
            "the final softmax/sigmoid found when the model was first traced is not there when it "
            f"runs; use score='output'; received an output made by {output.op.type!r}."
        )
    values = op.inputs[0]
    for after in chain:
        if after.type == "Cast":
            values = tf.cast(values, after.get_attr("DstT"))
        elif after.type in ("Reshape", "Squeeze", "ExpandDims", "EnsureShape"):
            values = tf.reshape(values, tf.shape(after.outputs[0]))
    return values


def eager_or_traced(call: Callable) -> Callable:
    """``call`` followed by :func:`before_squash`, eagerly too (then traced for the occasion)."""

    def run(*args, **kwargs):
        if tf.inside_function():
            return before_squash(call(*args, **kwargs))
        return tf.function(lambda *a: before_squash(call(*a, **kwargs)), autograph=False)(*args)

    return run
