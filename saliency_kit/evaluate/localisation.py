"""Localisation: does the map fall on the object? (Quantus 0.6.0 definitions and defaults.)

``masks`` are bool ``[B, H, W]`` (True on the object of each input), scored against the pixel maps
``[B, K, H, W]`` (every target of an input against the same object), or ``[B, K, H, W]`` (one
object per target); a region or box target gives its own (a box: the pixels inside it):

- :func:`pointing_game` — Zhang et al. (2016): does the map's maximum land on the object?
- :func:`relevance_mass_accuracy` — Arras et al. (2022): the share of the map's mass on the object.
- :func:`relevance_rank_accuracy` — Arras et al. (2022): of the ``|mask|`` highest-ranked pixels,
  the share on the object.
- :func:`top_k_intersection` — Theiner et al. (2021): of the ``k`` highest-ranked pixels, the share
  on the object.
- :func:`attribution_localisation` — Kohlbrenner et al. (2020): the share of the map's
  (magnitude) mass inside the object, optionally weighted by the object's size.
- :func:`auc` — Fawcett (2006): the ROC AUC of the map as a detector of the object's pixels.

Maps are normalised per map (Quantus normalises by the batch's maximum; the shares and ranks here
do not change, only thresholds would). Rankings break ties in a stable order (Quantus uses NumPy's
unstable quicksort order). An input with an empty mask scores NaN. These metrics need no model:
``auc(maps=maps, masks=masks)``. Every one reads its pixel maps through
:meth:`~saliency_kit.evaluate.shared.Shared.pixel_maps`; the keywords that are not its own are the
shared ``normalise`` and ``abs`` and, when a method is named, the method's options. They reward
maps that look like segmentations: a map can be faithful to a model that uses the context and
still localise badly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from scipy import stats

from ..explanation import Explanation
from ..targets.base import Target
from . import similarity as metrics
from ._common import check_int
from .registry import metric
from .shared import Shared

if TYPE_CHECKING:
    import keras

__all__ = [
    "pointing_game",
    "relevance_mass_accuracy",
    "relevance_rank_accuracy",
    "top_k_intersection",
    "attribution_localisation",
    "auc",
    "object_masks",
]


def object_masks(masks: Any, count: int, shape: tuple | None = None) -> np.ndarray:
    """``masks`` as an array; a target object gives its own object masks (a ``region`` its masks, one
    ``[H, W]`` for every input repeated ``count`` times; a ``box`` one mask per box,
    ``[count, K, *shape]``: the pixels inside it; ``shape`` the maps' ``(H, W)``)."""
    if isinstance(masks, Target):
        own = masks.object_masks(count, shape)
        if own is None:
            raise ValueError(
                f"a {masks.kind!r} target has no object masks: pass the masks (bool [B, H, W]); received {masks!r}."
            )
        return own
    if masks is None:
        raise ValueError(
            "masks are needed: bool [B, H, W] (True on each object) or the region target the "
            "explanation was made for; received None."
        )
    return np.asarray(masks)


def _maps_and_masks(
    name: str,
    model: keras.Model | None,
    inputs: Any,
    explanation_or_method: Any,
    targets: Any,
    maps: np.ndarray | None,
    masks: Any,
    shared: Shared,
) -> tuple[np.ndarray, np.ndarray]:
    """``(maps [B, K, F], masks bool [B, 1, F] or [B, K, F])`` flattened, the maps after Quantus'
    preprocessing (``shared``'s ``normalise`` and ``abs``)."""
    values = shared.pixel_maps(name, model, inputs, explanation_or_method, targets, maps, image=True)
    if masks is None:
        raise ValueError(f"{name} needs masks: bool [B, H, W], True on each input's object; received None.")
    masks = _checked_masks(name, masks, values.shape)
    per_target = masks.shape[1] if masks.ndim == values.ndim else 1
    return shared.flat(values), masks.reshape(len(masks), per_target, -1)


def _checked_masks(name: str, masks: Any, maps_shape: tuple) -> np.ndarray:
    """Bool ``[B, H, W]`` (one object per input) or ``[B, K, H, W]`` (one per target: boxes)."""
    masks = object_masks(masks, maps_shape[0], tuple(maps_shape[2:]))
    one, each = (maps_shape[0], *maps_shape[2:]), tuple(maps_shape)
    if masks.shape not in (one, each):
        raise ValueError(
            f"{name}: masks must be bool [B, H, W] = {one} (or one per target, {each}) to match the maps; "
            f"received shape {masks.shape}."
        )
    if masks.dtype != bool:
        raise TypeError(f"{name}: masks must be boolean (True on the object); received dtype {masks.dtype}.")
    return masks


def _ranked_on_object(a: np.ndarray, s: np.ndarray) -> np.ndarray:
    """``[B, K, F]`` bool: whether the i-th highest-ranked pixel of each map is on the object."""
    order = np.argsort(-a, axis=-1, kind="stable")
    return np.take_along_axis(np.broadcast_to(s, a.shape), order, axis=-1)


@metric("relevance_mass_accuracy", family="localisation", higher_is_better=True, needs_masks=True)
def relevance_mass_accuracy(
    model: keras.Model | None = None,
    inputs: Any = None,
    explanation_or_method: Any = "gradient",
    targets: Any = "top1",
    *,
    maps: np.ndarray | None = None,
    masks: Any = None,
    seed: int = 0,
    batch_size: int = 32,
    **options: Any,
) -> np.ndarray:
    """``Σ_{object} a / Σ a`` of each map: float ``[B, K]`` (1 = all of the mass on the object). With
    signed maps (``abs=False``, Quantus' default) negative mass outside can push it above 1. Shared
    options (:class:`~saliency_kit.evaluate.shared.Shared`): ``normalise=True``, ``abs=False``."""
    shared = Shared.read(options, seed=seed, batch_size=batch_size, normalise=True, abs=False)
    a, s = _maps_and_masks(
        "relevance_mass_accuracy", model, inputs, explanation_or_method, targets, maps, masks, shared
    )
    with np.errstate(invalid="ignore", divide="ignore"):
        result = (a * s).sum(-1) / a.sum(-1)
    result[np.broadcast_to(s.sum(-1) == 0, result.shape)] = np.nan
    return result


@metric("relevance_rank_accuracy", family="localisation", higher_is_better=True, needs_masks=True)
def relevance_rank_accuracy(
    model: keras.Model | None = None,
    inputs: Any = None,
    explanation_or_method: Any = "gradient",
    targets: Any = "top1",
    *,
    maps: np.ndarray | None = None,
    masks: Any = None,
    seed: int = 0,
    batch_size: int = 32,
    **options: Any,
) -> np.ndarray:
    """Of the ``n = |object|`` highest-ranked pixels of each map, the share on the object: float
    ``[B, K]`` in ``[0, 1]``. Shared options (:class:`~saliency_kit.evaluate.shared.Shared`):
    ``normalise=True``, ``abs=False``."""
    shared = Shared.read(options, seed=seed, batch_size=batch_size, normalise=True, abs=False)
    a, s = _maps_and_masks(
        "relevance_rank_accuracy", model, inputs, explanation_or_method, targets, maps, masks, shared
    )
    on_object = _ranked_on_object(a, s)
    sizes = s.sum(-1)  # [B, 1]
    first = np.arange(a.shape[-1]) < sizes[..., None]
    with np.errstate(invalid="ignore", divide="ignore"):
        result = (on_object & first).sum(-1) / np.broadcast_to(sizes, a.shape[:2])
    result[np.broadcast_to(sizes == 0, result.shape)] = np.nan
    return result


@metric("top_k_intersection", family="localisation", higher_is_better=True, needs_masks=True)
def top_k_intersection(
    model: keras.Model | None = None,
    inputs: Any = None,
    explanation_or_method: Any = "gradient",
    targets: Any = "top1",
    *,
    maps: np.ndarray | None = None,
    masks: Any = None,
    k: int = 1000,
    concept_influence: bool = False,
    seed: int = 0,
    batch_size: int = 32,
    **options: Any,
) -> np.ndarray:
    """Of the ``k`` highest-ranked pixels of each map (all of them when the map has fewer), the share
    on the object: float ``[B, K]``. ``concept_influence=True`` divides by the object's share of the
    image (``|object| / n``). Shared options (:class:`~saliency_kit.evaluate.shared.Shared`):
    ``normalise=True``, ``abs=False``."""
    k = check_int("k", k)
    shared = Shared.read(options, seed=seed, batch_size=batch_size, normalise=True, abs=False)
    a, s = _maps_and_masks("top_k_intersection", model, inputs, explanation_or_method, targets, maps, masks, shared)
    result = _ranked_on_object(a, s)[..., :k].mean(-1)
    sizes = np.broadcast_to(s.sum(-1), result.shape)
    if concept_influence:
        with np.errstate(invalid="ignore", divide="ignore"):
            result = result * a.shape[-1] / sizes
    result[sizes == 0] = np.nan
    return result


@metric("attribution_localisation", family="localisation", higher_is_better=True, needs_masks=True)
def attribution_localisation(
    model: keras.Model | None = None,
    inputs: Any = None,
    explanation_or_method: Any = "gradient",
    targets: Any = "top1",
    *,
    maps: np.ndarray | None = None,
    masks: Any = None,
    weighted: bool = False,
    positive_attributions: bool = False,
    seed: int = 0,
    batch_size: int = 32,
    **options: Any,
) -> np.ndarray:
    """``Σ_{object} a / (Σ a + 1e-9)`` of each map's magnitudes (Quantus' defaults), float ``[B, K]``;
    NaN for an empty object or a share above 1 (possible only with signed maps).

    ``positive_attributions=True`` clips the (preprocessed) map at 0; ``weighted=True`` multiplies by the
    object's share of the image ``|object| / (H·W)`` (Kohlbrenner et al.'s weighting; Quantus 0.6.0
    divides by the size of a slice of the batch instead of the image's). Shared options
    (:class:`~saliency_kit.evaluate.shared.Shared`): ``normalise=True``, ``abs=True``.
    """
    shared = Shared.read(options, seed=seed, batch_size=batch_size, normalise=True, abs=True)
    a, s = _maps_and_masks(
        "attribution_localisation", model, inputs, explanation_or_method, targets, maps, masks, shared
    )
    if positive_attributions:
        a = np.clip(a, 0, None)
    result = (a * s).sum(-1) / (a.sum(-1) + 1e-9)
    sizes = np.broadcast_to(s.sum(-1), result.shape)
    result[sizes == 0] = np.nan
    result[result > 1] = np.nan
    if weighted:
        result = result * sizes / a.shape[-1]
    return result


@metric("auc", family="localisation", higher_is_better=True, needs_masks=True)
def auc(
    model: keras.Model | None = None,
    inputs: Any = None,
    explanation_or_method: Any = "gradient",
    targets: Any = "top1",
    *,
    maps: np.ndarray | None = None,
    masks: Any = None,
    seed: int = 0,
    batch_size: int = 32,
    **options: Any,
) -> np.ndarray:
    """ROC AUC of each map as a score for "this pixel is on the object": float ``[B, K]`` (0.5 is
    chance, 1 a perfect ranking; ties count one half). NaN when the object is empty or the whole image.
    Shared options (:class:`~saliency_kit.evaluate.shared.Shared`): ``normalise=True``, ``abs=False``."""
    shared = Shared.read(options, seed=seed, batch_size=batch_size, normalise=True, abs=False)
    a, s = _maps_and_masks("auc", model, inputs, explanation_or_method, targets, maps, masks, shared)
    result = np.full(a.shape[:2], np.nan)
    for b in range(a.shape[0]):
        positives = int(s[b, 0].sum())
        negatives = a.shape[-1] - positives
        if positives == 0 or negatives == 0:
            continue
        for k in range(a.shape[1]):
            ranks = stats.rankdata(a[b, k])  # average ranks: ties count one half (Mann-Whitney U)
            result[b, k] = (ranks[s[b, 0]].sum() - positives * (positives + 1) / 2) / (positives * negatives)
    return result


# --------------------------------------------------------------------------------------------
# Pointing game (Zhang et al. 2016)
# --------------------------------------------------------------------------------------------
@metric("pointing_game", family="localisation", higher_is_better=True, needs_masks=True)
def pointing_game(
    model: Any = None,
    inputs: Any = None,
    explanation_or_method: Any = "gradient",
    targets: Any = "top1",
    *,
    maps: np.ndarray | None = None,
    masks: Any = None,
    tolerance: float = 0,
    seed: int = 0,
    batch_size: int = 32,
    **options: Any,
) -> np.ndarray:
    """Whether each map's maximum falls on the object: bool ``[B, K]`` (the metric ``pointing_game``:
    1.0 where it hits, 0.0 where it misses).

    Called as every metric is, ``pointing_game(model, inputs, explanation_or_method, targets,
    masks=masks)`` (the maps as the other localisation metrics read them, ``[B, K, H, W]``), or on
    maps alone: ``pointing_game(maps=maps, masks=masks)``, or ``pointing_game(explanation, masks)``
    with an :class:`saliency_kit.Explanation` (its ``maps``) or an array of maps ``[B, K, H, W]``
    first.

    Args:
        masks: bool ``[B, H, W]``, the object of each input (or ``[B, K, H, W]``, one per target);
            or the ``saliency_kit.targets.region`` the explanation was made for, whose own masks are
            the objects (given masks only: ``"predicted"`` ones are known only to the model); or
            the ``saliency_kit.targets.box``, each box the object of its own target.
        tolerance: a hit may miss the object by up to this many pixels (Euclidean distance; the mask
            is dilated with ``scipy.ndimage.distance_transform_edt``).
        seed, batch_size, options: as every metric's (the method's options when one is named).

    Ties: when several pixels share a map's maximum, it is a hit only if *all* of them are on the
    (dilated) object, so a flat map (e.g. all zeros) cannot score. Non-finite map values are ignored.
    An empty mask is a miss.

    With ``tolerance=0`` and one maximum per map this is Quantus 0.6.0's ``PointingGame``. Quantus
    has no tolerance, counts a tie as a hit if *any* tied pixel is on the object (a flat map hits
    every object) and scores an empty mask as a hit (the NaN it means is written into a bool array).
    """
    if _maps_first(model) and maps is None:  # pointing_game(explanation or maps, masks)
        if masks is None:
            masks = inputs
        elif inputs is not None:
            raise TypeError("pointing_game(explanation, masks): masks given twice; received masks= too.")
        model, inputs, maps = None, None, np.asarray(getattr(model, "maps", model))
    if maps is not None and model is None and inputs is None:
        return _pointing(maps, masks, tolerance)
    shared = Shared.read(options, seed=seed, batch_size=batch_size)
    values = shared.pixel_maps("pointing_game", model, inputs, explanation_or_method, targets, maps, image=True)
    return _pointing(values, masks, tolerance)


def _maps_first(first: Any) -> bool:
    """Whether the first argument of :func:`pointing_game` is maps (an Explanation or an array), not a model."""
    return isinstance(first, (Explanation, np.ndarray, list, tuple))


def _pointing(maps: Any, masks: Any, tolerance: float) -> np.ndarray:
    """The hits of :func:`pointing_game` of the maps ``[B, K, H, W]``: bool ``[B, K]``."""
    maps = np.asarray(maps)
    if maps.ndim != 4:
        raise ValueError(f"maps must be [B, K, H, W]; received shape {maps.shape}.")
    masks = _checked_masks("pointing_game", masks, maps.shape)
    hits = np.zeros(maps.shape[:2], dtype=bool)
    for b in range(maps.shape[0]):
        shared = metrics.dilate(masks[b], tolerance) if masks.ndim == 3 else None  # one object per input
        for k in range(maps.shape[1]):
            region = shared if shared is not None else metrics.dilate(masks[b, k], tolerance)
            hits[b, k] = metrics.points_at(maps[b, k], region)
    return hits
