"""A prepared call run through the engine and its results made an
:class:`~saliency_kit.Explanation`: each run's attributions split back into its parts, each
part's maps, the warnings a user should see (maps that are all zero, inputs not explained), and
everything in the structure the inputs came in.
"""

from __future__ import annotations

import warnings
from typing import Any

import keras
import numpy as np

from .. import engine, methods
from ..explanation import Explanation
from .parts import structure
from .prepare import Prepared
from .request import differentiated_score, recorded_options

__all__ = ["explain_prepared"]


def explain_prepared(prepared: Prepared) -> Explanation:
    """Run every job of ``prepared`` (:func:`saliency_kit.engine.run`) and build the
    :class:`~saliency_kit.Explanation` (see the module). Called by ``explain`` itself: its
    warnings name ``explain``'s caller."""
    call, chosen = prepared.call, prepared.call.chosen
    results: dict = {}
    maps: dict = {}
    out: dict = {}
    for run in prepared.runs:
        out = engine.run(chosen.compute, run.job, with_scores=call.with_scores)
        _collect(out.pop("attributions"), chosen, run, (results, maps))
    for name, why in prepared.skipped:
        warnings.warn(f"{chosen.name} does not explain input {name!r}: {why}", RuntimeWarning, stacklevel=3)
    if chosen.warn_zero and prepared.parts.plain:
        _warn_zero_maps(next(iter(results.values())), prepared.selection, chosen.name)
    elif chosen.warn_zero:
        _warn_unused(results, chosen.name)
    return _explanation(prepared, (results, maps), out)


def _collect(attributions: np.ndarray, chosen: Any, run: Any, into: tuple) -> None:
    """One run's attributions (and maps) into ``into = (results, maps)``, by part (conductance: by layer)."""
    results, maps = into
    if chosen.layered:
        layer = run.options["layer"]
        results[layer] = attributions
        maps[layer] = attributions.sum(axis=-1, dtype=np.float32)
        return
    for part, value in zip(run.parts, [attributions] if chosen.cam else run.space.unpack(attributions)):
        results[part.name] = value
        maps[part.name] = _map(chosen, run.options, part, value, run.channel_axis)


def _explanation(prepared: Prepared, done: tuple, out: dict) -> Explanation:
    """The Explanation of the runs ``done = (results, maps)``; ``out`` the last run's other results."""
    (results, maps), call, parts = done, prepared.call, prepared.parts
    _hide_positions(prepared.selection, results, maps)
    chosen, recorded = call.chosen, prepared.runs[-1].recorded
    kinds: dict | None = None
    if chosen.layered:
        kinds = {recorded["layer"]: "layer"}
        attributions_out, maps_out = results[recorded["layer"]], maps[recorded["layer"]]
    else:
        if not parts.plain:
            ordered = sorted(parts.parts, key=lambda p: len(parts.names) if p.input is None else p.input)
            kinds = {p.name: p.kind for p in ordered if p.name in results}  # the model's order, as list maps
        attributions_out, maps_out = structure(parts, results), structure(parts, maps)
    return Explanation(
        attributions=attributions_out,
        maps=maps_out,
        targets=prepared.selection.columns,
        scores=out.get("scores"),
        method=chosen.name,
        options={**recorded_options(prepared.given, recorded), "score": differentiated_score(call.model, call.score)},
        layer=recorded.get("layer") if chosen.cam or "layer" in chosen.defaults else None,
        completeness_gap=out.get("completeness_gap"),
        rewritten=out.get("rewritten"),
        target_info=prepared.selection.info,
        parts=kinds,
        backend=keras.backend.backend(),
    )


def _hide_positions(selection: Any, *values: dict) -> None:
    """Zero, in place, the sequence positions each column must not be explained by (a generated
    token's own and later ones: ``Target.hidden_positions``) in every ``[B, K, T, ...]`` result."""
    hide = getattr(selection.target, "hidden_positions", None)
    if hide is None:
        return
    for results in values:
        for name, value in results.items():
            if value.ndim < 3:
                continue
            hidden = hide(selection.payload, value.shape[2])
            if hidden is not None:
                mask = hidden.reshape(*hidden.shape, *(1,) * (value.ndim - 3))
                results[name] = np.where(mask, np.zeros((), value.dtype), value)


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


def _warn_zero_maps(attributions: np.ndarray, selection: Any, method: str) -> None:
    """Maps that are all zero (of the model's one input) are said once, the first named (a unit
    by its index as given, a tuple for a unit of a spatial layer)."""
    flat = attributions.reshape(*attributions.shape[:2], -1)
    dead = ~np.any(flat != 0, axis=-1)
    if dead.any():
        b, k = map(int, np.argwhere(dead)[0])
        info = selection.info[b][k] if len(selection.info) > b and len(selection.info[b]) > k else {}
        target = info["index"] if info.get("kind") == "unit" else int(selection.columns[b, k])
        warnings.warn(
            f"{method}: {int(dead.sum())} of {dead.size} attribution maps are all zero (first: input "
            f"{b}, target {target}). The score may not depend on the input "
            "(tf.stop_gradient, an unconnected output) or every path to it is inactive.",
            RuntimeWarning,
            stacklevel=4,  # explain's caller: _warn_zero_maps < explain_prepared < explain < caller
        )


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
