"""What a metric reads of a :class:`~saliency_kit.evaluate.explained.Scored`: its attributions
flattened beside its inputs, the axes of its image, and the pixel maps the model-free metrics
score."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..explanation import Explanation
from ._common import maps_only, preprocess, several_parts_error
from .explained import Scored, prepare

if TYPE_CHECKING:
    import keras

__all__ = ["flat_elements", "pixel_maps", "image_channel_axis", "spatial_shape", "spatial_to_elements"]


def flat_elements(scored: Scored, *, normalise: bool, absolute: bool) -> tuple[np.ndarray, np.ndarray]:
    """``(a, x)``: the maps :func:`preprocess`-ed and flattened, float64 ``[B, K, E]``, and the
    inputs flattened, float64 ``[B, E]`` (``E`` elements each, in the same order)."""
    a = preprocess(scored.elements, normalise=normalise, absolute=absolute)
    return a.reshape(*a.shape[:2], -1), scored.x.reshape(len(scored.x), -1).astype(np.float64)


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
    image: bool = False,
) -> np.ndarray:
    """The ``[B, K, ...]`` pixel maps a model-free metric scores: ``maps`` when given, an
    Explanation's own maps (of its one part), else the pixel view of whatever :func:`prepare` makes
    of the other arguments (several parts: their attributions flattened side by side, refused when
    ``image``, for a metric that needs one image's axes)."""
    if maps is not None:
        if model is not None or inputs is not None:
            raise ValueError(f"{name}: give either maps= or (model, inputs, explanation); received both.")
        values = maps_only(maps, name)
        return values[:, None] if values.ndim == 3 else values
    if model is None or inputs is None:
        raise ValueError(f"{name} needs (model, inputs, explanation_or_method) or maps=; received neither.")

    if isinstance(explanation_or_method, Explanation):
        named = list(explanation_or_method.parts or [])
        if not named:
            return np.asarray(explanation_or_method.maps, dtype=np.float64)
        if len(named) == 1:
            return np.asarray(explanation_or_method.map_of(named[0]), dtype=np.float64)
        if image:
            raise several_parts_error(name, named)
    scored = prepare(
        model, inputs, explanation_or_method, targets, seed=seed, batch_size=batch_size, method_options=method_options
    )
    if image and scored.packed:
        raise several_parts_error(name, scored.names)
    return scored.pixels


def image_channel_axis(scored: Scored, metric: str = "this metric") -> int:
    """The channel axis of one image input (``ValueError`` for other inputs)."""
    if scored.packed:
        raise several_parts_error(metric, scored.names)
    if scored.channel_axis is None:
        what = f"the explained part {scored.names[0]!r}" if scored.names else "inputs"
        raise ValueError(
            f"{metric} perturbs image regions: it needs image inputs [B, H, W, C] (or channels "
            f"first); received {what} of shape {scored.x.shape}."
        )
    return scored.channel_axis


def spatial_shape(scored: Scored, metric: str = "this metric") -> tuple[int, int]:
    """``(H, W)`` of image inputs (``ValueError`` for other inputs)."""
    shape = list(scored.x.shape[1:])
    del shape[image_channel_axis(scored, metric)]
    height, width = shape
    return height, width


def spatial_to_elements(mask: np.ndarray, scored: Scored) -> np.ndarray:
    """A ``[..., H, W]`` pixel mask or map broadcast over the channels of one input: ``[..., *input]``."""
    axis = mask.ndim - 2 + (image_channel_axis(scored) % 3)
    return np.broadcast_to(np.expand_dims(mask, axis), (*mask.shape[:-2], *scored.x.shape[1:]))
