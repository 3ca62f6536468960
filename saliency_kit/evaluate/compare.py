"""Every method × every metric on the same inputs: :func:`compare`, and the table of metrics.

The table always has a ``"random"`` row (a seeded random map): a metric that cannot tell the
methods from it is not measuring anything about them on these inputs. Metric values depend on the
baseline and the perturbation each metric uses, so compare methods within a table, never values
across settings.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from . import axiomatic, complexity, deletion, faithfulness, localisation, perturbation, randomisation, robustness
from ._common import RANDOM, part_axes, seed_noise, to_pixels
from .explained import prepare, rerun_options

if TYPE_CHECKING:
    import keras

    from ..explanation import Explanation

__all__ = ["compare", "METRICS", "Metric", "explanation_of"]


@dataclass(frozen=True)
class Metric:
    """A metric of the table: its function, whether higher is better, whether it needs masks."""

    name: str
    function: Callable
    higher_is_better: bool
    needs_masks: bool = False
    family: str = ""


def _deletion(
    model: keras.Model,
    inputs: Any,
    expl: Any,
    targets: Any,
    *,
    masks: Any = None,
    seed: int = 0,
    batch_size: int = 32,
    **options: Any,
) -> np.ndarray:
    return deletion.deletion_insertion(
        model, inputs, expl, targets=_target_object(targets), seed=seed, batch_size=batch_size, **options
    )["deletion_auc"]


def _insertion(
    model: keras.Model,
    inputs: Any,
    expl: Any,
    targets: Any,
    *,
    masks: Any = None,
    seed: int = 0,
    batch_size: int = 32,
    **options: Any,
) -> np.ndarray:
    return deletion.deletion_insertion(
        model, inputs, expl, targets=_target_object(targets), seed=seed, batch_size=batch_size, **options
    )["insertion_auc"]


def _target_object(targets: Any) -> Any:
    """The target object ``compare`` was given (deletion curves score its payload), else None."""
    from ..targets import is_target

    return targets if is_target(targets) else None


def _pointing(
    model: keras.Model,
    inputs: Any,
    expl: Any,
    targets: Any,
    *,
    masks: Any = None,
    seed: int = 0,
    batch_size: int = 32,
    **options: Any,
) -> np.ndarray:
    return localisation.pointing_game(expl, masks, **options).astype(np.float64)


def _model_free(function: Any) -> Callable[..., np.ndarray]:
    def run(
        model: keras.Model,
        inputs: Any,
        expl: Any,
        targets: Any,
        *,
        masks: Any = None,
        seed: int = 0,
        batch_size: int = 32,
        **options: Any,
    ) -> np.ndarray:
        extra = {"masks": masks} if masks is not None else {}
        if expl.parts:  # the maps of the explained input (several: their attributions side by side)
            return function(model, inputs, expl, targets, seed=seed, batch_size=batch_size, **extra, **options)
        return function(maps=np.asarray(expl.maps), **extra, **options)

    return run


def _scored(function: Any) -> Callable[..., np.ndarray]:
    def run(
        model: keras.Model,
        inputs: Any,
        expl: Any,
        targets: Any,
        *,
        masks: Any = None,
        seed: int = 0,
        batch_size: int = 32,
        **options: Any,
    ) -> np.ndarray:
        value = function(model, inputs, expl, targets, seed=seed, batch_size=batch_size, **options)
        return value["score"] if isinstance(value, dict) else value

    return run


def _randomization(
    model: keras.Model,
    inputs: Any,
    expl: Any,
    targets: Any,
    *,
    masks: Any = None,
    seed: int = 0,
    batch_size: int = 32,
    **options: Any,
) -> np.ndarray:
    method = expl.method
    if method == RANDOM:  # a random map does not depend on the weights: the same map, entropy ratio 1
        return np.ones(expl.targets.shape)
    # the method as explained: its options, its score and the parts explained; a noisy method's seed
    # is randomization_test's own (the one compare seeds every method with)
    explained = {key: value for key, value in rerun_options(expl).items() if key != "seed"}
    explained["score"] = expl.options.get("score", "logits")
    if expl.parts:
        explained["attribute_to"] = list(expl.parts)
    steps = randomisation.randomization_test(
        model,
        inputs,
        method,
        targets,
        mode=options.pop("mode", "efficient_mprt"),
        seed=seed,
        **{"batch_size": batch_size, **explained, **options},
    )
    return np.asarray(steps[-1]["per_input"], dtype=np.float64)


#: The metrics :func:`compare` and ``saliency evaluate`` know, by name.
METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        Metric("faithfulness_correlation", _scored(faithfulness.faithfulness_correlation), True, family="faithfulness"),
        Metric("infidelity", _scored(faithfulness.infidelity), False, family="faithfulness"),
        Metric("road", _scored(perturbation.road), False, family="faithfulness"),
        Metric("monotonicity_correlation", _scored(faithfulness.monotonicity_correlation), True, family="faithfulness"),
        Metric("region_perturbation", _scored(perturbation.region_perturbation), True, family="faithfulness"),
        Metric("pixel_flipping", _scored(perturbation.pixel_flipping), False, family="faithfulness"),
        Metric("deletion", _deletion, False, family="faithfulness"),
        Metric("insertion", _insertion, True, family="faithfulness"),
        Metric("max_sensitivity", _scored(robustness.max_sensitivity), False, family="robustness"),
        Metric("avg_sensitivity", _scored(robustness.avg_sensitivity), False, family="robustness"),
        Metric("relative_input_stability", _scored(robustness.relative_input_stability), False, family="robustness"),
        Metric("pointing_game", _pointing, True, needs_masks=True, family="localisation"),
        Metric(
            "relevance_mass_accuracy", _model_free(localisation.relevance_mass_accuracy), True, True, "localisation"
        ),
        Metric(
            "relevance_rank_accuracy", _model_free(localisation.relevance_rank_accuracy), True, True, "localisation"
        ),
        Metric("top_k_intersection", _model_free(localisation.top_k_intersection), True, True, "localisation"),
        Metric(
            "attribution_localisation", _model_free(localisation.attribution_localisation), True, True, "localisation"
        ),
        Metric("auc", _model_free(localisation.auc), True, True, "localisation"),
        Metric("sparseness", _model_free(complexity.sparseness), True, family="complexity"),
        Metric("complexity", _model_free(complexity.complexity), False, family="complexity"),
        Metric("effective_complexity", _model_free(complexity.effective_complexity), False, family="complexity"),
        Metric("random_logit", _scored(randomisation.random_logit), False, family="randomisation"),
        Metric("randomization", _randomization, True, family="randomisation"),
        Metric("completeness", _scored(axiomatic.completeness), False, family="axiomatic"),
        Metric("non_sensitivity", _scored(axiomatic.non_sensitivity), False, family="axiomatic"),
        Metric("input_invariance", _scored(axiomatic.input_invariance), True, family="axiomatic"),
    )
}


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
    from ..api import explain
    from ..explanation import Explanation
    from ..parts import structure

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
    kinds = {
        part.name: "embedding" if part.embedding else "input" if part.input is not None else "layer"
        for part in parts.parts
    }
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
    targets: Any = "top1",
    masks: Any = None,
    seed: int = 0,
    batch_size: int = 32,
    metric_options: dict | None = None,
    method_options: dict | None = None,
    progress: Callable[[str, str], None] | None = None,
) -> dict:
    """Score every method with every metric on the same inputs.

    Each method is explained once (``"random"``, a seeded random map, is always added); every metric
    then scores that explanation (the robustness metrics re-run the method on perturbed inputs).

    Args:
        model, inputs, targets: as for :func:`saliency_kit.explain`.
        methods: method names (``saliency_kit.methods.names()``).
        metrics: names of :data:`METRICS` (localisation metrics need ``masks``).
        masks: bool ``[B, H, W]``, each input's object.
        metric_options: ``{metric: {option: value}}`` (e.g. ``{"max_sensitivity": {"nr_samples": 10}}``).
        method_options: ``{method: {option: value}}``.
        progress: called as ``progress(method, metric)`` after each cell.

    Returns:
        ``{"rows": [{"method", "metric", "mean", "std", "per_input", "higher_is_better"}, ...]}``:
        ``per_input`` the score of each input (mean over its targets; NaN where undefined),
        ``mean`` and ``std`` over inputs, ignoring NaN.

    Caveats: metric values depend on each metric's baseline and perturbation; robustness metrics
    do not flag a random or constant explanation by themselves; read each metric against the
    ``"random"`` row.
    """
    from ..targets import is_target

    metric_options, method_options = dict(metric_options or {}), dict(method_options or {})
    unknown = [m for m in metrics if m not in METRICS]
    if unknown:
        raise ValueError(f"unknown metric {unknown[0]!r}; choose from {', '.join(METRICS)}; received {unknown[0]!r}.")
    if isinstance(methods, str):
        methods = [methods]
    methods = list(dict.fromkeys([*methods, RANDOM]))
    needs = [m for m in metrics if METRICS[m].needs_masks]
    if needs and masks is None:
        raise ValueError(f"metric {needs[0]!r} needs masks (bool [B, H, W]); received masks=None.")
    rows = []
    for method in methods:
        expl = explanation_of(
            model, inputs, method, targets, seed=seed, batch_size=batch_size, **method_options.get(method, {})
        )
        for name in metrics:
            metric = METRICS[name]
            values = np.asarray(
                metric.function(
                    model,
                    inputs,
                    expl,
                    targets if is_target(targets) or callable(targets) else np.asarray(expl.targets),
                    masks=masks,
                    seed=seed,
                    batch_size=batch_size,
                    **dict(metric_options.get(name, {})),
                ),
                dtype=np.float64,
            )
            per_input = (
                np.nanmean(values, axis=1)
                if values.ndim == 2 and not np.all(np.isnan(values))
                else (values.mean(axis=1) if values.ndim == 2 else values)
            )
            finite = per_input[~np.isnan(per_input)]
            rows.append(
                {
                    "method": method,
                    "metric": name,
                    "mean": float(finite.mean()) if finite.size else float("nan"),
                    "std": float(finite.std()) if finite.size else float("nan"),
                    "per_input": [float(v) for v in per_input],
                    "higher_is_better": metric.higher_is_better,
                }
            )
            if progress is not None:
                progress(method, name)
    return {"rows": rows}
