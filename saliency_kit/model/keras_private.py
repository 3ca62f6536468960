"""Every use of Keras-private API in saliency_kit, in one place, each saying what it is for.

Keras 3 has no public way to re-run a functional model's graph with one operation swapped (what
scores behind a softmax and Grad-CAM taps need), to list a layer's direct sub-layers, or to read
the shapes a subclassed model was built with. Each helper below wraps one private attribute;
:data:`REQUIRED` names them all, and ``tests/test_keras_private.py`` checks every one still exists,
so a Keras upgrade that removes one fails there with the attribute's name, not deep inside a
method.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import keras

__all__ = [
    "REQUIRED",
    "running_layers",
    "missing",
    "attention_uses_flash",
    "attention_steps_replaced",
    "attention_steps_overridden",
    "functional_graph",
    "run_graph",
    "input_structure",
    "pack_inputs",
    "node_tensors",
    "graph_calls",
    "producer_inputs",
    "producer",
    "has_producer",
    "call_takes_training",
    "sublayers",
    "all_sublayers",
    "first_call_inputs",
    "lambda_output_shape",
    "built_input_shapes",
    "inbound_nodes",
    "outbound_nodes",
    "nodes_by_depth",
    "keras_mask",
    "node_arguments",
    "KERAS_LAYER_MODULES",
    "is_shipped_layer",
    "own_attributes",
    "ATTENTION_STEPS",
    "attention_overrides",
    "attention_is_gated",
    "attention_projections",
    "attention_mask",
    "attention_scale",
    "attention_equations",
    "attention_softmax",
    "outside_stateless_scope",
]

#: ``(class, attribute, what saliency_kit uses it for)`` for every private attribute used.
REQUIRED = (
    (
        keras.Sequential,
        "_functional",
        "the functional graph a built Sequential model runs (logits behind softmax, taps)",
    ),
    (
        keras.Model,
        "_run_through_graph",
        "re-run a functional graph with one operation replaced or recorded (scores.py, copy.py)",
    ),
    (keras.Model, "_nodes_by_depth", "tells a functional graph from a subclassed model"),
    (keras.KerasTensor, "_keras_history", "the operation that produced a functional output"),
    (keras.layers.Layer, "_call_context_args", "whether a layer's call takes `training`"),
    (keras.layers.Layer, "_flatten_layers", "the direct sub-layers of a layer (walker, re-init)"),
    (
        keras.layers.Layer,
        "_inbound_nodes",
        "the inputs a shared layer was first called on; how often a layer is called (LRP's BatchNorm merge)",
    ),
    (keras.layers.Layer, "_outbound_nodes", "how many layers read a layer's output (LRP's BatchNorm merge)"),
    (keras.layers.Lambda, "_output_shape", "rebuild a Lambda around the same function (copy.py)"),
    (keras.layers.Layer, "_build_shapes_dict", "the input shape a subclassed model was built with"),
    (keras.layers.Layer, "_layers", "Keras' tracking of a layer's sublayers, left alone by a rule's install"),
    (keras.layers.Layer, "_tracker", "Keras' attribute tracker, left alone by a rule's install"),
    *(
        (keras.layers.MultiHeadAttention, name, "the attention rules run MultiHeadAttention's own steps")
        for name in (
            "_query_dense",
            "_key_dense",
            "_value_dense",
            "_output_dense",
            "_compute_attention_mask",
            "_inverse_sqrt_key_dim",
            "_dot_product_equation",
            "_combine_equation",
            "_masked_softmax",
            "_compute_attention",
        )
    ),
)

#: Read when present (``getattr`` with a default): a Keras without it has no such feature.
READ_IF_PRESENT = (
    (keras.layers.MultiHeadAttention, "_use_gate", "a gated attention output"),
    (keras.layers.MultiHeadAttention, "_flash_attention", "attention that never forms its probabilities"),
)

#: The modules the layers Keras ships are defined in (``keras.layers`` re-exports them from
#: ``keras.src``, Keras' private package).
KERAS_LAYER_MODULES = ("keras.src.layers.", "keras.layers")

#: The steps of ``MultiHeadAttention`` the attention rules mirror; a subclass overriding one is refused.
ATTENTION_STEPS = ("call", "_compute_attention", "_masked_softmax")


def missing() -> list[str]:
    """``"Class.attribute (purpose)"`` for every attribute of :data:`REQUIRED` this Keras lacks."""
    probes = {
        keras.Sequential: keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)]),
        keras.layers.Lambda: keras.layers.Lambda(lambda t: t),
    }
    probes[keras.Model] = (
        probes[keras.Sequential]._functional if hasattr(probes[keras.Sequential], "_functional") else keras.Model
    )
    probes[keras.KerasTensor] = keras.Input((1,))
    probes[keras.layers.Layer] = keras.layers.Dense(1)
    attention = keras.layers.MultiHeadAttention(num_heads=1, key_dim=2)
    attention.build((1, 3, 2), (1, 3, 2))
    probes[keras.layers.MultiHeadAttention] = attention
    gone = []
    for cls, attribute, purpose in REQUIRED:
        probe = probes.get(cls, cls)
        if not hasattr(probe, attribute):
            gone.append(f"{cls.__name__}.{attribute} ({purpose})")
    if not is_shipped_layer(probes[keras.layers.Layer]):
        gone.append(f"the layers' modules {KERAS_LAYER_MODULES} (tell Keras' own layers from a user's)")
    return gone


def functional_graph(model: keras.Model) -> Any:
    """The functional graph of a Functional or built Sequential model, else ``None``.

    Private: ``Sequential._functional`` (the graph Keras builds for a Sequential with an input),
    ``_run_through_graph``/``_nodes_by_depth`` (present on functional graphs only).
    """
    if isinstance(model, keras.Sequential):
        return getattr(model, "_functional", None)
    if hasattr(model, "_run_through_graph") and hasattr(model, "_nodes_by_depth"):
        return model
    return None


def run_graph(graph: Any, inputs: Any, operation_fn: Callable) -> Any:
    """Run ``graph`` (from :func:`functional_graph`) on ``inputs``, each operation ``op`` called
    as ``operation_fn(op)(*args, **kwargs)``. Private: ``Function._run_through_graph``."""
    outputs = graph._run_through_graph(inputs, operation_fn=operation_fn)
    return outputs


def input_structure(model: Any) -> Any:
    """The structure a functional model takes its inputs in (a dict keyed by the names it was
    built with, a list, one tensor), else ``None``. Private: ``Functional._inputs_struct``."""
    graph = functional_graph(model)
    return None if graph is None else getattr(graph, "_inputs_struct", None)


def pack_inputs(model: Any, inputs: list) -> Any:
    """``inputs`` (one per model input, in graph order) in the structure ``model`` is called with
    (a dict keyed as its inputs were, a list, ...)."""
    from keras import tree

    structure = input_structure(model)
    return list(inputs) if structure is None else tree.pack_sequence_as(structure, list(inputs))


def node_tensors(node: Any) -> list:
    """The symbolic tensors among the arguments of one call (a graph node), flattened. Private:
    ``Node.arguments``."""
    from keras import tree

    arguments = node.arguments
    return [t for t in tree.flatten((arguments.args, arguments.kwargs)) if isinstance(t, keras.KerasTensor)]


def node_arguments(node: Any) -> tuple:
    """``(args, kwargs)`` of one call (a graph node), symbolic tensors in place. Private:
    ``Node.arguments``."""
    return tuple(node.arguments.args), dict(node.arguments.kwargs)


def graph_calls(graph: Any) -> list:
    """``[(operation, its input tensors)]``: every call in a functional graph (from
    :func:`functional_graph`) and no other graph's (a layer shared with another model has calls
    there too). Private: ``Functional._nodes_by_depth``."""
    return [(node.operation, node_tensors(node)) for nodes in graph._nodes_by_depth.values() for node in nodes]


def producer_inputs(tensor: Any) -> list:
    """The symbolic input tensors of the call that produced ``tensor``. Private:
    ``_keras_history``, ``Operation._inbound_nodes``."""
    history = tensor._keras_history
    return node_tensors(history.operation._inbound_nodes[history.node_index])


def producer(tensor: Any) -> Any:
    """The operation that produced a symbolic ``KerasTensor``. Private: ``_keras_history``."""
    return tensor._keras_history.operation


def has_producer(value: Any) -> bool:
    """Whether ``value`` is a symbolic tensor of a functional graph, made by an operation.
    Private: ``_keras_history``."""
    return hasattr(value, "_keras_history")


def call_takes_training(layer: Any) -> bool:
    """Whether ``layer.call`` takes ``training`` (Keras passes it down). Private:
    ``Layer._call_context_args``."""
    return "training" in getattr(layer, "_call_context_args", ())


def sublayers(layer: Any) -> list:
    """The layers ``layer`` tracks directly (not itself, not deeper). Private:
    ``Layer._flatten_layers``."""
    return list(layer._flatten_layers(include_self=False, recursive=False))


def all_sublayers(layer: Any) -> list:
    """Every layer ``layer`` tracks, at any depth (not itself). Private: ``Layer._flatten_layers``."""
    return list(layer._flatten_layers(include_self=False, recursive=True))


def first_call_inputs(layer: Any) -> Any:
    """The symbolic positional inputs of ``layer``'s first call in a functional graph (a shared
    layer has several calls; ``layer.input`` refuses those). Private: ``Operation._inbound_nodes``,
    ``Node.arguments``."""
    nodes = getattr(layer, "_inbound_nodes", None) or []
    if not nodes:
        return None
    return nodes[0].arguments.args


def lambda_output_shape(layer: Any) -> Any:
    """The ``output_shape`` a ``Lambda`` was built with. Private: ``Lambda._output_shape``."""
    return layer._output_shape


def built_input_shapes(model: keras.Model) -> list | None:
    """The shape(s) a built subclassed model was built or first called with, or ``None``.
    Private: ``Layer._build_shapes_dict`` (Keras records it on the first build)."""
    shapes = getattr(model, "_build_shapes_dict", None)
    if not shapes:
        return None
    return list(shapes.values())


def inbound_nodes(layer: Any) -> list:
    """The calls of ``layer`` in functional graphs (one node per call). Private:
    ``Layer._inbound_nodes``."""
    return list(layer._inbound_nodes)


def outbound_nodes(layer: Any) -> list:
    """The calls of other layers on ``layer``'s outputs. Private: ``Layer._outbound_nodes``."""
    return list(layer._outbound_nodes)


def nodes_by_depth(graph: Any) -> dict:
    """``{depth: [node]}`` of a functional graph (from :func:`functional_graph`), depth 0 at the
    outputs. Private: ``Functional._nodes_by_depth``."""
    return graph._nodes_by_depth


def keras_mask(tensor: Any) -> Any:
    """The Keras mask a layer attached to ``tensor`` (what ``MultiHeadAttention`` reads from its
    query), or ``None``. Private: the ``_keras_mask`` attribute Keras' TensorFlow backend sets."""
    return getattr(tensor, "_keras_mask", None)


def is_shipped_layer(op: Any) -> bool:
    """Whether ``op``'s class is defined by Keras (not a user's subclass). Private: Keras' module
    layout, :data:`KERAS_LAYER_MODULES`."""
    return type(op).__module__.startswith(KERAS_LAYER_MODULES)


def own_attributes(layer: Any) -> list[tuple[str, Any]]:
    """``[(name, value)]``: ``layer``'s instance attributes without Keras' tracking bookkeeping;
    on PyTorch, where a layer is a ``torch.nn.Module``, its sublayers are in ``_modules``, not in
    its ``__dict__`` (an attribute in ``__dict__`` takes precedence). Private: ``Layer._layers``,
    ``Layer._tracker`` (and the ``_tracker*`` attributes), ``torch.nn.Module._modules``."""
    own = vars(layer)
    items = [(name, value) for name, value in own.items() if name not in ("_layers", "_modules")]
    items += [(name, value) for name, value in (own.get("_modules") or {}).items() if name not in own]
    return [(name, value) for name, value in items if not name.startswith("_tracker")]


def attention_overrides(op: Any) -> list[str]:
    """The :data:`ATTENTION_STEPS` that ``op``'s class (a ``MultiHeadAttention``) overrides.
    Private: ``MultiHeadAttention._compute_attention``, ``_masked_softmax``."""
    base = keras.layers.MultiHeadAttention
    return [name for name in ATTENTION_STEPS if getattr(type(op), name) is not getattr(base, name)]


def attention_steps_overridden(op: Any) -> list[str]:
    """The steps :func:`attention_steps_replaced` replaces that ``op``'s class (a
    ``MultiHeadAttention``) overrides: a class computing its attention its own way."""
    return [name for name in attention_overrides(op) if name != "call"]


def attention_is_gated(op: Any) -> bool:
    """Whether a ``MultiHeadAttention`` gates its output (a Keras without the feature: no).
    Private: ``MultiHeadAttention._use_gate``."""
    return bool(getattr(op, "_use_gate", False))


def attention_uses_flash(op: Any) -> bool:
    """Whether a ``MultiHeadAttention`` runs flash attention, which never forms its probabilities
    (a Keras without the feature: no). Private: ``MultiHeadAttention._flash_attention``."""
    return bool(getattr(op, "_flash_attention", False))


@contextlib.contextmanager
def attention_steps_replaced(wrap: Callable) -> Iterator[None]:
    """Within the block, ``MultiHeadAttention``'s own ``_compute_attention`` and ``_masked_softmax``
    (on the class: every layer and subclass inheriting them) are ``wrap(compute_attention,
    masked_softmax)``'s pair of functions; the originals are put back on leaving, whatever
    happens. Private: ``MultiHeadAttention._compute_attention``, ``_masked_softmax``."""
    base = keras.layers.MultiHeadAttention
    saved = base.__dict__["_compute_attention"], base.__dict__["_masked_softmax"]
    base._compute_attention, base._masked_softmax = wrap(*saved)
    try:
        yield
    finally:
        base._compute_attention, base._masked_softmax = saved


def attention_projections(mha: Any) -> dict[str, Any]:
    """``{"query", "key", "value", "output": EinsumDense}`` of a built ``MultiHeadAttention``.
    Private: ``MultiHeadAttention._query_dense`` and its three siblings."""
    return {"query": mha._query_dense, "key": mha._key_dense, "value": mha._value_dense, "output": mha._output_dense}


def attention_mask(mha: Any, query: Any, value: Any, **masks: Any) -> Any:
    """The attention mask ``[B, T, S]`` (or ``None``) ``mha`` computes from its masks
    (``query_mask``, ``value_mask``, ``key_mask``, ``attention_mask``, ``use_causal_mask``).
    Private: ``MultiHeadAttention._compute_attention_mask``."""
    return mha._compute_attention_mask(query, value, **masks)


def attention_scale(mha: Any) -> Any:
    """The factor ``1 / sqrt(key_dim)`` a ``MultiHeadAttention`` scales its queries by. Private:
    ``MultiHeadAttention._inverse_sqrt_key_dim``."""
    return mha._inverse_sqrt_key_dim


def attention_equations(mha: Any) -> tuple[str, str]:
    """``(dot product, combine)``: the ``einsum`` equations of a built ``MultiHeadAttention``'s
    scores (key, query) and of its weighted sum (probabilities, value). Private:
    ``MultiHeadAttention._dot_product_equation``, ``_combine_equation``."""
    return mha._dot_product_equation, mha._combine_equation


def attention_softmax(mha: Any, scores: Any, mask: Any) -> Any:
    """``mha``'s softmax of ``scores`` ``[B, N, T, S]`` under ``mask``. Private:
    ``MultiHeadAttention._masked_softmax``."""
    return mha._masked_softmax(scores, mask)


@contextlib.contextmanager
def outside_stateless_scope() -> Iterator[None]:
    """Within: no ``keras.StatelessScope`` (the JAX kernels run the model in one that maps its
    variables to the kernel's arguments), so a probe of the model built while a kernel is traced
    reads and creates real variables. Keras offers no public way to step out of the scope: its
    global state is set aside and put back."""
    from keras.src.backend.common import global_state

    scope = global_state.get_global_attribute("stateless_scope")
    global_state.set_global_attribute("stateless_scope", None)
    try:
        yield
    finally:
        global_state.set_global_attribute("stateless_scope", scope)


def running_layers() -> tuple[str, Any]:
    """``(path, innermost layer)`` of the layers running right now (``"model/block/dense"`` and the
    ``Dense``; ``("", None)`` outside any): PyTorch's op-level passes name where an operation runs,
    and tell a PReLU's own ReLUs from others. Private: Keras' name-scope stack
    (``global_state``'s ``"name_scope_stack"``, each entry's ``caller``)."""
    from keras.src.backend.common import global_state
    from keras.src.backend.common.name_scope import current_path

    stack = global_state.get_global_attribute("name_scope_stack") or []
    return current_path(), (stack[-1].caller if stack else None)
