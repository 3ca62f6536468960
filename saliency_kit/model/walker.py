"""The one model walker: every layer of a model with its path and owner.

Every walk over a model in saliency_kit goes through :func:`walk`: rewriting, copying, Grad-CAM
taps and their default layer, the weighted layers of the randomisation test, recurrent detection
and the model zoo.

A path names a layer from the model down: ``"block"`` at the top, ``"outer/inner"`` inside a
nested model or a wrapper (``"td/conv"`` inside ``TimeDistributed(name="td")``, ``"bi/forward_lstm"``
inside a ``Bidirectional``, ``"rnn/simple_rnn_cell"`` for the cell of a recurrent layer), at any
depth.
"""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Iterator
from typing import Any

import keras

from . import keras_private

__all__ = [
    "Visit",
    "walk",
    "children",
    "is_graph_model",
    "layer_paths",
    "find_layer",
    "default_cam_layer",
    "patch_size",
    "attention_input_layer",
    "spatial_output_text",
    "configure_cam_layer",
    "weighted_layers",
    "is_recurrent",
    "output_rank",
    "layer_at",
]


@dataclasses.dataclass(frozen=True)
class Visit:
    """One step of :func:`walk`: ``layer`` at ``path``, directly inside ``owner``.

    ``in_graph``: the layer is a node of a functional graph (a top-level layer of the model or of
    a nested Functional/Sequential model), so running the graph reaches it as a whole; layers
    inside wrappers, recurrent cells and custom layers are not.
    """

    path: str
    layer: object  # a keras Layer, or a bare keras Operation of a functional graph
    owner: object
    in_graph: bool


def is_graph_model(layer: Any) -> bool:
    """A Functional or built Sequential model (its layers form a graph that can be re-run)."""
    return isinstance(layer, keras.Model) and keras_private.functional_graph(layer) is not None


def children(layer: Any) -> list:
    """The operations directly inside ``layer``, in order.

    Functional models: every operation of the graph (bare ``keras.ops`` calls included, the
    input layer not); Sequential: its layers; wrappers: the wrapped layer(s); recurrent layers:
    their cell; any other layer: the layers it tracks.
    """
    if isinstance(layer, keras.Sequential):
        return [op for op in layer.layers if not isinstance(op, keras.layers.InputLayer)]
    if is_graph_model(layer):
        return [op for op in layer.operations if not isinstance(op, keras.layers.InputLayer)]
    if isinstance(layer, keras.layers.Bidirectional):
        return [layer.forward_layer, layer.backward_layer]
    if isinstance(layer, keras.layers.Wrapper):
        return [layer.layer]
    if isinstance(layer, keras.layers.RNN):
        return [layer.cell]
    if isinstance(layer, keras.layers.Layer):
        return keras_private.sublayers(layer)
    return []


def walk(model: keras.Model, *, prefix: str = "") -> Iterator[Visit]:
    """Yield a :class:`Visit` for every operation inside ``model``, depth first, in order.

    A nested model or a wrapper is yielded before what it contains. Each layer object is yielded
    once per place it appears.
    """
    in_graph = is_graph_model(model)
    for op in children(model):
        path = f"{prefix}{op.name}"
        yield Visit(path, op, model, in_graph)
        yield from walk(op, prefix=f"{path}/")


def layer_paths(model: keras.Model) -> Iterator[tuple[str, Any]]:
    """``(path, layer)`` for every layer a functional graph runs as a whole (the layers Grad-CAM
    can tap), nested Functional and Sequential models expanded in place; order as ``walk``."""
    for visit in walk(model):
        if visit.in_graph and isinstance(visit.layer, keras.layers.Layer) and not is_graph_model(visit.layer):
            yield visit.path, visit.layer


def output_rank(layer: Any) -> int | None:
    """Rank of ``layer``'s output, or ``None`` (never called, or called several times)."""
    try:
        return len(layer.output.shape)
    except Exception:  # Keras raises different errors for unbuilt and shared layers
        return None


def find_layer(model: keras.Model, layer: Any) -> str:
    """The path of ``layer`` in ``model``: a path (``"outer/inner"``), a bare layer name, or the
    layer object itself.

    Raises ``ValueError`` for unknown or ambiguous names, listing the candidates, and ``TypeError``
    for something that is neither a name nor a layer.
    """
    everything = list(walk(model))
    if isinstance(layer, keras.layers.Layer):
        hits = [v.path for v in everything if v.layer is layer]
        if not hits:
            raise ValueError(f"layer object {layer.name!r} is not part of model {model.name!r}; received {layer!r}.")
        return hits[0]
    if not isinstance(layer, str):
        raise TypeError(
            f"layer must be a layer name, a path 'outer/inner' or a keras layer; received {type(layer).__name__}."
        )
    paths = [v.path for v in everything]
    if layer in paths:
        return layer
    matches = [p for p in paths if p.split("/")[-1] == layer or p.endswith("/" + layer)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        spatial = [p for p, op in layer_paths(model) if output_rank(op) in _SPATIAL_OUTPUTS]
        attention_input = attention_input_layer(model)
        inside = f" and the input of the last attention, {attention_input!r}" if attention_input else ""
        raise ValueError(
            f"layer {layer!r} is not in model {model.name!r}; layers with a sequence, image or volume "
            f"(3-D to 5-D) output: {spatial or 'none'}{inside}; received {layer!r}."
        )
    raise ValueError(
        f"layer name {layer!r} is ambiguous: it matches {matches}; give the full path; received {layer!r}."
    )


def layer_at(model: keras.Model, path: str) -> Any:
    """The layer at ``path`` (as :func:`find_layer` returns it)."""
    for visit in walk(model):
        if visit.path == path:
            return visit.layer
    raise ValueError(f"no layer at path {path!r} in model {model.name!r}; received {path!r}.")


# The Grad-CAM layer configured for a model (saliency_kit.load_model records its spec's
# ``gradcam_layer`` here). Weak keys: the model is neither kept alive nor changed.
_CONFIGURED_CAM_LAYERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def configure_cam_layer(model: keras.Model, path: str | None) -> None:
    """Make ``path`` the default CAM layer of ``model`` (``None``: forget it)."""
    if path:
        _CONFIGURED_CAM_LAYERS[model] = path
    else:
        _CONFIGURED_CAM_LAYERS.pop(model, None)


_SPATIAL_OUTPUTS = {
    3: "3-D [batch, time, channels]",
    4: "4-D [batch, height, width, channels]",
    5: "5-D [batch, depth, height, width, channels]",
}


def spatial_output_text(rank: int) -> str:
    """How a layer output of ``rank`` that CAM methods can use is described in messages."""
    return _SPATIAL_OUTPUTS.get(rank, f"{rank}-D")


def default_cam_layer(model: keras.Model, rank: int = 4) -> str:
    """The layer CAM methods use when none is given, for inputs of ``rank`` (batch axis included:
    3 for sequences ``[B, T, F]``, 4 for images, 5 for volumes ``[B, D, H, W, C]``).

    A model returned by :func:`saliency_kit.load_model` uses its spec's ``gradcam_layer``
    (recorded with :func:`configure_cam_layer`).
    A vision transformer (:func:`attention_input_layer`): the input of its last block's attention.
    Otherwise: the last layer (nested models included) whose output has the input's rank
    (``[B, t, c]``, ``[B, h, w, c]`` or ``[B, d, h, w, c]``, channels first or last as the model's).
    """
    try:
        configured = _CONFIGURED_CAM_LAYERS.get(model)
    except TypeError:  # not weak-referenceable: nothing was configured for it
        configured = None
    if configured:
        return find_layer(model, configured)
    if not is_graph_model(model):
        raise ValueError(
            f"model {model.name!r} is a subclassed keras.Model ({type(model).__name__}): its layers "
            "cannot be tapped from outside, so CAM methods have no default layer; wrap it in a "
            "functional model built from its layers, or use a gradient method."
        )
    attention_input = attention_input_layer(model) if rank == 4 else None
    if attention_input is not None:
        return attention_input
    found = [path for path, layer in layer_paths(model) if output_rank(layer) == rank]
    if not found:
        raise ValueError(
            f"model {model.name!r} has no layer with a {spatial_output_text(rank)} "
            "output, so CAM methods cannot run on it; use a gradient method instead."
        )
    return found[-1]


def attention_input_layer(model: keras.Model) -> str | None:
    """The path of a vision transformer's CAM layer: the input of its last block's attention, the
    output ``[B, N, C]`` of the last ``LayerNormalization`` before the model's last
    ``MultiHeadAttention`` (a model that classifies from its class token reads no patch token after
    that attention), both looked for at any depth (inside a custom block, as KerasHub's
    ``ViTEncoderBlock``, in the order the block tracks them). ``None`` for a model without
    attention, or with an image-shaped ``[B, h, w, c]`` graph layer after it (a convolutional
    head keeps its own CAM layer)."""
    visits = list(walk(model))
    attentions = [i for i, visit in enumerate(visits) if isinstance(visit.layer, keras.layers.MultiHeadAttention)]
    if not attentions or any(v.in_graph and output_rank(v.layer) == 4 for v in visits[attentions[-1] :]):
        return None
    looped = tuple(v.path + "/" for v in visits if isinstance(v.layer, (keras.layers.RNN, keras.layers.Wrapper)))
    norms = [
        visit.path
        for visit in visits[: attentions[-1]]
        if isinstance(visit.layer, keras.layers.LayerNormalization)
        and (output_rank(visit.layer) == 3 if visit.in_graph else not visit.path.startswith(looped))
    ]
    return norms[-1] if norms else None


def patch_size(model: keras.Model) -> tuple[int, int] | None:
    """``(ph, pw)``: the patch size of a vision transformer's patch embedding, the first 2-D
    convolution (nested and custom layers included, as KerasHub's ``ViTPatchingAndEmbedding``)
    whose stride equals its kernel and exceeds 1; ``None`` when the model has none."""
    for visit in walk(model):
        layer = visit.layer
        if isinstance(layer, keras.layers.Conv2D) and not isinstance(layer, keras.layers.Conv2DTranspose):
            kernel, strides = tuple(layer.kernel_size), tuple(layer.strides)
            if kernel == strides and max(strides) > 1:
                return (int(strides[0]), int(strides[1]))
    return None


def weighted_layers(model: keras.Model) -> list[tuple[str, Any]]:
    """``(path, layer)`` of every graph layer that has weights, in the model's order (nested
    models expanded; a wrapper counts as one layer with its inner weights)."""
    return [(path, layer) for path, layer in layer_paths(model) if layer.weights]


def is_recurrent(model: keras.Model) -> bool:
    """Whether ``model`` runs a recurrent layer (a while loop) anywhere inside it."""
    return any(isinstance(v.layer, (keras.layers.RNN, keras.layers.Bidirectional)) for v in walk(model))
