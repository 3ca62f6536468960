"""Canonizers: what makes a Keras model rule-ready, found on the model and applied to its copy.

Zennit asks PyTorch users to restructure their models; here the rewriting pass does it on the
copy, never on the user's model:

- **BatchNorm merging.** A ``BatchNormalization`` whose input is the output of a ``Dense`` or
  convolution with a linear activation, and the only consumer of that output, is merged into it:
  ``w' = w·s``, ``b' = (b − μ)·s + β`` with ``s = γ / sqrt(σ² + ε)``; the BatchNorm becomes the
  identity. The LRP rule then sees one linear layer, as Zennit's ``MergeBatchNorm`` makes it.
- **Fused activations split.** A layer built with ``activation="relu"`` (or relu6, leaky relu)
  gets its rule on the linear part and :class:`~saliency_kit.rules.Pass` on the activation.
- **Residual additions and differences.** An ``Add`` gives each input the share of relevance its
  contribution makes of the sum, ``R_a = a / (a + b) · R``: in the gradient form the rewritten
  models carry (relevance = value × gradient) that is exactly what the plain gradient of ``Add``
  does, so ``Add``, ``Subtract`` (and ``Concatenate``, padding, reshaping, casts, max pooling:
  relevance to the winner) are left as they are.
- **Products of branches** (``Multiply``, ``*``): a ``"product"`` with its own rule
  (:mod:`~saliency_kit.propagation.products`) when both factors depend on explained values; a
  product with a factor that depends on none (a padding mask, a gate computed from token ids)
  is linear in the other and left as it is.
- **What no explained value reaches** (an integer mask, its cast and reshapes, token ids before
  their ``Embedding``) carries no relevance and needs no rule: it is left as it is.

- **Transformers.** ``LayerNormalization`` and ``MultiHeadAttention`` have rules of their own
  (:mod:`~saliency_kit.propagation.transformer`); an element-wise activation outside the ReLU
  family (GELU, tanh, ...) is treated as the ReLU family is (:mod:`~saliency_kit.propagation.elementwise`);
  a custom layer (KerasHub's ``TransformerEncoder``, ``PositionEmbedding``) gets the rules on its
  sublayers and its call checked (:mod:`~saliency_kit.propagation.custom`).
- **Sums reading an explained value.** An ``Add``/``Subtract`` that reads an explained value
  directly is a ``"sum"``: where LRP's input gradient must be the relevance, each such addend's
  gradient is turned into its relevance there, so what is added to it (a position embedding)
  keeps its own share, as a bias does.

Anything else that mixes values (a softmax inside the model, a Keras layer no rule covers) has no
rule: :func:`classify` refuses it, naming it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NoReturn

import keras
from keras import ops

from ..model import keras_private
from ..rules.relu import relu_family_of_activation as relu_family_of
from ..rules.relu import relu_family_of_function
from .elementwise import activation_family

__all__ = [
    "LayerFacts",
    "batchnorm_affine",
    "classify",
    "model_facts",
    "relu_family_of",
    "activation_name",
    "is_linear_activation",
    "refuse",
]

LINEAR = (
    keras.layers.Dense,
    keras.layers.EinsumDense,
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
    keras.layers.Subtract,
)
# keras.ops on KerasTensors that add, subtract, cast or move values (by their operation's class).
ROUTING_OPS = ("Add", "Subtract", "Cast", "ExpandDims", "Squeeze", "Reshape", "Transpose", "GetItem")
# Sums: routing, except where they read an explained value directly, where LRP turns the
# gradient into relevance per addend (so a constant added there, a position embedding, keeps its share).
SUMS = (keras.layers.Add, keras.layers.Subtract)
SUM_OPS = ("Add", "Subtract")
# Element-wise, per-unit maps whose relevance passes unchanged (Zennit: Pass for BatchNorm).
ELEMENTWISE_AFFINE = (keras.layers.BatchNormalization, keras.layers.Rescaling, keras.layers.Normalization)
SQUASHERS = ("softmax", "sigmoid")
# Layers whose output is >= 0 wherever all their inputs are: those that move, copy, pad, add or
# concatenate (the noise and dropout layers are the identity at inference), and pooling.
KEEPS_SIGN = (
    tuple(
        kind for kind in ROUTING if kind not in (keras.layers.InputLayer, keras.layers.Embedding, keras.layers.Subtract)
    )
    + MAX_POOLING
    + AVERAGE_POOLING
)
# Kinds with a rule of their own: the ones that turn gradient into relevance when they read the input.
FIRST_KINDS = (
    "linear",
    "average_pooling",
    "affine",
    "relu",
    "elementwise",
    "product",
    "layer_norm",
    "attention",
    "custom",
    "sum",
)


def activation_name(fn: Any) -> str:
    name = getattr(fn, "__name__", type(fn).__name__)
    return name.removesuffix("_v2")


def is_linear_activation(fn: Any) -> bool:
    return fn is None or activation_name(fn) == "linear"


@dataclasses.dataclass
class LayerFacts:
    """What the rewriting pass needs to know about one operation of the model."""

    path: str
    op: Any  # a Keras layer, or an operation of a functional graph
    # "linear", "average_pooling", "relu", "elementwise", "affine", "routing", "max_pooling",
    # "product", "layer_norm", "attention", "custom", "sum", "model"
    kind: str
    first: bool = False  # reads the model input (through routing and element-wise layers only)
    merged_into: LayerFacts | None = None  # for a BatchNormalization merged into the layer before it
    absorbs: LayerFacts | None = None  # for a linear layer: the BatchNormalization merged into it
    final: bool = False  # produces the model's output
    nonnegative_input: bool = False  # every value it reads is >= 0 by construction (after a ReLU)
    # per call: which of its symbolic arguments (flattened, ``keras_private.node_tensors`` order)
    # carry explained values ("custom"), or read the model input directly ("sum")
    live_arguments: list = dataclasses.field(default_factory=list)
    input_arguments: list = dataclasses.field(default_factory=list)
    calls: list = dataclasses.field(default_factory=list)  # per call: (args, kwargs), symbolic


def classify(op: Any, path: str, *, final: bool = False) -> str:
    """The kind of ``op`` for the rewriting pass; ``ValueError`` naming it if nothing covers it."""
    if isinstance(op, keras.Model):
        return "model"
    if isinstance(op, LINEAR):
        activation = getattr(op, "activation", None)
        if not (
            is_linear_activation(activation)
            or activation_family(activation) is not None
            or (final and activation_name(activation) in SQUASHERS)
        ):
            _refuse(
                op,
                path,
                f"its activation {activation_name(activation)!r} has no LRP/DeepLIFT rule "
                "here (only element-wise activations, or a final softmax/sigmoid)",
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
    if isinstance(op, keras.layers.LayerNormalization):
        return "layer_norm"
    if isinstance(op, keras.layers.MultiHeadAttention):
        _check_attention(op, path)
        return "attention"
    if relu_family_of(op) is not None:
        return "relu"
    if isinstance(op, keras.layers.Activation):
        name = activation_name(op.activation)
        if name == "linear":
            return "routing"
        if final and name in SQUASHERS:
            return "squash"
        if activation_family(op.activation) is not None:
            return "elementwise"
        _refuse(
            op,
            path,
            f"its activation {name!r} has no LRP/DeepLIFT rule here (only element-wise activations, "
            "or a final softmax/sigmoid)",
        )
    if final and type(op).__name__ in ("Softmax", "Sigmoid"):
        return "squash"
    if type(op).__name__ in ROUTING_OPS:
        return "routing"
    if isinstance(op, keras.layers.Layer) and (
        isinstance(op, keras.layers.Lambda) or not keras_private.is_shipped_layer(op)
    ):
        return "custom"  # its call is traced and checked when the copy is made (propagation.custom)
    _refuse(op, path, "no LRP/DeepLIFT rule covers this kind of layer")


def _check_attention(op: Any, path: str) -> None:
    """Refuse a ``MultiHeadAttention`` whose computation the attention rules do not mirror."""
    overridden = keras_private.attention_overrides(op)
    if overridden:
        _refuse(
            op,
            path,
            f"it overrides MultiHeadAttention's {', '.join(overridden)}, which the attention rules "
            "(softmax of scaled dot products, then a weighted sum of the values) would not mirror",
        )
    if keras_private.attention_is_gated(op):
        _refuse(op, path, "its gated attention output (a product with a gate computed from the query) has no rule here")


def refuse(op: object, path: str, why: str) -> NoReturn:
    """``ValueError``: layer ``path`` cannot be rewritten for LRP/DeepLIFT, ``why``, what is
    supported and what to do instead."""
    _refuse(op, path, why)


def _refuse(op: object, path: str, why: str) -> NoReturn:
    raise ValueError(
        f"cannot rewrite layer {path!r} ({type(op).__name__}) for LRP/DeepLIFT: {why}. Supported: "
        "Dense, EinsumDense, Conv1D/2D/3D, DepthwiseConv, SeparableConv, pooling, BatchNormalization, "
        "LayerNormalization, MultiHeadAttention, element-wise activations (ReLU family, GELU, tanh, "
        "sigmoid, ...), Add/Subtract/Concatenate, Multiply of two branches, upsampling and reshaping "
        "layers, and custom layers whose call combines these with linear operations. "
        "Explain this model with a gradient method (e.g. method='integrated_gradients'), or give the "
        f"layer a rule with a Composite only if it is one of those kinds; received {type(op).__name__} at {path!r}."
    )


def _channel_axis(layer: Any) -> int:
    return 1 if getattr(layer, "data_format", "channels_last") == "channels_first" else -1


def _mergeable(producer: Any, bn: Any) -> bool:
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


def _is_float(tensor: Any) -> bool:
    return keras.backend.standardize_dtype(tensor.dtype).startswith(("float", "bfloat"))


def _product_kind(op: Any, path: str, live: list) -> str | None:
    """``"product"``, ``"routing"`` (one factor varies: linear in it) or ``None`` (not a product)."""
    if type(op).__name__ != "Multiply":  # keras.layers.Multiply, keras.ops.multiply / *
        return None
    if sum(live) == 1:
        return "routing"
    if len(live) != 2:
        _refuse(
            op,
            path,
            f"a product of {len(live)} branches ({sum(live)} varying) has no rule here (two varying "
            "branches alone, or one and constants)",
        )
    return "product"


def _is_sum(op: Any) -> bool:
    return isinstance(op, SUMS) or (not isinstance(op, keras.layers.Layer) and type(op).__name__ in SUM_OPS)


def _output_nonnegative(op: Any, kind: str, inputs_nonnegative: bool) -> bool:
    """Whether ``op``'s output is ``>= 0`` by construction: a ReLU without negative slope (alone or
    fused into a linear layer), or a layer that keeps the sign of inputs that all are."""
    if kind == "relu":
        family = relu_family_of(op)
        return family is not None and family.nonnegative
    if kind == "linear":
        family = relu_family_of_function(getattr(op, "activation", None))
        return family is not None and family.nonnegative
    return inputs_nonnegative and isinstance(op, KEEPS_SIGN)


def model_facts(
    model: Any, prefix: str = "", reads_input: bool = True, live_inputs: list | None = None
) -> list[LayerFacts]:
    """:class:`LayerFacts` of every operation of ``model`` (nested models included), in graph order.

    Operations that no explained value reaches (``live_inputs``: which of the model's inputs
    vary; default: its float inputs; an ``Embedding``'s output varies) are left out: they carry
    no relevance. ``ValueError`` for a subclassed model (no graph to rewrite) or a layer no rule
    covers.
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
    if live_inputs is None or len(live_inputs) != len(graph.inputs):
        live_inputs = [_is_float(t) for t in graph.inputs]
    live = {id(t) for t, varies in zip(graph.inputs, live_inputs) if varies}
    facts: list[LayerFacts] = []
    by_op: dict[int, LayerFacts] = {}
    nonnegative: set[int] = set()  # tensors >= 0 by construction (ReLU outputs, and what keeps their sign)
    by_depth = keras_private.nodes_by_depth(graph)
    for depth in sorted(by_depth, reverse=True):
        for node in by_depth[depth]:
            op = node.operation
            path = f"{prefix}{op.name}"
            from_input = any(id(t) in reaching for t in node.input_tensors) or (
                isinstance(op, keras.layers.InputLayer) and reads_input
            )
            inputs_live = [id(t) in live for t in node.input_tensors]
            if isinstance(op, (keras.layers.Embedding, keras.Model)) or any(inputs_live):  # a model may embed ids
                live.update(id(t) for t in node.output_tensors)
            elif not isinstance(op, keras.layers.InputLayer):
                continue  # depends on no explained value: no relevance passes here
            inputs_nonnegative = bool(node.input_tensors) and all(id(t) in nonnegative for t in node.input_tensors)
            arguments = keras_private.node_tensors(node)
            live_arguments = [id(t) in live for t in arguments]
            input_arguments = [id(t) in reaching for t in arguments]
            if id(op) in by_op:  # a shared layer: one rule, several calls
                fact = by_op[id(op)]
                fact.first = fact.first or (from_input and fact.kind in FIRST_KINDS)
                fact.nonnegative_input = fact.nonnegative_input and inputs_nonnegative
                fact.live_arguments.append(live_arguments)
                fact.input_arguments.append(input_arguments)
                fact.calls.append(keras_private.node_arguments(node))
                if _output_nonnegative(op, fact.kind, inputs_nonnegative):
                    nonnegative.update(id(t) for t in node.output_tensors)
                continue
            final = id(op) in output_ops and not prefix
            kind = _product_kind(op, path, inputs_live) or classify(op, path, final=final)
            if kind == "routing" and from_input and _is_sum(op):
                kind = "sum"  # a sum reading an explained value directly: its addends' relevance (LRP)
            fact = LayerFacts(
                path,
                op,
                kind,
                final=final,
                nonnegative_input=inputs_nonnegative,
                live_arguments=[live_arguments],
                input_arguments=[input_arguments],
                calls=[keras_private.node_arguments(node)],
            )
            if _output_nonnegative(op, kind, inputs_nonnegative):
                nonnegative.update(id(t) for t in node.output_tensors)
            if kind in FIRST_KINDS:
                fact.first = from_input
            if kind in ("routing", "affine", "relu", "elementwise") and from_input:
                reaching.update(id(t) for t in node.output_tensors)
            if kind == "affine" and isinstance(op, keras.layers.BatchNormalization):
                parents = [keras_private.producer(t) for t in node.input_tensors]
                if len(parents) == 1 and id(parents[0]) in by_op and _mergeable(parents[0], op):
                    fact.merged_into = by_op[id(parents[0])]
                    by_op[id(parents[0])].absorbs = fact
            facts.append(fact)
            by_op[id(op)] = fact
            if kind == "model":
                facts.extend(model_facts(op, prefix=f"{path}/", reads_input=from_input, live_inputs=inputs_live))
    return facts


def batchnorm_affine(bn: Any, dtype: Any) -> Any:
    """``(scale, shift)`` with ``bn(x) = x·scale + shift`` at inference, as tensors of ``dtype``."""
    variance = ops.cast(ops.convert_to_tensor(bn.moving_variance), dtype)
    mean = ops.cast(ops.convert_to_tensor(bn.moving_mean), dtype)
    scale = ops.rsqrt(variance + ops.cast(bn.epsilon, dtype))
    if bn.gamma is not None:
        scale = scale * ops.cast(ops.convert_to_tensor(bn.gamma), dtype)
    shift = -mean * scale
    if bn.beta is not None:
        shift = shift + ops.cast(ops.convert_to_tensor(bn.beta), dtype)
    return scale, shift
