"""What every metric shares: the explanation to score, its targets, its two views, the baselines.

A metric is called as ``NAME(model, inputs, explanation_or_method, targets, *, seed, batch_size,
**options)``. :func:`prepare` turns those arguments into a :class:`Scored`:

- an :class:`~saliency_kit.Explanation` is scored as it is (its targets are the targets);
- a method name is run with :func:`saliency_kit.explain` (``targets`` resolved the way ``explain``
  resolves them); ``"random"`` is a seeded random map, the meta-check every table should hold;
- a bare array of attributions ``[B, K, *input]`` (or ``[B, *input]``) is scored with ``targets``.

Two views of an attribution are used, as the metric's definition needs:

- ``elements [B, K, *input]``: one value per input element (a CAM map ``[B, K, H, W]`` is
  broadcast over the channels) — for the metrics that perturb input elements;
- ``pixels [B, K, H, W]`` (images) — the method's own map (``Explanation.maps``; the channel sum for
  a bare array) — for the metrics that rank or localise pixels. For non-image inputs both views are
  the elements.

Every random draw comes from a generator keyed by ``(seed, metric, input position)``
(:mod:`.draws`), and every model evaluation goes through the engine's compiled batched forward
(:mod:`.scoring`), so results do not depend on ``batch_size`` nor on how the inputs are grouped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .draws import random_attributions

if TYPE_CHECKING:
    import keras

__all__ = [
    "RANDOM",
    "Scored",
    "prepare",
    "normalise_by_max",
    "baseline_values",
    "to_pixels",
    "check_int",
    "check_float",
    "spatial_shape",
    "spatial_to_elements",
    "preprocess",
    "flat_elements",
    "is_random_baseline",
    "seed_noise",
    "maps_only",
    "pixel_maps",
    "image_channel_axis",
]

#: The name of the seeded random explanation (the meta-check method of :func:`compare`).
RANDOM = "random"


@dataclass
class Scored:
    """An explanation ready to be scored (arrays float64 unless said).

    Attributes:
        model: the Keras model (None for the model-free metrics on bare maps).
        x: ``[B, *input]`` checked model inputs (the model's dtype).
        elements: ``[B, K, *input]`` attributions per input element.
        pixels: ``[B, K, H, W]`` for images, else the same as ``elements``.
        targets: int64 ``[B, K]`` class (or ``score_fn`` column) of each attribution.
        channel_axis: the channel axis of one input (``-1`` or ``0``) for images, else None.
        score, score_fn, batch_size: how the model's scores are read (as for ``explain``).
        softmax: score the softmax of the scores (Quantus' ``softmax=True``) rather than the scores.
        method, options: what re-runs the explainer on new inputs (None for a bare array).
        seed: the metric's seed.
    """

    model: object
    x: np.ndarray
    elements: np.ndarray
    pixels: np.ndarray
    targets: np.ndarray
    channel_axis: int | None = None
    score: str = "logits"
    score_fn: Callable | None = None
    batch_size: int = 32
    method: str | Callable | None = None
    options: dict = field(default_factory=dict)
    seed: int = 0
    softmax: bool = False

    def explain(self, inputs: np.ndarray, targets: np.ndarray, keys: np.ndarray) -> np.ndarray:
        """Element attributions ``[N, K, *input]`` of the same method for new ``inputs`` (one batched
        call), ``targets`` int ``[N, K]``, ``keys`` one noise key per input (seeded methods)."""
        if self.method is None:
            raise ValueError(
                "this metric re-runs the explainer on perturbed inputs: give a method name (e.g. "
                "'gradient') or an Explanation, not a bare attribution array; received an array."
            )
        if self.method == RANDOM:
            return random_attributions(inputs.shape, targets, keys, self.seed)
        if callable(self.method):
            values = np.asarray(self.method(self.model, inputs, targets), dtype=np.float64)
            return _element_view(values, inputs, self.channel_axis, "the explainer's attributions")
        from ..api import explain

        target_arg = self.score_fn if self.score_fn is not None else targets
        expl = explain(
            self.model,
            inputs,
            self.method,
            target_arg,
            score=self.score,
            batch_size=self.batch_size,
            input_keys=keys,
            with_scores=False,
            **self.options,
        )
        return _element_view(
            np.asarray(expl.attributions, dtype=np.float64), inputs, self.channel_axis, "the explanation's attributions"
        )


def check_int(name: str, value: Any, minimum: int = 1) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int >= {minimum}; received {value!r}.")
    if value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}; received {value!r}.")
    return int(value)


def check_float(name: str, value: Any, *, positive: bool = False) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a number; received {value!r}.")
    if positive and not value > 0:
        raise ValueError(f"{name} must be > 0; received {value!r}.")
    return float(value)


def normalise_by_max(a: np.ndarray) -> np.ndarray:
    """Each map ``a[b, k]`` divided by its own largest magnitude (an all-zero map stays zero).

    Quantus' ``normalise_by_max`` divides by the maximum over the whole batch, so a score would depend
    on the other inputs; here each input and target is normalised on its own."""
    a = np.asarray(a, dtype=np.float64)
    peak = np.abs(a.reshape(*a.shape[:2], -1)).max(axis=-1) if a.size else np.zeros(a.shape[:2])
    peak = np.where(peak == 0, 1.0, peak)
    return a / peak.reshape(*peak.shape, *([1] * (a.ndim - 2)))


def preprocess(a: np.ndarray, *, normalise: bool, absolute: bool) -> np.ndarray:
    """Quantus' order: normalise (per map), then take the magnitude."""
    a = np.asarray(a, dtype=np.float64)
    if normalise:
        a = normalise_by_max(a)
    return np.abs(a) if absolute else a


def flat_elements(scored: Scored, *, normalise: bool, absolute: bool) -> tuple[np.ndarray, np.ndarray]:
    """``(a, x)``: the maps :func:`preprocess`-ed and flattened, float64 ``[B, K, E]``, and the
    inputs flattened, float64 ``[B, E]`` (``E`` elements each, in the same order)."""
    a = preprocess(scored.elements, normalise=normalise, absolute=absolute)
    return a.reshape(*a.shape[:2], -1), scored.x.reshape(len(scored.x), -1).astype(np.float64)


def baseline_values(
    baseline: Any, flat_input: np.ndarray, count: int, generator: np.random.Generator | None
) -> np.ndarray:
    """The values that replace ``count`` features of one input (``flat_input``), as Quantus' names:
    ``"black"`` the input's minimum, ``"white"`` its maximum, ``"mean"`` its mean, ``"uniform"`` one
    draw from U(0, 1) for all of them, a number, or an array of ``count`` values."""
    if isinstance(baseline, str):
        name = baseline.lower()
        if name == "black":
            return np.full(count, flat_input.min())
        if name == "white":
            return np.full(count, flat_input.max())
        if name == "mean":
            return np.full(count, flat_input.mean())
        if name == "uniform":
            if generator is None:
                raise ValueError("baseline 'uniform' needs a seeded generator.")
            return np.full(count, generator.uniform(0.0, 1.0))
        raise ValueError(
            f"baseline must be 'black', 'white', 'mean', 'uniform', a number or an array; received {baseline!r}."
        )
    value = np.asarray(baseline, dtype=np.float64)
    if value.ndim == 0:
        return np.full(count, float(value))
    if value.shape != (count,):
        raise ValueError(
            f"an array baseline must hold one value per replaced feature ({count}); received shape {value.shape}."
        )
    return value


def is_random_baseline(baseline: Any) -> bool:
    return isinstance(baseline, str) and baseline.lower() == "uniform"


def to_pixels(elements: np.ndarray, channel_axis: int | None) -> np.ndarray:
    """``[B, K, *input]`` -> the pixel view: the channel sum for images, else unchanged."""
    if channel_axis is None:
        return elements
    return elements.sum(axis=2 + channel_axis if channel_axis >= 0 else -1)


def _element_view(values: np.ndarray, x: np.ndarray, channel_axis: int | None, what: str) -> np.ndarray:
    if values.shape[0] != x.shape[0]:
        raise ValueError(f"{what} must hold one entry per input ({x.shape[0]}); received shape {values.shape}.")
    if values.shape[2:] == x.shape[1:]:
        return values
    if values.ndim == x.ndim and values.shape[1:] == x.shape[1:]:
        return values[:, None]
    if channel_axis is not None:
        spatial = tuple(s for i, s in enumerate(x.shape[1:]) if i != channel_axis % (x.ndim - 1))
        if values.shape[2:] == spatial:  # CAM maps: broadcast over the channels
            axis = 2 + (channel_axis % (x.ndim - 1))
            return np.broadcast_to(np.expand_dims(values, axis), (*values.shape[:2], *x.shape[1:]))
    raise ValueError(
        f"{what} must be [B, K, *input] = [{x.shape[0]}, K, {', '.join(map(str, x.shape[1:]))}] "
        f"(or CAM maps [B, K, H, W]); received shape {values.shape}."
    )


def _image_channel_axis(model: keras.Model, x: np.ndarray) -> int | None:
    if x.ndim != 4:
        return None
    from .. import engine

    return engine.channel_axis(model, x)


def prepare(
    model: keras.Model,
    inputs: Any,
    explanation_or_method: Any,
    targets: Any = "top1",
    *,
    seed: int = 0,
    batch_size: int = 32,
    score: str = "logits",
    softmax: bool = False,
    method_options: dict | None = None,
) -> Scored:
    """Resolve a metric's arguments into a :class:`Scored` (see the module docstring)."""
    from .. import engine
    from ..api import explain, resolve_targets
    from ..engine import check_score
    from ..explanation import Explanation

    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be an int; received {seed!r}.")
    _refuse_target_objects(targets, explanation_or_method)
    method_options = dict(method_options or {})
    check_score(score)
    batch_size = engine.check_batch_size(batch_size)
    x = engine.check_inputs(model, inputs)
    channel_axis = _image_channel_axis(model, x)
    score_fn = targets if callable(targets) and not isinstance(targets, str) else None
    if softmax and score_fn is not None:
        raise ValueError(
            "softmax=True scores the softmax of the model's classes: give class targets or "
            "softmax=False; received a score function as targets."
        )
    common = dict(
        model=model,
        x=x,
        channel_axis=channel_axis,
        score=score,
        score_fn=score_fn,
        batch_size=batch_size,
        seed=int(seed),
        softmax=bool(softmax),
    )

    if isinstance(explanation_or_method, Explanation):
        expl = explanation_or_method
        if len(expl) != len(x):
            raise ValueError(f"the explanation must be of the {len(x)} inputs given; received one of {len(expl)}.")
        elements = _element_view(
            np.asarray(expl.attributions, dtype=np.float64), x, channel_axis, "explanation.attributions"
        )
        pixels = np.asarray(expl.maps, dtype=np.float64) if channel_axis is not None else elements
        options = {k: v for k, v in expl.options.items() if k != "score"}
        return Scored(
            elements=elements,
            pixels=pixels,
            targets=np.asarray(expl.targets, dtype=np.int64),
            method=expl.method,
            options=options,
            **{**common, "score": expl.options.get("score", score)},
        )

    if isinstance(explanation_or_method, str) and explanation_or_method != RANDOM:
        seed_noise(explanation_or_method, method_options, seed)
        expl = explain(
            model,
            x,
            explanation_or_method,
            targets,
            score=score,
            batch_size=batch_size,
            with_scores=False,
            **method_options,
        )
        elements = _element_view(
            np.asarray(expl.attributions, dtype=np.float64), x, channel_axis, "explanation.attributions"
        )
        pixels = np.asarray(expl.maps, dtype=np.float64) if channel_axis is not None else elements
        return Scored(
            elements=elements,
            pixels=pixels,
            targets=np.asarray(expl.targets, dtype=np.int64),
            method=explanation_or_method,
            options=method_options,
            **common,
        )

    resolved = resolve_targets(model, x, targets, score=score, batch_size=batch_size)
    if isinstance(explanation_or_method, str):  # RANDOM
        elements = random_attributions(x.shape, resolved, np.arange(len(x)), seed)
        return Scored(
            elements=elements, pixels=to_pixels(elements, channel_axis), targets=resolved, method=RANDOM, **common
        )
    if callable(explanation_or_method):
        elements = _element_view(
            np.asarray(explanation_or_method(model, x, resolved), dtype=np.float64),
            x,
            channel_axis,
            "the explainer's attributions",
        )
        return Scored(
            elements=elements,
            pixels=to_pixels(elements, channel_axis),
            targets=resolved,
            method=explanation_or_method,
            **common,
        )
    try:
        values = np.asarray(explanation_or_method, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(
            "explanation_or_method must be an Explanation, a method name, 'random', a callable "
            "explainer or an attribution array; received "
            f"{type(explanation_or_method).__name__}."
        ) from None
    elements = _element_view(values, x, channel_axis, "the attribution array")
    if elements.shape[1] != resolved.shape[1]:
        raise ValueError(
            f"the attribution array has {elements.shape[1]} maps per input but targets give "
            f"{resolved.shape[1]}; received targets {targets!r}."
        )
    return Scored(elements=elements, pixels=to_pixels(elements, channel_axis), targets=resolved, **common)


def _refuse_target_objects(targets: Any, explanation_or_method: Any) -> None:
    """These metrics score classes (or a score function's columns) of a ``[B, C]`` output; target
    objects (``region``, ``box``, ``output``, ``unit``) are refused rather than scored wrongly."""
    from ..targets import is_target

    info = getattr(explanation_or_method, "target_info", None) or []
    kinds = {column.get("kind") for row in info for column in row if isinstance(column, dict)}
    if is_target(targets) or kinds - {"class", "callable", None}:
        raise ValueError(
            "this metric scores class targets of a classifier; target objects (region, box, output, "
            "unit) are taken by deletion_insertion and pointing_game; received "
            f"{targets if is_target(targets) else 'an explanation of ' + ', '.join(sorted(map(str, kinds)))}."
        )


def seed_noise(method: str, method_options: dict, seed: int) -> None:
    """A noisy method (SmoothGrad, ...) gets ``seed=seed`` unless given, so a metric is reproducible."""
    from ..methods import get as get_method

    chosen = get_method(method)
    if hasattr(chosen, "seed_option"):  # the registry names a method's seed option
        option = chosen.seed_option(method_options)
    else:
        option = "seed" if "seed" in chosen.accepted(method_options) else None
    if option is not None and method_options.get(option) is None:
        method_options[option] = seed


def maps_only(maps: np.ndarray, name: str) -> np.ndarray:
    """A bare ``maps`` argument as float64 ``[B, K, ...]`` (``[B, ...]`` means one map per input)."""
    values = np.asarray(maps, dtype=np.float64)
    if values.ndim < 2:
        raise ValueError(f"{name}: maps must be [B, K, ...] or [B, ...]; received shape {values.shape}.")
    if not np.all(np.isfinite(values)):
        raise ValueError(f"{name}: maps must be finite; received NaN or infinite values.")
    return values


def pixel_maps(
    name: str,
    model: keras.Model,
    inputs: Any,
    explanation_or_method: Any,
    targets: Any,
    maps: np.ndarray | None,
    *,
    seed: int,
    batch_size: int,
    method_options: Any,
) -> np.ndarray:
    """The ``[B, K, ...]`` pixel maps a model-free metric scores: ``maps`` when given, else the pixel
    view of whatever :func:`prepare` makes of the other arguments."""
    if maps is not None:
        if model is not None or inputs is not None:
            raise ValueError(f"{name}: give either maps= or (model, inputs, explanation); received both.")
        values = maps_only(maps, name)
        return values[:, None] if values.ndim == 3 else values
    if model is None or inputs is None:
        raise ValueError(f"{name} needs (model, inputs, explanation_or_method) or maps=; received neither.")
    from ..explanation import Explanation

    if isinstance(explanation_or_method, Explanation) and inputs is not None:
        return np.asarray(explanation_or_method.maps, dtype=np.float64)
    return prepare(
        model, inputs, explanation_or_method, targets, seed=seed, batch_size=batch_size, method_options=method_options
    ).pixels


def image_channel_axis(scored: Scored) -> int:
    """The channel axis of one image input (``ValueError`` for other inputs)."""
    if scored.channel_axis is None:
        raise ValueError(
            f"this metric perturbs image regions: it needs image inputs [B, H, W, C] (or channels "
            f"first); received inputs of shape {scored.x.shape}."
        )
    return scored.channel_axis


def spatial_shape(scored: Scored) -> tuple[int, int]:
    """``(H, W)`` of image inputs (``ValueError`` for other inputs)."""
    shape = list(scored.x.shape[1:])
    del shape[image_channel_axis(scored)]
    height, width = shape
    return height, width


def spatial_to_elements(mask: np.ndarray, scored: Scored) -> np.ndarray:
    """A ``[..., H, W]`` pixel mask or map broadcast over the channels of one input: ``[..., *input]``."""
    axis = mask.ndim - 2 + (image_channel_axis(scored) % 3)
    return np.broadcast_to(np.expand_dims(mask, axis), (*mask.shape[:-2], *scored.x.shape[1:]))
