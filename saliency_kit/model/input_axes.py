"""Which axis of a model's input holds the channels, found by following what the model computes.

Models converted from PyTorch take ``[B, C, H, W]`` and start with a ``Permute((2, 3, 1))`` (or a
transpose in a ``Lambda``, or in a subclassed model's ``call``) before channels-last
convolutions: the layers' ``data_format`` then says nothing about the input. :func:`traced_channel_axis`
traces the model on a symbolic input and follows the graph from the input to the first spatial
operation (a convolution or pooling), composing the transposes on the way; that operation's own
data format says where its channels are, and the composition says which input axis they come from.

Operations on the way that keep axes where they are (element-wise arithmetic, casts, padding,
crops, resizes, normalisation) are passed through; an operation that may move axes in a way that
cannot be followed (a reshape, a gather) makes the answer *unsure*. On JAX the traced program
is followed instead (:mod:`.jax_input_axes`); importing this module imports no framework.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import keras_private
from .walker import is_graph_model, walk

if TYPE_CHECKING:
    import keras
    import tensorflow as tf

__all__ = ["Traced", "traced_channel_axis", "may_move_axes", "front_of", "SPATIAL_LAYER_KINDS"]

#: Keras layer class names (parts) whose ``data_format`` says where their channels are
SPATIAL_LAYER_KINDS = ("Conv", "Pooling", "UpSampling", "Cropping", "ZeroPadding", "LocallyConnected")

#: spatial TensorFlow ops and how to read the position of their input's channel axis
_SPATIAL = ("Conv2D", "Conv3D", "DepthwiseConv2dNative", "MaxPool", "MaxPoolV2", "AvgPool", "MaxPool3D", "AvgPool3D")
#: ops whose output axes are their (first data) input's axes
_KEEP_AXES = {
    "Identity",
    "Cast",
    "StopGradient",
    "EnsureShape",
    "CheckNumerics",
    "PreventGradient",
    "Add",
    "AddV2",
    "Sub",
    "Mul",
    "RealDiv",
    "Div",
    "DivNoNan",
    "Maximum",
    "Minimum",
    "Pow",
    "SquaredDifference",
    "Neg",
    "Abs",
    "Square",
    "Sqrt",
    "Rsqrt",
    "Exp",
    "Log",
    "Log1p",
    "Tanh",
    "Sigmoid",
    "Relu",
    "Relu6",
    "Elu",
    "Selu",
    "LeakyRelu",
    "Softplus",
    "Softsign",
    "Floor",
    "Round",
    "Sign",
    "ClipByValue",
    "BiasAdd",
    "Select",
    "SelectV2",
    "FusedBatchNormV3",
    "Pad",
    "PadV2",
    "MirrorPad",
    "Slice",
    "StridedSlice",
    "ResizeBilinear",
    "ResizeNearestNeighbor",
    "ResizeBicubic",
    "ResizeArea",
    "ScaleAndTranslate",
    "ImageProjectiveTransformV3",
    "Erf",
    "Reciprocal",
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


def _reaching(graph: Any, source: Any) -> set:
    """Names of the tensors computed from ``source`` in ``graph``."""
    seen = {source.name}
    for op in graph.get_operations():  # in creation order: inputs before their consumers
        if any(t.name in seen for t in op.inputs):
            seen.update(t.name for t in op.outputs)
    return seen


def _follow(tensor: tf.Tensor, source: Any, reaching: set) -> tuple[list | None, bool]:
    """``(axes, moved)``: ``axes[i]`` the axis of ``source`` at position ``i`` of ``tensor`` (``None``
    for an axis added on the way), or ``None`` when the way cannot be followed; ``moved`` whether
    a transpose lies on the way."""
    import tensorflow as tf

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
            dims = [d % in_rank for d in op.get_attr("squeeze_dims")] or [i for i, s in enumerate(data.shape) if s == 1]
            axes = [a for i, a in enumerate(axes) if i not in dims]
        elif op.type in _KEEP_AXES and in_rank == out_rank:
            continue
        elif op.type == "Reshape" and data.shape[1:] == out.shape[1:] and out.shape[1:].is_fully_defined():
            continue  # a reshape to the same shape
        else:
            return None, moved
    return axes, moved


def _spatial_layer(layer: Any) -> bool:
    return getattr(layer, "data_format", None) in ("channels_first", "channels_last") and any(
        k in type(layer).__name__ for k in SPATIAL_LAYER_KINDS
    )


def may_move_axes(model: keras.Model) -> bool:
    """Whether something in ``model`` may move its input's axes before its spatial layers: a
    ``Permute``, ``Reshape`` or ``Lambda``, a bare ``keras.ops`` call, a layer or model class of
    the user's own (its ``call`` is not known)."""
    import keras

    for layer in [model, *(visit.layer for visit in walk(model))]:
        if isinstance(layer, (keras.layers.Permute, keras.layers.Reshape, keras.layers.Lambda)):
            return True
        if isinstance(layer, keras.Model) and not is_graph_model(layer):
            return True
        if not type(layer).__module__.startswith("keras."):
            return True
        if is_graph_model(layer) and any(
            not isinstance(op, keras.layers.Layer) for op in getattr(layer, "operations", ())
        ):
            return True
    return False


def front_of(model: keras.Model) -> tuple[keras.Model, int] | None:
    """``(front, position)`` for a functional model: ``front`` the model from its input to the
    input of its first spatial layer (or of a nested model of Keras layers holding them),
    ``position`` where that layer takes its channels (``1`` or ``-1``); ``None`` otherwise."""
    import keras

    graph = keras_private.functional_graph(model)
    if graph is None or len(graph.inputs) != 1:
        return None
    for op in graph.operations:
        if isinstance(op, keras.layers.InputLayer):
            continue
        if _spatial_layer(op):
            position = 1 if op.data_format == "channels_first" else -1
        elif is_graph_model(op) and not may_move_axes(op):
            formats = {layer.data_format for layer in keras_private.all_sublayers(op) if _spatial_layer(layer)}
            if len(formats) != 1:
                return None
            position = 1 if formats == {"channels_first"} else -1
        else:
            continue
        inputs = keras_private.first_call_inputs(op)
        if not inputs or len(inputs) != 1 or not keras_private.has_producer(inputs[0]):
            return None
        try:
            return keras.Model(graph.inputs, inputs[0]), position
        except ValueError:  # a layer shared with another model, first called there
            return None
    return None


def _front_axis(model: keras.Model, shape: tuple, dtype: Any) -> Traced | None:
    """:func:`traced_channel_axis` by tracing the model's front only (up to its first spatial
    layer), when it is functional; ``None`` when that does not apply."""
    import tensorflow as tf

    front = front_of(model)
    if front is None:
        return None
    front, position = front
    spec = tf.TensorSpec([None, *shape], dtype)
    try:
        concrete = tf.function(lambda t: front(t, training=False), autograph=False).get_concrete_function(spec)
    except Exception:  # noqa: BLE001 - fall back to tracing the whole model
        return None
    (output,) = tf.nest.flatten(concrete.structured_outputs)
    source = concrete.inputs[0]
    axes, moved = _follow(output, source, _reaching(concrete.graph, source))
    if axes is None:
        return Traced(None, moved, unsure=True)
    axis = axes[position]
    return Traced(axis, moved, unsure=axis is None)


def traced_channel_axis(model: keras.Model, shape: tuple, dtype: str) -> Traced:
    """Follow ``model`` (called on ``[None, *shape]`` inputs of ``dtype``) from its input to its
    first spatial operation: ``Traced(axis)`` the input axis (batch included) holding that
    operation's channels. ``Traced(None)`` when the model has no spatial operation reached from
    its input (sequences without convolutions, tabular models) or cannot be traced symbolically.
    A functional model is traced up to its first spatial layer only; others as a whole. The
    active backend traces it: a TensorFlow graph, a JAX program (:mod:`.jax_input_axes`), or the
    calls the model makes on PyTorch (:mod:`.torch_input_axes`).
    """
    import keras

    if keras.backend.backend() == "torch":
        from . import torch_input_axes

        return Traced(*torch_input_axes.traced_channel_axis(model, front_of(model), shape, dtype))
    if keras.backend.backend() == "jax":
        from . import jax_input_axes

        return Traced(*jax_input_axes.traced_channel_axis(model, front_of(model), shape, dtype))
    import tensorflow as tf

    front = _front_axis(model, shape, dtype)
    if front is not None:
        return front
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
