"""What every metric shares: checks of its options, Quantus' preprocessing of the maps, the
baselines that replace removed features, the two views of an attribution (and the parts of
several explained inputs), the pixel maps of the model-free metrics and the axes of one image.

Two views of an attribution are used, as the metric's definition needs:

- ``elements [B, K, *input]``: one value per input element (a CAM map ``[B, K, H, W]`` is
  broadcast over the channels, :func:`element_view`) — for the metrics that perturb input elements;
- ``pixels [B, K, H, W]`` (images) — the method's own map (``Explanation.maps``; the channel sum for
  a bare array) — for the metrics that rank or localise pixels. For non-image inputs both views are
  the elements.

What a metric is given is prepared in :mod:`.explained` (:func:`~.explained.prepare`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .. import engine
from ..methods import get as get_method

if TYPE_CHECKING:
    import keras


__all__ = [
    "RANDOM",
    "element_view",
    "part_values",
    "part_elements",
    "part_axes",
    "normalise_by_max",
    "baseline_values",
    "to_pixels",
    "check_int",
    "check_float",
    "preprocess",
    "is_random_baseline",
    "METHOD_BASELINE",
    "method_baseline",
    "seed_noise",
    "maps_only",
    "several_parts_error",
]

#: The name of the seeded random explanation (the meta-check method of :func:`compare`).
RANDOM = "random"


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


#: ``perturb_baseline=`` of a metric measured from the explaining method's own baseline.
METHOD_BASELINE = "method"


def method_baseline(method: Any, options: Any, x: np.ndarray, parts: Any = None) -> np.ndarray | None:
    """The point the method ``method`` started from, as one row of what a metric perturbs ``x [B,
    *x]``: its ``baseline`` option as given in ``options`` (or recorded by the Explanation), else
    its declared default, broadcast to ``x.shape[1:]``. None when the method declares no
    ``baseline`` (the plain gradient, a bare array, ``"random"``, a callable explainer).
    ``ValueError`` when the baseline is not one row of ``x``'s space (token ids' baselines are
    embeddings; a baseline given per input): the metric then needs ``perturb_baseline=``."""
    if not isinstance(method, str) or method == RANDOM:
        return None
    try:
        accepted = get_method(method).accepted(dict(options))
    except (TypeError, ValueError):
        return None
    if "baseline" not in accepted:
        return None
    value = options.get("baseline", accepted["baseline"].default)
    tokens = [part.name for part in getattr(parts, "parts", ()) if part.embedding]
    try:
        if tokens or isinstance(value, dict):
            raise ValueError
        row = np.broadcast_to(np.asarray(value, dtype=np.float64), x.shape[1:])
    except (TypeError, ValueError):
        shown = value if isinstance(value, dict) else np.ravel(value)[:4]
        raise ValueError(
            f"the method {method!r} starts from its own baseline, which cannot be read as one row of what is "
            f"scored {list(x.shape[1:])}{' (token ids: an embedding)' if tokens else ''}: give perturb_baseline= (a "
            f"number or an array of that shape); received baseline {shown!r}."
        ) from None
    return row


def is_random_baseline(baseline: Any) -> bool:
    return isinstance(baseline, str) and baseline.lower() == "uniform"


def to_pixels(elements: np.ndarray, channel_axis: int | None) -> np.ndarray:
    """``[B, K, *input]`` -> the pixel view: the channel sum for images, else unchanged."""
    if channel_axis is None:
        return elements
    return elements.sum(axis=2 + channel_axis if channel_axis >= 0 else -1)


def element_view(values: np.ndarray, x: np.ndarray, channel_axis: int | None, what: str) -> np.ndarray:
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


def part_axes(model: keras.Model, parts: Any, points: list) -> list:
    """The channel axis of each part's rows ``points[i]`` when it is an image input (as ``explain``
    reads its maps: its spatial layers' data format), else None."""
    return [
        engine.layer_channel_axis(model, value) if part.layer is None and np.ndim(value) == 4 else None
        for part, value in zip(parts, points)
    ]


def part_values(value: Any, parts: Any, what: str) -> list:
    """One array per explained part of ``value``, given in the structure ``explain`` gives it: one
    array (one part), a list or tuple by model input (``None`` for an input not explained), or a
    dict keyed by part name."""
    names = [part.name for part in parts.parts]
    if isinstance(value, dict):
        missing = [name for name in names if name not in value]
        if missing:
            raise ValueError(f"{what} must hold the parts {names}; missing {missing}; received keys {list(value)}.")
        return [value[name] for name in names]
    by_input = (
        all(entry is None or isinstance(entry, np.ndarray) for entry in value)
        if isinstance(value, (list, tuple))
        else False
    )
    if by_input and len(value) == len(parts.names):
        out = []
        for part in parts.parts:
            entry = None if part.input is None else value[part.input]
            if entry is None:
                raise ValueError(f"{what} has no entry for the part {part.name!r}; received None at its place.")
            out.append(entry)
        return out
    if len(names) != 1:
        raise ValueError(
            f"{what} must hold one array per explained part {names} (a list by model input or a dict by "
            f"name, as explain gives them); received {type(value).__name__}."
        )
    return [value]


def part_elements(value: Any, parts: Any, points: list, axes: list, what: str) -> np.ndarray:
    """Element attributions ``[B, K, *x]``: one part's ``[B, K, *part]``, or several flattened
    side by side ``[B, K, E]`` (in the order of the parts, as :class:`Scored` packs ``x``)."""
    views = [
        element_view(np.asarray(array, dtype=np.float64), point, axis, f"{what} of {part.name!r}")
        for array, point, axis, part in zip(part_values(value, parts, what), points, axes, parts.parts)
    ]
    if len(views) == 1:
        return views[0]
    widths = {v.shape[1] for v in views}
    if len(widths) != 1:
        raise ValueError(f"{what} must give every part the same targets; received {sorted(widths)} maps per input.")
    return np.concatenate([v.reshape(*v.shape[:2], -1) for v in views], axis=-1)


def seed_noise(method: str, method_options: dict, seed: int) -> None:
    """A noisy method (SmoothGrad, ...) gets ``seed=seed`` unless given, so a metric is reproducible."""
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


def several_parts_error(metric: str, names: list) -> ValueError:
    """The error of a metric that needs one image's axes, given several explained inputs."""
    return ValueError(
        f"{metric} needs one image's axes, and the explanation covers several inputs {names} (flattened side "
        f"by side): choose the one to score with attribute_to= (e.g. attribute_to={names[0]!r}); received "
        f"{len(names)} explained inputs."
    )
