"""Copies of a model with weights re-initialised, layer by layer: what the randomisation test explains.

:func:`clone_with_weights` copies the model (nested models too) with its trained weights,
:func:`weighted_layers` lists the layers that have weights (paths ``"outer/inner"`` inside nested
models), :func:`reinitialize` re-draws one layer's weights from its own initializers, reseeded,
:func:`randomized_copies` yields the copy after each step of a cascading or independent
randomisation, and :func:`fixed_targets` resolves, once on the trained weights, the targets every
step explains. The user's model is never changed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from ..engine import check_batch_size
from .explained import Given

if TYPE_CHECKING:
    import keras

__all__ = ["randomized_copies", "fixed_targets", "clone_with_weights", "weighted_layers", "reinitialize"]


def randomized_copies(
    model: keras.Model, mode: str, layers: Any, seed: int, order: str
) -> Iterator[tuple[str | None, keras.Model, list[str]]]:
    """Yields ``(path, copy, randomized_paths)``: first ``(None, copy, [])`` with the trained weights,
    then the same copy after each step (``order``: ``"top_down"`` from the output, ``"bottom_up"``)."""
    clone = clone_with_weights(model)
    all_layers = weighted_layers(clone)
    if not all_layers:
        raise ValueError(
            f"model {model.name!r} has no layer with weights: there is nothing to randomise; "
            f"received a model without weights."
        )
    index = {path: i for i, (path, _) in enumerate(all_layers)}
    chosen = _select_layers(all_layers, layers)
    yield None, clone, []
    randomized: list[str] = []
    for path, layer in reversed(chosen) if order == "top_down" else chosen:
        saved = [w.numpy() for w in layer.weights] if mode == "independent" else None
        reinitialize(layer, seed=seed, salt=index[path])
        randomized = [*randomized, path] if mode != "independent" else [path]
        yield path, clone, randomized
        if saved is not None:
            for w, value in zip(layer.weights, saved):
                w.assign(value)


def fixed_targets(model: keras.Model, inputs: Any, targets: Any, options: dict) -> Any:
    """The targets every step of a randomisation explains, resolved once on ``model`` (the copy with
    the trained weights) at the clean ``inputs``, as a :class:`~saliency_kit.evaluate.explained.Given`:
    its columns and payload resolved once (``"top1"``: the trained model's class; a ``"predicted"``
    region keeps the trained model's mask). With several model inputs or token ids the model runs
    on all of them as given. ``options``: ``explain``'s (``score``, ``batch_size``,
    ``attribute_to``, ``class_names``)."""
    from ..pipeline.parts import read
    from ..pipeline.prepare import resolve_parts

    batch_size = check_batch_size(options.get("batch_size", 32))
    parts = read(model, inputs, options.get("attribute_to"), batch_size=batch_size)
    score, class_names = options.get("score", "logits"), options.get("class_names")
    return Given(resolve_parts(model, parts, targets, score, batch_size, class_names))


def clone_with_weights(model: keras.Model) -> keras.Model:
    """A checked deep copy of ``model`` (nested models cloned too) holding the same state
    (:func:`saliency_kit.model.copy.copy_model`)."""
    from ..model.copy import copy_model

    try:
        return copy_model(model, what="randomisation copy")
    except ValueError as error:
        raise ValueError(f"randomization_test needs a copy of the model to re-initialise: {error}") from error


def weighted_layers(model: keras.Model) -> list[tuple[str, object]]:
    """``(path, layer)`` of every layer that has weights, in the model's order, nested models expanded.

    Paths of layers in nested models are ``"outer/inner"``.
    """
    from ..model.walker import weighted_layers as walk_weighted

    return walk_weighted(model)


def _select_layers(all_layers: Any, layers: Any) -> list[tuple[str, Any]]:
    if layers is None:
        return list(all_layers)
    if isinstance(layers, str):
        layers = [layers]
    chosen = set()
    for name in layers:
        hits = [p for p, _ in all_layers if p == name or p.startswith(f"{name}/") or p.split("/")[-1] == name]
        if not hits:
            raise ValueError(
                f"layer {name!r} is not a weighted layer of the model; weighted layers are: "
                + ", ".join(p for p, _ in all_layers)
                + f"; received {name!r}."
            )
        chosen.update(hits)
    return [(p, layer) for p, layer in all_layers if p in chosen]


# variable name -> initializer attributes that may hold its initializer (besides "<name>_initializer")
_INITIALIZER_ATTRS = {
    "kernel": ("kernel_initializer", "depthwise_initializer"),
    "depthwise_kernel": ("depthwise_initializer",),
    "pointwise_kernel": ("pointwise_initializer",),
    "recurrent_kernel": ("recurrent_initializer",),
}


def reinitialize(layer: Any, *, seed: int = 0, salt: int = 0) -> None:
    """Re-draw every weight of ``layer`` from its own initializer, reseeded from ``(seed, salt)``.

    The initializer of a variable named ``v`` is the ``v_initializer`` attribute of the (sub)layer
    that owns it (``kernel_initializer``, ``bias_initializer``, ``gamma_initializer``,
    ``moving_variance_initializer``, ...; depthwise and recurrent kernels included). A variable with
    no initializer to be found gets Glorot-uniform (2-D and up) or zeros.
    """
    import keras

    from ..model import keras_private

    owners = [layer, *keras_private.all_sublayers(layer)]
    for i, variable in enumerate(layer.weights):
        init = _initializer_for(owners, variable)
        var_seed = int(np.random.SeedSequence([seed, salt, i]).generate_state(1)[0] % (2**31 - 1))
        if init is None:
            init = keras.initializers.GlorotUniform() if len(variable.shape) >= 2 else keras.initializers.Zeros()
        variable.assign(_reseeded(init, var_seed)(shape=tuple(variable.shape), dtype=variable.dtype))


def _initializer_for(owners: Any, variable: Any) -> Any:
    name = variable.name.split("/")[-1].split(":")[0]
    attrs = (*_INITIALIZER_ATTRS.get(name, ()), f"{name}_initializer")
    holders = [o for o in owners if any(w is variable for w in o.weights)]
    for owner in reversed(holders):  # the deepest owner first
        for attr in attrs:
            init = getattr(owner, attr, None)
            if init is not None:
                return init
    return None


def _reseeded(init: Any, seed: int) -> Any:
    import keras

    if isinstance(init, keras.initializers.Initializer):
        config = init.get_config()
        if "seed" in config:
            return type(init).from_config({**config, "seed": seed})
    return init
