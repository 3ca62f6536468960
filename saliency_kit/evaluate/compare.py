"""Every method × every declared metric on the same inputs: :func:`compare`.

The table always has a ``"random"`` row (a seeded random map): a metric that cannot tell the
methods from it is not measuring anything about them on these inputs. Metric values depend on the
baseline and the perturbation each metric uses, so compare methods within a table, never values
across settings.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..explanation import Explanation
from ..targets import is_target
from . import registry
from ._common import RANDOM, part_axes, seed_noise, to_pixels
from .explained import prepare

if TYPE_CHECKING:
    import keras

__all__ = ["compare", "iter_compare", "explanation_of"]


def explanation_of(
    model: keras.Model,
    inputs: Any,
    method: Any,
    targets: Any = "top1",
    *,
    seed: int = 0,
    batch_size: int = 32,
    **options: Any,
) -> Explanation:
    """:func:`saliency_kit.explain`, or for ``"random"`` an Explanation holding the seeded random map
    (uniform per element; its map the channel sum), of the parts ``explain`` would explain (in the
    inputs' structure) for a model with several inputs or token ids."""
    from ..pipeline.api import explain
    from ..pipeline.parts import structure

    if method != RANDOM:
        seed_noise(method, options, seed)
        return explain(model, inputs, method, targets, batch_size=batch_size, **options)
    scored = prepare(model, inputs, RANDOM, targets, seed=seed, batch_size=batch_size, method_options=options)
    attributions, targets_of = scored.elements.astype(np.float32), scored.targets
    info = None if scored.selection is None else scored.selection.info
    common: dict[str, Any] = dict(
        targets=targets_of, scores=np.zeros(targets_of.shape, np.float32), method=RANDOM, target_info=info
    )
    if scored.parts is None:
        maps = to_pixels(attributions, scored.channel_axis).astype(np.float32)
        return Explanation(attributions=attributions, maps=maps, options={"seed": seed}, **common)
    parts = scored.parts
    values = dict(zip(scored.names, scored.space.unpack(attributions)))
    axes = part_axes(model, parts.parts, parts.points)
    part_maps = {  # as explain's: an image's channel sum, other parts summed over their last axis
        part.name: to_pixels(values[part.name], axis) if axis is not None else _last_summed(values[part.name])
        for part, axis in zip(parts.parts, axes)
    }
    kinds = {part.name: part.kind for part in parts.parts}
    return Explanation(
        attributions=structure(parts, values),
        maps=structure(parts, part_maps),
        options={"seed": seed},
        parts=kinds,
        **common,
    )


def _last_summed(values: np.ndarray) -> np.ndarray:
    return values.sum(axis=-1) if values.ndim > 2 else values


def compare(
    model: keras.Model,
    inputs: Any,
    methods: Sequence[str],
    metrics: Sequence[str],
    *,
    progress: Callable[[str, str], None] | None = None,
    **settings: Any,
) -> dict:
    """Score every method with every metric on the same inputs: the rows of :func:`iter_compare`.

    Each method is explained once (``"random"``, a seeded random map, is always added); every metric
    then scores that explanation (the robustness metrics re-run the method on perturbed inputs).

    Args:
        model, inputs, methods, metrics: as for :func:`iter_compare`.
        progress: called as ``progress(method, metric)`` after each cell.
        settings: :func:`iter_compare`'s keywords: ``targets="top1"``, ``masks=None``, ``seed=0``,
            ``batch_size=32``, ``class_names=None``, ``metric_options=None``, ``method_options=None``.

    Returns:
        ``{"rows": [{"method", "metric", "mean", "std", "per_input", "higher_is_better"}, ...]}``:
        ``per_input`` the score of each input (mean over its targets; NaN where undefined),
        ``mean`` and ``std`` over inputs, ignoring NaN.

    Caveats: metric values depend on each metric's baseline and perturbation; robustness metrics
    do not flag a random or constant explanation by themselves; read each metric against the
    ``"random"`` row.
    """
    rows = []
    for row in iter_compare(model, inputs, methods, metrics, **settings):
        rows.append(row)
        if progress is not None:
            progress(row["method"], row["metric"])
    return {"rows": rows}


def iter_compare(
    model: keras.Model,
    inputs: Any,
    methods: Sequence[str],
    metrics: Sequence[str],
    *,
    targets: Any = "top1",
    masks: Any = None,
    seed: int = 0,
    batch_size: int = 32,
    metric_options: dict | None = None,
    method_options: dict | None = None,
    **named: Any,
) -> Iterator[dict]:
    """The rows of :func:`compare`, one cell (method, metric) at a time, methods in order.

    Args:
        model, inputs, targets: as for :func:`saliency_kit.explain`.
        methods: method names (``saliency_kit.methods.names()``).
        metrics: names of declared metrics (``saliency_kit.evaluate.metrics()``; those that need
            masks, the localisation metrics, need ``masks``).
        masks: bool ``[B, H, W]``, each input's object.
        seed, batch_size: every metric's and method's (the random map's and noisy methods' seed).
        metric_options: ``{metric: {option: value}}`` (e.g. ``{"max_sensitivity": {"nr_samples": 10}}``).
        method_options: ``{method: {option: value}}``.
        named: ``class_names=``, the names class targets may use (a class, or a region's or box's
            classes by name), as ``explain``'s; given to every method and metric.

    Yields:
        ``{"method", "metric", "mean", "std", "per_input", "higher_is_better"}`` (see :func:`compare`).
    """
    metric_options, method_options = dict(metric_options or {}), dict(method_options or {})
    if set(named) - {"class_names"}:
        raise TypeError(f"iter_compare() takes class_names= besides its arguments; received {sorted(named)}.")
    declared = {name: registry.get(name) for name in metrics}
    if isinstance(methods, str):
        methods = [methods]
    methods = list(dict.fromkeys([*methods, RANDOM]))
    needs = [m for m in metrics if declared[m].needs_masks]
    if needs and masks is None:
        raise ValueError(f"metric {needs[0]!r} needs masks (bool [B, H, W]); received masks=None.")
    for method in methods:
        expl = explanation_of(
            model, inputs, method, targets, seed=seed, batch_size=batch_size, **named, **method_options.get(method, {})
        )
        for name in metrics:
            metric = declared[name]
            values = metric.score(
                model,
                inputs,
                expl,
                targets if is_target(targets) or callable(targets) else np.asarray(expl.targets),
                masks=masks,
                seed=seed,
                batch_size=batch_size,
                options={**named, **metric_options.get(name, {})},
            )
            per_input = (
                np.nanmean(values, axis=1)
                if values.ndim == 2 and not np.all(np.isnan(values))
                else (values.mean(axis=1) if values.ndim == 2 else values)
            )
            finite = per_input[~np.isnan(per_input)]
            yield {
                "method": method,
                "metric": name,
                "mean": float(finite.mean()) if finite.size else float("nan"),
                "std": float(finite.std()) if finite.size else float("nan"),
                "per_input": [float(v) for v in per_input],
                "higher_is_better": metric.higher_is_better,
            }
