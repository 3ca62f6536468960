"""A model's inputs as a request sees them: their names, shapes and dtypes in graph order, the
layer reading each integer input (an ``Embedding``, :func:`reading_layer`), what it gives for
ids, and which inputs a layer's output depends on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import keras
import numpy as np

from . import keras_private
from .copy import input_signature
from .walker import find_layer, is_graph_model, layer_at

__all__ = [
    "InputInfo",
    "model_inputs",
    "reading_layer",
    "embedding_table",
    "embedded_spec",
    "lookup",
    "embedder",
    "inputs_reaching",
    "calls_of",
]


@dataclass(frozen=True)
class InputInfo:
    """One model input: ``name`` (its key in a dict-input model, else its ``keras.Input`` name, or
    ``input_i`` for a subclassed model), ``shape`` ``(None, ...)`` and ``dtype``."""

    name: str
    shape: tuple
    dtype: str

    @property
    def integer(self) -> bool:
        return "int" in self.dtype or self.dtype == "bool"


def _graph(model: keras.Model) -> Any:
    return keras_private.functional_graph(model)


def model_inputs(model: keras.Model) -> list[InputInfo]:
    """Every input of ``model`` in its graph order (the order :class:`~saliency_kit.model.scores.Placed`
    takes them in). ``ValueError`` for a model without a defined input (as ``explain`` says)."""
    signature = input_signature(model)
    graph = _graph(model)
    names = [f"input_{i}" for i in range(len(signature))]
    if graph is not None:
        structure = keras_private.input_structure(model)
        if isinstance(structure, dict):
            names = [str(key) for key in keras.tree.flatten({k: k for k in structure})]
        elif graph.inputs:
            names = [str(t.name) for t in graph.inputs]
    return [InputInfo(name, tuple(shape), dtype) for name, (shape, dtype) in zip(names, signature)]


def embedding_table(layer: Any) -> Any:
    """The table ``[vocabulary, D]`` of ``layer`` when it is a plain ``keras.layers.Embedding``:
    the backend's variable itself, not a copy (a BERT-sized table is 94 MB, a copy 16 ms per
    request); ``None`` for an embedding whose call is more than a row lookup (LoRA, quantised, a
    subclass)."""
    if type(layer) is keras.layers.Embedding and not layer.lora_enabled and not layer.quantization_mode:
        return layer.embeddings.value
    return None


def embedded_spec(layer: Any, shape: tuple) -> tuple[tuple, str]:
    """``(shape, dtype)`` of one row of what ``layer`` (an ``Embedding``, or another layer reading
    ids) gives for one row of ids of ``shape`` (``[T]`` -> ``[T, D]``), without running it."""
    return tuple(layer.compute_output_shape((None, *shape)))[1:], keras.backend.standardize_dtype(layer.compute_dtype)


def lookup(layer: Any, ids: Any) -> Any:
    """``[N, T, D]``: what ``layer`` (an ``Embedding``, or another layer reading ids) gives for
    checked ids ``[N, T]``: the rows of its table (:func:`embedding_table`; the same rows its
    call takes, read from the variable alone, without an eager layer call) when it has a plain
    one, else the layer called."""
    ids = np.asarray(ids)
    table = embedding_table(layer)
    if table is not None:
        rows = keras.ops.convert_to_numpy(keras.ops.take(table, ids, axis=0))
        return rows.astype(layer.compute_dtype, copy=False)
    return keras.ops.convert_to_numpy(layer(ids))


def embedder(layer: Any, dtype: Any) -> Callable[[Any], Any]:
    """``embed(ids [n, T]) -> [n, T, D]`` in ``dtype``, inside a compiled kernel: the rows of
    ``layer``'s table gathered from its variable (read at every call, so a kernel sees training),
    or the layer called when its call is more than a row lookup (:func:`embedding_table`)."""

    def embed(ids: Any) -> Any:
        table = embedding_table(layer)
        rows = layer(ids) if table is None else keras.ops.take(table, ids, axis=0)
        return keras.ops.cast(rows, dtype)

    return embed


def reading_layer(model: keras.Model, index: int, reads: Callable[[Any], bool]) -> str | None:
    """The path of the first layer ``reads`` accepts that reads model input ``index`` directly (in
    ``model``'s graph or a nested functional model's, e.g. a KerasHub backbone's), else ``None``."""
    graph = _graph(model)
    if graph is None:
        return None
    source = graph.inputs[index]
    for op, call in keras_private.graph_calls(graph):
        if not any(t is source for t in call):
            continue
        if reads(op):
            return op.name
        inner_graph = _graph(op) if is_graph_model(op) else None
        if inner_graph is not None:
            position = next(i for i, t in enumerate(call) if t is source)
            inner = reading_layer(op, position, reads) if position < len(inner_graph.inputs) else None
            if inner is not None:
                return f"{op.name}/{inner}"
    return None


def _own_calls(model: keras.Model, path: str) -> tuple[Any, list]:
    """``(the layer at path, the flat symbolic inputs of each of its calls in its own model's
    graph)`` (a layer reused by another model has calls there too, which do not count)."""
    layer = layer_at(model, path)
    parent = layer_at(model, path.rsplit("/", 1)[0]) if "/" in path else model
    graph = _graph(parent)
    if graph is None:
        return layer, []
    return layer, [call for op, call in keras_private.graph_calls(graph) if op is layer]


def inputs_reaching(model: keras.Model, path: str) -> set[int]:
    """The indices of the model inputs the output of the layer at ``path`` depends on (through the
    top-level layer the path starts with; all of them when that cannot be followed)."""
    graph = _graph(model)
    everything = set(range(len(model_inputs(model))))
    if graph is None:
        return everything
    _, calls = _own_calls(model, find_layer(model, path.split("/")[0]))
    if not calls:
        return everything
    sources = {id(t): i for i, t in enumerate(graph.inputs)}
    reached: set[int] = set()
    seen: set[int] = set()
    stack = [t for call in calls for t in call]
    while stack:
        tensor = stack.pop()
        if id(tensor) in seen:
            continue
        seen.add(id(tensor))
        if id(tensor) in sources:
            reached.add(sources[id(tensor)])
            continue
        if keras_private.has_producer(tensor):
            stack.extend(keras_private.producer_inputs(tensor))
    return reached


def calls_of(model: keras.Model, path: str) -> int:
    """How many times the layer at ``path`` is called in its model's graph (a shared layer: more
    than one; its output then is not one tensor and cannot be explained)."""
    return max(1, len(_own_calls(model, path)[1]))
