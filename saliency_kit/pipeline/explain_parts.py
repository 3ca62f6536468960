"""``explain`` for a request that is not one float input: a model's several inputs, token ids
(explained at their ``Embedding``'s output), an inner layer (``attribute_to=``), conductance.

A method whose formula is elementwise (the gradient family, integrated gradients, SmoothGrad,
DeepLIFT, LRP, ...) runs once on every explained part together, packed side by side
(:class:`~saliency_kit.engine.space.Space`): a path, a noise draw or a baseline moves all
inputs at once, and integrated gradients' completeness holds over all of them. A method that
needs one input's own axes (``spatial``: occlusion, Blur IG, the CAM methods, ...) runs once per
explained input, the others held at their values. Targets are resolved once, on every input.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import engine, methods
from .. import targets as targets_module
from ..explanation import Explanation
from ..model.model_inputs import inputs_reaching
from ..model.walker import find_layer
from .layer_start import layer_baselines
from .parts import part_options, read, run_rows, structure
from .request import (
    ExplainCall,
    check_input_keys,
    differentiated_score,
    method_request,
    recorded_options,
    resolve_request,
)

if TYPE_CHECKING:
    import keras

__all__ = ["explain_parts"]


def explain_parts(call: ExplainCall) -> Explanation:
    """:func:`saliency_kit.explain` for parts (see the module); the call's arguments, checked here."""
    model, chosen = call.model, call.chosen
    engine.check_score(call.score)
    batch_size = engine.check_batch_size(call.batch_size)
    token = call.baseline_token
    if isinstance(token, bool) or not isinstance(token, (int, np.integer)) or token < 0:
        raise ValueError(f"baseline_token must be a non-negative token id; received {token!r}.")
    given = dict(call.options)
    conductance = chosen.layered  # a path in input space, attributions in a layer's
    if conductance:
        given["layer"] = _conductance_layer(model, call.attribute_to, given)
    attribute_to = None if conductance else call.attribute_to
    parts = read(model, call.inputs, attribute_to, batch_size=batch_size, embedded=False)
    if call.points is not None:
        parts.points = _given_points(parts, call.points)
    layers = [p.name for p in parts.parts if p.input is None]
    if chosen.spatial and layers:
        raise ValueError(
            f"{chosen.name} runs on a model input's own axes; attribute_to=LAYER takes the gradient family, "
            f"integrated gradients, SmoothGrad, DeepLIFT, LRP and conductance; received attribute_to={layers[0]!r}."
        )
    keys = check_input_keys(call.input_keys, parts.count)
    names = targets_module.class_names_of(call.class_names)
    first = parts.points[0] if parts.points[0] is not None else parts.held[parts.parts[0].input]  # ids
    selection = resolve_request(model, first, call.targets, call.score, batch_size, names, at=parts.held)
    runs = [[p] for p in parts.parts] if chosen.spatial else [list(parts.parts)]
    results: dict = {}
    maps: dict = {}
    out: dict = {}
    recorded: dict = {}
    skipped = []
    for run in runs:
        space, rows, x = run_rows(model, parts, run)  # x: the points, or their shape alone
        layer_axis = engine.layer_channel_axis(model, x)
        channel_axis = _channel_axis(run, x, call.channels_axis, layer_axis)
        values, space = part_options(model, parts, run, space, given, baseline_token=token, defaults=chosen.defaults)
        values = layer_baselines(
            model, parts, run, space, values, given=given, defaults=chosen.defaults, baseline_token=token,
            layer_start=call.layer_start, batch_size=batch_size,
        )  # fmt: skip
        values = chosen.check_options(values)
        request = method_request(model, x, call.score, batch_size, call.class_names, channel_axis)
        try:
            if chosen.prepare is not None:
                values = chosen.prepare(request, values)
            _check_reached(model, run, values, conductance)
        except ValueError as error:
            if len(runs) == 1:
                raise
            skipped.append((run[0].name, str(error)))  # a method for images, and a tabular input
            continue
        job = engine.Job(
            model,
            rows,
            selection,
            values,
            score=call.score,
            batch_size=batch_size,
            keys=keys,
            channel_axis=channel_axis,
            layer_axis=layer_axis,
            space=space,
            held=parts.held,
            cost=chosen.cost(values) if chosen.cost else 1,
        )
        out = engine.run(chosen.compute, job, with_scores=call.with_scores)
        tokens = {name: token for name, token in space.fills if name not in given}
        recorded = {**values, **tokens}  # baseline_token embedded in the kernel: recorded as that id
        _collect(out.pop("attributions"), chosen, values, run, space, channel_axis, (results, maps))
    if not results:
        raise ValueError(
            f"{chosen.name} explains none of the inputs {[name for name, _ in skipped]}: "
            + "; ".join(f"{name}: {why}" for name, why in skipped)
        )
    for name, why in skipped:
        warnings.warn(f"{chosen.name} does not explain input {name!r}: {why}", RuntimeWarning, stacklevel=3)
    if chosen.warn_zero:
        _warn_unused(results, chosen.name)
    return _explanation(call, parts, selection, (results, maps), out, (given, recorded))


def _collect(
    attributions: np.ndarray, chosen: Any, values: dict, run: list, space: Any, channel_axis: int, into: tuple
) -> None:
    """One run's attributions (and maps) into ``into = (results, maps)``, by part (conductance: by layer)."""
    results, maps = into
    if chosen.layered:
        results[values["layer"]] = attributions
        maps[values["layer"]] = attributions.sum(axis=-1, dtype=np.float32)
        return
    for part, value in zip(run, [attributions] if chosen.cam else space.unpack(attributions)):
        results[part.name] = value
        maps[part.name] = _map(chosen, values, part, value, channel_axis)


def _explanation(call: ExplainCall, parts: Any, selection: Any, done: tuple, out: dict, options: tuple) -> Explanation:
    """The Explanation of the runs ``done = (results, maps)``; ``options = (given, recorded)``."""
    (results, maps), (given, recorded), chosen = done, options, call.chosen
    if chosen.layered:
        kinds = {recorded["layer"]: "layer"}
        attributions_out, maps_out = results[recorded["layer"]], maps[recorded["layer"]]
    else:
        ordered = sorted(parts.parts, key=lambda p: len(parts.names) if p.input is None else p.input)
        kinds = {p.name: _kind(p) for p in ordered if p.name in results}  # the model's order, as list maps
        attributions_out, maps_out = structure(parts, results), structure(parts, maps)
    return Explanation(
        attributions=attributions_out,
        maps=maps_out,
        targets=selection.columns,
        scores=out.get("scores"),
        method=chosen.name,
        options={**recorded_options(given, recorded), "score": differentiated_score(call.model, call.score)},
        layer=recorded.get("layer") if chosen.cam or "layer" in chosen.defaults else None,
        completeness_gap=out.get("completeness_gap"),
        rewritten=out.get("rewritten"),
        target_info=selection.info,
        parts=kinds,
    )


def _given_points(parts: Any, points: list) -> list:
    """``points`` checked against the parts: one array ``[B, *part.shape]`` each, in the part's dtype."""
    if len(points) != len(parts.parts):
        raise ValueError(f"points must hold one array per explained part ({len(parts.parts)}); received {len(points)}.")
    out = []
    for part, value in zip(parts.parts, points):
        array = np.asarray(value)
        if array.shape != (parts.count, *part.shape):
            raise ValueError(
                f"the points of part {part.name!r} must have shape {[parts.count, *part.shape]}; "
                f"received {list(array.shape)}."
            )
        out.append(np.ascontiguousarray(array.astype(part.dtype, copy=False)))
    return out


def _kind(part: Any) -> str:
    return "embedding" if part.embedding else "input" if part.input is not None else "layer"


def _conductance_layer(model: keras.Model, attribute_to: Any, given: dict) -> str:

    layer = given.get("layer") if attribute_to is None else attribute_to
    if layer is None:
        raise ValueError(
            "conductance attributes to an inner layer: give attribute_to=LAYER (a name, a path or the layer); "
            "received none."
        )
    return find_layer(model, layer)


def _channel_axis(run: list, x: np.ndarray, given: int | None, layer_axis: int) -> int:
    """The channel axis of one row of ``x``: an image, sequence or volume input's (given, or
    ``layer_axis``, its spatial layers' data format); ``-1`` for packed parts and layers."""
    if len(run) > 1 or run[0].input is None or x.ndim < 3:
        return -1
    if given is not None:
        return engine.check_channels_axis(given, x.ndim)
    return layer_axis


def _check_reached(model: keras.Model, run: list, values: dict, conductance: bool) -> None:
    """A layer method's layer must be on a path from this run's input (else its map is not of
    that input): ``ValueError`` otherwise."""
    if conductance or "layer" not in values or run[0].input is None:
        return

    if run[0].input not in inputs_reaching(model, values["layer"]):
        raise ValueError(
            f"layer {values['layer']!r} is on no path from input {run[0].name!r}, so its map is not of that "
            "input; choose a layer after that input with layer=."
        )


def _map(chosen: Any, values: dict, part: Any, attributions: np.ndarray, channel_axis: int) -> np.ndarray:
    """One part's maps: a CAM's own; token embeddings summed over their last axis ``[B, K, T]``
    (averaged for a method whose maps are means: occlusion's score drop per token); otherwise the
    method's reduction over the channel axis (the last for non-images)."""
    if chosen.cam:
        return attributions.astype(np.float32)
    if part.embedding:
        how = "mean" if chosen.reduction(values) == "mean" else "sum"
        return methods.reduce_map(attributions, how, -1)
    if attributions.ndim <= 2:
        return attributions.astype(np.float32)
    axis = 2 + channel_axis if channel_axis >= 0 else -1
    return methods.reduce_map(attributions, chosen.reduction(values), axis)


def _warn_unused(results: dict, method: str) -> None:
    """An input whose attributions are all zero (the score does not depend on it) is said once."""
    for name, value in results.items():
        if not np.any(value):
            warnings.warn(
                f"{method}: every attribution of {name!r} is zero: the score does not depend on it "
                "(an unconnected input, tf.stop_gradient, or every path to it inactive).",
                RuntimeWarning,
                stacklevel=4,  # explain's caller
            )
