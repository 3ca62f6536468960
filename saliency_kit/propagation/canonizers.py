"""Canonizers: what makes a Keras model rule-ready, found on the model and applied to its copy.

Zennit asks PyTorch users to restructure their models; here the rewriting pass does it on the
copy, never on the user's model:

- **BatchNorm merging.** A ``BatchNormalization`` whose input is the output of a ``Dense`` or
  convolution with a linear activation, and the only consumer of that output, is merged into it:
  ``w' = w·s``, ``b' = (b − μ)·s + β`` with ``s = γ / sqrt(σ² + ε)``; the BatchNorm becomes the
  identity. The LRP rule then sees one linear layer, as Zennit's ``MergeBatchNorm`` makes it.
- **Fused activations split.** A layer built with ``activation="relu"`` (or relu6, leaky relu)
  gets its rule on the linear part and :class:`~saliency_kit.rules.Pass` on the activation.
- **Residual additions.** An ``Add`` gives each input the share of relevance its contribution
  makes of the sum, ``R_a = a / (a + b) · R``: in the gradient form the rewritten models carry
  (relevance = value × gradient) that is exactly what the plain gradient of ``Add`` does, so
  ``Add`` (and ``Concatenate``, padding, reshaping, max pooling: relevance to the winner) is left as
  it is.

Anything else that mixes values (attention, ``LayerNormalization``, ``Multiply``, a custom
layer, an activation outside the ReLU family) has no rule: :func:`classify` refuses it, naming it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NoReturn

import keras
import tensorflow as tf

from ..model import keras_private
from ..rules.relu import relu_family_of_activation as relu_family_of
from ..rules.relu import relu_family_of_function

__all__ = [
    "LayerFacts",
    "batchnorm_affine",
    "classify",
    "model_facts",
    "relu_family_of",
    "activation_name",
    "is_linear_activation",
]

LINEAR = (
    keras.layers.Dense,
    keras.layers.Conv1D,
    keras.layers.Conv2D,
    keras.layers.Conv3D,
    keras.layers.DepthwiseConv1D,
    keras.layers.DepthwiseConv2D,
    keras.layers.SeparableConv1D,
    keras.layers.SeparableConv2D,
)
AVERAGE_POOLING = (
    keras.layers.AveragePooling1D,
    keras.layers.AveragePooling2D,
    keras.layers.AveragePooling3D,
    keras.layers.GlobalAveragePooling1D,
    keras.layers.GlobalAveragePooling2D,
    keras.layers.GlobalAveragePooling3D,
)
MAX_POOLING = (
    keras.layers.MaxPooling1D,
    keras.layers.MaxPooling2D,
    keras.layers.MaxPooling3D,
    keras.layers.GlobalMaxPooling1D,
    keras.layers.GlobalMaxPooling2D,
    keras.layers.GlobalMaxPooling3D,
)
# Relevance moves, is copied or summed without being mixed: the plain gradient is the rule.
# Upsampling copies (nearest) or averages with fixed non-negative weights and no bias (bilinear,
# ...): a linear map whose plain gradient is its z-rule, and DeepLIFT's multiplier.
ROUTING = (
    keras.layers.InputLayer,
    keras.layers.Embedding,  # a lookup of token ids, kept as it is: they are explained at its output
    keras.layers.UpSampling1D,
    keras.layers.UpSampling2D,
    keras.layers.UpSampling3D,
    keras.layers.ZeroPadding1D,
    keras.layers.ZeroPadding2D,
    keras.layers.ZeroPadding3D,
    keras.layers.Cropping1D,
    keras.layers.Cropping2D,
    keras.layers.Cropping3D,
    keras.layers.Reshape,
    keras.layers.Flatten,
    keras.layers.Permute,
    keras.layers.Dropout,
    keras.layers.SpatialDropout1D,
    keras.layers.SpatialDropout2D,
    keras.layers.SpatialDropout3D,
    keras.layers.GaussianNoise,
    keras.layers.GaussianDropout,
    keras.layers.AlphaDropout,
    keras.layers.Identity,
    keras.layers.Concatenate,
    keras.layers.Add,
)
# Element-wise, per-unit maps whose relevance passes unchanged (Zennit: Pass for BatchNorm).
ELEMENTWISE_AFFINE = (keras.layers.BatchNormalization, keras.layers.Rescaling, keras.layers.Normalization)
SQUASHERS = ("softmax", "sigmoid")


def activation_name(fn) -> str:
    name = getattr(fn, "__name__", type(fn).__name__)
    return name.removesuffix("_v2")


def is_linear_activation(fn) -> bool:
    return fn is None or activation_name(fn) == "linear"


@dataclasses.dataclass
class LayerFacts:
    """What the rewriting pass needs to know about one operation of the model."""

    path: str
    op: Any  # a Keras layer, or an operation of a functional graph
    kind: str  # "linear", "average_pooling", "relu", "affine", "routing", "max_pooling", "model"
    first: bool = False  # reads the model input (through routing and element-wise layers only)
    merged_into: LayerFacts | None = None  # for a BatchNormalization merged into the layer before it
    absorbs: LayerFacts | None = None  # for a linear layer: the BatchNormalization merged into it
    final: bool = False  # produces the model's output


def classify(op, path: str, *, final: bool = False) -> str:
    """The kind of ``op`` for the rewriting pass; ``ValueError`` naming it if nothing covers it."""
    if isinstance(op, keras.Model):
        return "model"
    if isinstance(op, LINEAR):
        activation = getattr(op, "activation", None)
        if not (
            is_linear_activation(activation)
            or relu_family_of_function(activation) is not None
            or (final and activation_name(activation) in SQUASHERS)
        ):
            _refuse(
                op,
                path,
                f"its activation {activation_name(activation)!r} has no LRP/DeepLIFT rule "
                "here (only the ReLU family, or a final softmax/sigmoid)",
            )
        return "linear"
    if isinstance(op, AVERAGE_POOLING):
        return "average_pooling"
    if isinstance(op, MAX_POOLING):
        return "max_pooling"
    if isinstance(op, ROUTING):
        return "routing"
    if isinstance(op, ELEMENTWISE_AFFINE):
        return "affine"
    if relu_family_of(op) is not None:
        return "relu"
    if isinstance(op, keras.layers.Activation):
        name = activation_name(op.activation)
        if name == "linear":
            return "routing"
        if final and name in SQUASHERS:
            return "squash"
        _refuse(
            op,
            path,
            f"its activation {name!r} has no LRP/DeepLIFT rule here (only the ReLU family, or a final softmax/sigmoid)",
        )
    if final and type(op).__name__ in ("Softmax", "Sigmoid"):
        return "squash"
    if type(op).__name__ == "Add":  # keras.ops.add / + on KerasTensors
        return "routing"
    _refuse(op, path, "no LRP/DeepLIFT rule covers this kind of layer")


def _refuse(op: object, path: str, why: str) -> NoReturn:
    raise ValueError(
        f"cannot rewrite layer {path!r} ({type(op).__name__}) for LRP/DeepLIFT: {why}. Supported: "
        "Dense, Conv1D/2D/3D, DepthwiseConv, SeparableConv, pooling, BatchNormalization, ReLU-family "
        "activations, Add/Concatenate, upsampling and reshaping layers. Explain this model with a gradient method "
        "(e.g. method='integrated_gradients'), or give the layer a rule with a Composite only if it is "
        f"one of those kinds; received {type(op).__name__} at {path!r}."
    )


def _channel_axis(layer) -> int:
    return 1 if getattr(layer, "data_format", "channels_last") == "channels_first" else -1


def _mergeable(producer, bn) -> bool:
    if not isinstance(producer, LINEAR) or not is_linear_activation(getattr(producer, "activation", None)):
        return False
    if (
        len(keras_private.outbound_nodes(producer)) != 1
        or len(keras_private.inbound_nodes(producer)) != 1
        or len(keras_private.inbound_nodes(bn)) != 1
    ):
        return False
    rank = len(producer.output.shape)
    axis = bn.axis if isinstance(bn.axis, int) else (bn.axis[0] if len(bn.axis) == 1 else None)
    if axis is None:
        return False
    return axis % rank == _channel_axis(producer) % rank


def model_facts(model, prefix: str = "", reads_input: bool = True) -> list[LayerFacts]:
    """:class:`LayerFacts` of every operation of ``model`` (nested models included), in graph order.

    ``ValueError`` for a subclassed model (no graph to rewrite) or a layer no rule covers.
    """
    graph = keras_private.functional_graph(model)
    if graph is None:
        raise ValueError(
            f"cannot rewrite {model.name!r} ({type(model).__name__}) for LRP/DeepLIFT: it is a subclassed "
            "model without a layer graph. Rebuild it as a functional or Sequential model; received "
            f"{type(model).__name__}."
        )
    output_ops = {id(keras_private.producer(t)) for t in graph.outputs}
    reaching = {id(t) for t in graph.inputs} if reads_input else set()
    facts: list[LayerFacts] = []
    by_op: dict[int, LayerFacts] = {}
    by_depth = keras_private.nodes_by_depth(graph)
    for depth in sorted(by_depth, reverse=True):
        for node in by_depth[depth]:
            op = node.operation
            path = f"{prefix}{op.name}"
            from_input = any(id(t) in reaching for t in node.input_tensors) or (
                isinstance(op, keras.layers.InputLayer) and reads_input
            )
            if id(op) in by_op:  # a shared layer: one rule, several calls
                fact = by_op[id(op)]
                fact.first = fact.first or (from_input and fact.kind in ("linear", "average_pooling", "affine", "relu"))
                continue
            final = id(op) in output_ops and not prefix
            kind = classify(op, path, final=final)
            fact = LayerFacts(path, op, kind, final=final)
            if kind in ("linear", "average_pooling", "affine", "relu"):
                fact.first = from_input
            if kind in ("routing", "affine", "relu") and from_input:
                reaching.update(id(t) for t in node.output_tensors)
            if kind == "affine" and isinstance(op, keras.layers.BatchNormalization):
                parents = [keras_private.producer(t) for t in node.input_tensors]
                if len(parents) == 1 and id(parents[0]) in by_op and _mergeable(parents[0], op):
                    fact.merged_into = by_op[id(parents[0])]
                    by_op[id(parents[0])].absorbs = fact
            facts.append(fact)
            by_op[id(op)] = fact
            if kind == "model":
                facts.extend(model_facts(op, prefix=f"{path}/", reads_input=from_input))
    return facts


def batchnorm_affine(bn, dtype):
    """``(scale, shift)`` with ``bn(x) = x·scale + shift`` at inference, as tensors of ``dtype``."""
    variance = tf.cast(tf.convert_to_tensor(bn.moving_variance), dtype)
    mean = tf.cast(tf.convert_to_tensor(bn.moving_mean), dtype)
    scale = tf.math.rsqrt(variance + tf.cast(bn.epsilon, dtype))
    if bn.gamma is not None:
        scale = scale * tf.cast(tf.convert_to_tensor(bn.gamma), dtype)
    shift = -mean * scale
    if bn.beta is not None:
        shift = shift + tf.cast(tf.convert_to_tensor(bn.beta), dtype)
    return scale, shift
