"""Which axis of a model's input holds the channels, found by following what the model computes.

Models converted from PyTorch take ``[B, C, H, W]`` and start with a ``Permute((2, 3, 1))`` (or a
transpose in a ``Lambda``, or in a subclassed model's ``call``) before channels-last
convolutions: the layers' ``data_format`` then says nothing about the input. :func:`traced_channel_axis`
traces the model on a symbolic input and follows the graph from the input to the first spatial
operation (a convolution or pooling), composing the transposes on the way; that operation's own
data format says where its channels are, and the composition says which input axis they come from.

Operations on the way that keep axes where they are (element-wise arithmetic, casts, padding,
crops, resizes, normalisation) are passed through; an operation that may move axes in a way that
cannot be followed (a reshape, a gather) makes the answer *unsure*.
"""
from __future__ import annotations

from dataclasses import dataclass

import tensorflow as tf

__all__ = ["Traced", "traced_channel_axis"]

#: spatial TensorFlow ops and how to read the position of their input's channel axis
_SPATIAL = ("Conv2D", "Conv3D", "DepthwiseConv2dNative", "MaxPool", "MaxPoolV2", "AvgPool", "MaxPool3D",
            "AvgPool3D")
#: ops whose output axes are their (first data) input's axes
_KEEP_AXES = {
    "Identity", "Cast", "StopGradient", "EnsureShape", "CheckNumerics", "PreventGradient",
    "Add", "AddV2", "Sub", "Mul", "RealDiv", "Div", "DivNoNan", "Maximum", "Minimum", "Pow", "SquaredDifference",
    "Neg", "Abs", "Square", "Sqrt", "Rsqrt", "Exp", "Log", "Log1p", "Tanh", "Sigmoid", "Relu", "Relu6", "Elu",
    "Selu", "LeakyRelu", "Softplus", "Softsign", "Floor", "Round", "Sign", "ClipByValue", "BiasAdd", "Select",
    "SelectV2", "FusedBatchNormV3", "Pad", "PadV2", "MirrorPad", "Slice", "StridedSlice", "ResizeBilinear",
    "ResizeNearestNeighbor", "ResizeBicubic", "ResizeArea", "ScaleAndTranslate", "ImageProjectiveTransformV3",
    "Erf", "Reciprocal",
}


@dataclass(frozen=True)
class Traced:
    """What following the graph found.

    ``axis``: the input axis (batch included) holding the channels of the first spatial
    operation, or ``None`` (no spatial operation reached from the input, or ``unsure``).
    ``moved``: whether a transpose lies on the way. ``unsure``: an operation on the way may
    move axes in a way that was not followed.
    """

    axis: int | None
    moved: bool = False
    unsure: bool = False


def _reaching(graph, source) -> set:
    """Names of the tensors computed from ``source`` in ``graph``."""
    seen = {source.name}
    for op in graph.get_operations():  # in creation order: inputs before their consumers
        if any(t.name in seen for t in op.inputs):
            seen.update(t.name for t in op.outputs)
    return seen


def _follow(tensor, source, reaching) -> tuple[list | None, bool]:
    """``(axes, moved)``: ``axes[i]`` the axis of ``source`` at position ``i`` of ``tensor`` (``None``
    for an axis added on the way), or ``None`` when the way cannot be followed; ``moved`` whether
    a transpose lies on the way."""
    chain = []
    while tensor.name != source.name:
        op = tensor.op
        data = [t for t in op.inputs if t.name in reaching]
        if not data:
            return None, False
        chain.append((op, data[0]))
        tensor = data[0]
    rank = len(source.shape)
    axes: list = list(range(rank))  # axes[i]: the source axis at position i of the current tensor
    moved = False
    for op, data in reversed(chain):
        out = op.outputs[0]
        in_rank, out_rank = len(data.shape), len(out.shape)
        if op.type == "Transpose":
            perm = tf.get_static_value(op.inputs[1])
            if perm is None:
                return None, True
            axes = [axes[int(p)] for p in perm]
            moved = moved or list(perm) != sorted(perm)
        elif op.type == "ExpandDims":
            where = int(tf.get_static_value(op.inputs[1]))
            axes.insert(where % (in_rank + 1), None)
        elif op.type == "Squeeze":
            dims = [d % in_rank for d in op.get_attr("squeeze_dims")] or [
                i for i, s in enumerate(data.shape) if s == 1]
            axes = [a for i, a in enumerate(axes) if i not in dims]
        elif op.type in _KEEP_AXES and in_rank == out_rank:
            continue
        elif op.type == "Reshape" and data.shape[1:] == out.shape[1:] and out.shape[1:].is_fully_defined():
            continue  # a reshape to the same shape
        else:
            return None, moved
    return axes, moved


def traced_channel_axis(model, shape: tuple, dtype: str) -> Traced:
    """Follow ``model`` (called on ``[None, *shape]`` inputs of ``dtype``) from its input to its
    first spatial operation: ``Traced(axis)`` the input axis (batch included) holding that
    operation's channels. ``Traced(None)`` when the model has no spatial operation reached from
    its input (sequences without convolutions, tabular models) or cannot be traced symbolically.
    """
    spec = tf.TensorSpec([None, *shape], dtype)
    try:
        concrete = tf.function(lambda t: model(t, training=False), autograph=False).get_concrete_function(spec)
    except Exception:  # noqa: BLE001 - a model that cannot be traced symbolically: nothing found
        return Traced(None)
    graph, source = concrete.graph, concrete.inputs[0]
    reaching = _reaching(graph, source)
    for op in graph.get_operations():
        if op.type not in _SPATIAL or not op.inputs or op.inputs[0].name not in reaching:
            continue
        data = op.inputs[0]
        axes, moved = _follow(data, source, reaching)
        if axes is None:
            return Traced(None, moved, unsure=True)
        data_format = op.get_attr("data_format").decode()
        axis = axes[1 if data_format.startswith("NC") else len(data.shape) - 1]
        return Traced(axis, moved, unsure=axis is None)
    return Traced(None)
