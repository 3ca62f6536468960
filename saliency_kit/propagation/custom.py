"""Custom layers (a KerasHub ``TransformerEncoder``, a ``PositionEmbedding``, a ``Lambda``) in
the LRP and DeepLIFT copies: their sublayers get the rules, and what their ``call`` computes
around those sublayers is checked to need none.

A custom layer's ``call`` runs its sublayers and operations on tensors. In the copy, a clone of
the layer (:class:`CustomLayer`, the user's layer untouched) has each sublayer a rule covers
(dense and einsum-dense layers, layer normalisation, attention, element-wise activations, ...;
those inside nested custom sublayers too) *replaced, on the clone's attributes*, by a layer
carrying that rule around the same sublayer object: the clone's own ``call`` then runs the
rules. The clone's tracked layers and variables are unchanged (the replacements are not
tracked), so its state is copied and synchronised like any layer's.

The ``call`` is then traced once on the layer's argument shapes (:func:`check_call`; on JAX
its jaxpr, :mod:`.custom_jax`; on PyTorch its ``torch`` calls, :mod:`.custom_torch`) and every
operation outside the replacements that reads an explained value must be linear in
it — additions (a residual), reshaping, slicing, gathering, casting, a product with a value that
depends on no explained input (a mask, a constant scale) — or depend on its shape only
(``PositionEmbedding``: its output is then a constant, which LRP's gradient form treats as a
bias). Anything else (a softmax, an ``erf``, a product of two explained values written in the
call) refuses the layer, naming the layer and the operation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import keras

from ..model import keras_private
from ..model.copy import rebuild_layer
from . import canonizers
from .gates import relevance_gate
from .rewriting import WrapperLayer, covered_scopes

__all__ = ["CustomLayer", "build_like", "check_call", "custom_layer", "install_rules"]

# value-independent: the output depends on the input's shape (or nothing) only
_SHAPE_OPS = frozenset({"Shape", "ShapeN", "Size", "Rank", "ZerosLike", "OnesLike", "StopGradient"})
# linear (or affine) in every input that carries explained values; the others marked are not inputs of value
_LINEAR_OPS = frozenset(
    {
        "Identity",
        "Snapshot",
        "EnsureShape",
        "AddV2",
        "Add",
        "AddN",
        "Sub",
        "Neg",
        "BiasAdd",
        "Reshape",
        "Transpose",
        "ExpandDims",
        "Squeeze",
        "StridedSlice",
        "Slice",
        "Pack",
        "Unpack",
        "BroadcastTo",
        "Tile",
        "Pad",
        "PadV2",
        "Sum",
        "Mean",
    }
)
# linear in one of their inputs: at most one may carry explained values (and only those listed)
_ONE_FACTOR_OPS = {
    "Mul": None,
    "MatMul": None,
    "BatchMatMul": None,
    "BatchMatMulV2": None,
    "BatchMatMulV3": None,
    "Einsum": None,
    "Conv1D": (0,),
    "Conv2D": (0,),
    "Conv3D": (0,),
    "DepthwiseConv2dNative": (0,),
    "RealDiv": (0,),
    "Div": (0,),
    "DivNoNan": (0,),
    "ConcatV2": "all but last",
    "Split": (1,),
    "SplitV": (0,),
    "GatherV2": (0,),
    "GatherNd": (0,),
    "SelectV2": (1, 2),
    "Select": (1, 2),
}
_REDUCTIONS = ("Sum", "Mean")


def _is_float(dtype: Any) -> bool:
    return dtype.is_floating


def _refuse_op(layer: Any, path: str, kind: str, name: str, why: str) -> None:
    canonizers.refuse(
        layer,
        path,
        f"its call computes {kind} ({name!r}) from the explained values {why}, outside the "
        "sublayers a rule covers (only linear operations may: additions, reshaping, slicing, "
        "products with values no explained input reaches)",
    )


def check_call(layer: Any, path: str, args: Any, kwargs: Any, live: list) -> bool:
    """Trace ``layer(*args, **kwargs)`` (symbolic arguments; ``live``: which of them, flattened,
    carry explained values) and check every operation outside covered sublayers (see the module
    docstring). Returns whether the output depends on an explained value; ``ValueError`` (naming
    ``path`` and the operation) for an operation no rule covers."""
    structure = (list(args), dict(kwargs))
    flat = keras.tree.flatten(structure)
    positions = [i for i, v in enumerate(flat) if isinstance(v, keras.KerasTensor)]
    if len(positions) != len(live):
        raise RuntimeError(f"layer {path!r} was called with {len(positions)} tensors; facts name {len(live)}")
    if keras_private.call_takes_training(layer):
        structure[1]["training"] = False
        flat = keras.tree.flatten(structure)
        positions = [i for i, v in enumerate(flat) if isinstance(v, keras.KerasTensor)]
    scopes: list = []

    def run(*tensors: Any) -> Any:
        values = list(flat)
        for i, t in zip(positions, tensors):
            values[i] = t
        call_args, call_kwargs = keras.tree.pack_sequence_as(structure, values)
        with covered_scopes(scopes):
            return layer(*call_args, **call_kwargs)

    shapes = [(tuple(flat[i].shape), flat[i].dtype) for i in positions]
    if keras.backend.backend() == "tensorflow":
        return _check_graph(layer, path, run, shapes, live, scopes)
    if keras.backend.backend() == "torch":
        from .custom_torch import check_calls

        return check_calls(layer, path, run, shapes, live, scopes, _refuse_op)
    from .custom_jax import check_jaxpr

    return check_jaxpr(layer, path, run, shapes, live, scopes, _refuse_op)


def _check_graph(layer: Any, path: str, run: Any, shapes: list, live: list, scopes: list) -> bool:
    """:func:`check_call` on TensorFlow: the operations of ``run``'s graph, traced on ``shapes``."""
    import tensorflow as tf

    specs = [tf.TensorSpec(shape, dtype) for shape, dtype in shapes]
    graph = tf.function(run).get_concrete_function(*specs).graph
    placeholders = graph.inputs[: len(specs)]
    alive = {t.name for t, flag in zip(placeholders, live) if flag and _is_float(t.dtype)}
    for op in graph.get_operations():
        reads = [i for i, t in enumerate(op.inputs) if t.name in alive]
        if not reads:
            continue
        float_outputs = [t for t in op.outputs if _is_float(t.dtype)]
        if any(op.name.startswith(scope) for scope in scopes) or op.type in _SHAPE_OPS:
            if op.type not in _SHAPE_OPS:
                alive.update(t.name for t in float_outputs)
            continue
        if op.type in _LINEAR_OPS:
            if op.type in _REDUCTIONS and 0 in _constant_axes(op):
                _refuse_op(layer, path, op.type, op.name, "across the batch (rows mix)")
        elif op.type in _ONE_FACTOR_OPS:
            allowed = _ONE_FACTOR_OPS[op.type]
            if allowed is None:
                if len(reads) > 1:
                    _refuse_op(layer, path, op.type, op.name, "as a product of two of them")
            elif allowed == "all but last":
                if len(op.inputs) - 1 in reads:
                    _refuse_op(layer, path, op.type, op.name, "as an axis")
            elif any(i not in allowed for i in reads):
                _refuse_op(layer, path, op.type, op.name, "in a place where it is not linear")
        elif op.type == "Cast":
            if not (_is_float(op.inputs[0].dtype) and _is_float(op.outputs[0].dtype)):
                _refuse_op(layer, path, op.type, op.name, "as a cast to a type without gradient")
        else:
            _refuse_op(layer, path, op.type, op.name, "by an operation that is not linear")
        alive.update(t.name for t in float_outputs)
    outputs = keras.tree.flatten(graph.structured_outputs)
    return any(getattr(t, "name", None) in alive for t in outputs)


def _constant_axes(op: Any) -> tuple:
    import tensorflow as tf

    value = tf.get_static_value(op.inputs[1])
    if value is None:
        return (0,)  # unknown axes: taken as mixing rows
    rank = op.inputs[0].shape.rank
    return tuple(int(a) % rank for a in (value.reshape(-1) if hasattr(value, "reshape") else [value]))


def install_rules(layer: Any, path: str, wrap_sublayer: Callable) -> list:
    """Replace, on ``layer``'s attributes (lists and tuples of layers included), each sublayer
    that ``wrap_sublayer(sublayer, path)`` gives a rule-carrying layer for; recurse into custom
    sublayers. Returns ``[(path, wrapper)]``. The replacements are not tracked by Keras."""
    placed: list = []
    for name, value in keras_private.own_attributes(layer):
        if isinstance(value, keras.layers.Layer) and not isinstance(value, WrapperLayer):
            replacement = _replacement(value, path, wrap_sublayer, placed)
            if replacement is not None:
                object.__setattr__(layer, name, replacement)
        elif isinstance(value, (list, tuple)) and value and all(isinstance(v, keras.layers.Layer) for v in value):
            replaced = [_replacement(v, path, wrap_sublayer, placed) or v for v in value]
            if any(r is not v for r, v in zip(replaced, value)):
                object.__setattr__(layer, name, type(value)(replaced) if isinstance(value, tuple) else replaced)
    return placed


def _replacement(sublayer: Any, path: str, wrap_sublayer: Callable, placed: list) -> Any:
    sub_path = f"{path}/{sublayer.name}"
    try:
        kind = canonizers.classify(sublayer, sub_path)
    except ValueError:
        return None  # left as it is: if its call reads explained values, check_call refuses it
    if kind == "custom":
        placed.extend(install_rules(sublayer, sub_path, wrap_sublayer))
        return None
    wrapper = wrap_sublayer(canonizers.LayerFacts(sub_path, sublayer, kind))
    if wrapper is not None:
        placed.append((sub_path, wrapper))
    return wrapper


class CustomLayer(WrapperLayer):
    """In the copy, the place of a custom layer: ``inner`` (a built clone with its sublayers'
    rules installed by :func:`install_rules`) called as the original is. With ``to_relevance``
    (``relevance``: which flattened tensor arguments read an explained value directly), those
    arguments' input gradient is their relevance (LRP)."""

    def __init__(self, inner: Any, relevance: list | None = None, **kwargs: Any) -> None:
        super().__init__(inner, **kwargs)
        self.relevance = relevance
        self.to_relevance = False

    def build(self, *args: Any, **kwargs: Any) -> None:
        pass  # inner is built

    def call(self, *args: Any, training: bool | None = None, **kwargs: Any) -> Any:
        if training is not None and keras_private.call_takes_training(self.inner):
            kwargs["training"] = bool(training)
        if self.to_relevance and self.relevance:
            structure = (list(args), kwargs)
            flat = keras.tree.flatten(structure)
            tensors = [i for i, v in enumerate(flat) if keras.ops.is_tensor(v) or isinstance(v, keras.KerasTensor)]
            for i, gated in zip(tensors, self.relevance):
                if gated:
                    flat[i] = relevance_gate(flat[i])
            args, kwargs = keras.tree.pack_sequence_as(structure, flat)
        return self.inner(*args, **kwargs)

    def compute_output_spec(self, *args: Any, training: bool | None = None, **kwargs: Any) -> Any:
        return self.inner(*args, **kwargs)


def _fresh(arguments: Any) -> Any:
    """``arguments`` with each symbolic tensor replaced by a new ``keras.Input`` of its shape and
    dtype (building a clone must not add calls to the user's graph)."""
    return keras.tree.map_structure(
        lambda v: keras.Input(batch_shape=v.shape, dtype=v.dtype) if isinstance(v, keras.KerasTensor) else v,
        arguments,
    )


def build_like(layer: Any, fact: Any) -> None:
    """Build ``layer`` (a clone of ``fact.op``) as its first call in the graph built it, on new
    inputs of the same shapes."""
    if not layer.built and fact.calls:
        args, kwargs = _fresh((list(fact.calls[0][0]), fact.calls[0][1]))
        layer(*args, **kwargs)


def custom_layer(fact: Any, wrap_sublayer: Callable) -> CustomLayer:
    """The :class:`CustomLayer` for ``fact`` (a ``"custom"`` fact of
    :func:`~saliency_kit.propagation.canonizers.model_facts`): a clone of the layer, built on its
    calls' shapes, its sublayers' rules installed (``wrap_sublayer(fact) -> layer | None``), each
    call checked by :func:`check_call`. ``ValueError`` naming the layer if one is not covered."""
    clone = rebuild_layer(fact.op)
    placed = None
    for (args, kwargs), live in zip(fact.calls, fact.live_arguments):
        args, kwargs = _fresh((list(args), kwargs))
        if placed is None:
            clone(*args, **kwargs)  # builds it: its sublayers exist from here on
            placed = install_rules(clone, fact.path, wrap_sublayer)
        check_call(clone, fact.path, args, kwargs, live)
    wrapper = CustomLayer(clone, relevance=fact.input_arguments[0] if fact.input_arguments else None)
    object.__setattr__(wrapper, "placed", placed or [])  # [(path, layer)], not tracked
    return wrapper
