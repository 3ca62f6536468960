"""Maps to colours: scaling (:func:`normalize`), colormaps, :func:`heatmap` and :func:`overlay`.

A map is first reduced according to ``sign`` -- ``"abs"`` (magnitude), ``"positive"``
(evidence for the class), ``"negative"`` (evidence against it) or ``"all"`` (both, on a diverging
colormap whose centre colour is exactly zero) -- then divided by its ``clip_percentile``-th
percentile (so a few extreme pixels do not wash out the rest) and clipped to [0, 1]. NaN counts as
zero, +inf / -inf as the largest positive / negative value; an all-zero map renders as the
colormap's zero colour. Nothing here ever produces NaN.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

__all__ = [
    "as_rgb",
    "colorize",
    "colormap",
    "DEFAULT_CMAPS",
    "heatmap",
    "normalize",
    "overlay",
    "resize_unit",
    "check_map_fits",
]


#: The colormap used for each ``sign`` when ``cmap`` is not given. ``"all"`` is diverging with
#: (near-)white at zero, blue for negative and red for positive evidence.
DEFAULT_CMAPS = {"abs": "inferno", "positive": "Reds", "negative": "Blues", "all": "RdBu_r"}


def normalize(map_: Any, *, sign: str = "abs", clip_percentile: float = 99.0) -> np.ndarray:
    """Scale a map of any shape to float32 values in [0, 1] for display.

    ``sign="abs"|"positive"|"negative"``: 0 means no evidence, 1 the ``clip_percentile``-th
    percentile of the kept values or more. ``sign="all"``: 0.5 means zero, 0 / 1 the most negative
    / positive evidence (scaled by the percentile of the magnitudes, so the sign is symmetric).
    Non-finite values never propagate: NaN becomes zero evidence and +-inf the extreme values.
    """
    if sign not in DEFAULT_CMAPS:
        raise ValueError(f"sign must be one of {sorted(DEFAULT_CMAPS)}; got {sign!r}")
    if not 0.0 < float(clip_percentile) <= 100.0:
        raise ValueError(f"clip_percentile must be in (0, 100]; got {clip_percentile!r}")
    values = np.asarray(map_, dtype=np.float64)
    if sign == "abs":
        values = np.abs(values)
    elif sign == "positive":
        values = np.where(values > 0, values, 0.0)  # NaN > 0 is False: NaN becomes 0
    elif sign == "negative":
        values = np.where(values < 0, -values, 0.0)
    magnitude = np.abs(values[np.isfinite(values)])
    scale = 0.0
    if magnitude.size:
        scale = float(np.percentile(magnitude, clip_percentile))
        if scale <= 0.0:  # a sparse map whose percentile is 0: fall back to its largest value
            scale = float(magnitude.max())
    scaled = values / scale if scale > 0.0 else np.where(np.isfinite(values), 0.0, values)
    low = -1.0 if sign == "all" else 0.0
    scaled = np.clip(np.nan_to_num(scaled, nan=0.0, posinf=1.0, neginf=low), low, 1.0)
    if sign == "all":
        scaled = (scaled + 1.0) / 2.0
    return scaled.astype(np.float32)


@functools.cache
def _named_colormap(name: str) -> Any:
    """A registered colormap by name (``matplotlib.colormaps[name]`` makes a copy at every call)."""
    import matplotlib

    try:
        return matplotlib.colormaps[name]
    except KeyError:
        raise ValueError(
            f"unknown colormap {name!r}; use a matplotlib colormap name such as "
            f"'inferno', 'gray', 'RdBu_r' (see matplotlib.colormaps)"
        ) from None


def colormap(cmap: Any, sign: str) -> Any:
    if cmap is None:
        cmap = DEFAULT_CMAPS[sign]
    return _named_colormap(cmap) if isinstance(cmap, str) else cmap  # else a Colormap instance


@functools.cache
def _named_table(name: str) -> np.ndarray:
    return _table(_named_colormap(name))


def _table(colormap: Any) -> np.ndarray:
    """uint8 ``[N, 3]``: the colormap's own N colours (what matplotlib indexes into)."""
    return np.ascontiguousarray(colormap(np.arange(colormap.N), bytes=True)[:, :3])


def colorize(unit: np.ndarray, cmap: Any, sign: str) -> np.ndarray:
    """float [0, 1] array -> uint8 RGB of the same shape plus a trailing 3.

    The same colours as ``cmap(unit, bytes=True)`` (index ``min(int(x * N), N - 1)`` into the
    colormap's table), by one table look-up: batch jobs colour many maps.
    """
    name = DEFAULT_CMAPS[sign] if cmap is None else cmap
    chosen = colormap(cmap, sign)
    table = _named_table(name) if isinstance(name, str) else _table(chosen)
    index = np.minimum((unit * chosen.N).astype(np.intp), chosen.N - 1)
    return table[np.maximum(index, 0)]


def _as_map(map_: Any, *, allow_1d: bool) -> np.ndarray:
    array = np.asarray(map_)
    if array.ndim == 3 and array.shape[-1] == 1:
        array = array[..., 0]
    if array.ndim == 2 or (allow_1d and array.ndim == 1):
        if array.size == 0:
            raise ValueError(f"cannot render an empty map (shape {array.shape})")
        return array
    expected = "a 2-D map [H, W] or a 1-D sequence map [T]" if allow_1d else "a 2-D map [H, W]"
    raise ValueError(
        f"expected {expected}; got an array of shape {array.shape}. For an Explanation pick one "
        f"input and class, e.g. explanation.maps[i, k]."
    )


def heatmap(map2d: np.ndarray, *, cmap: Any = None, sign: str = "abs", clip_percentile: float = 99.0) -> np.ndarray:
    """Colour a map: ``map2d`` ``[H, W]`` -> uint8 RGB ``[H, W, 3]``.

    A sequence map ``[T]`` renders as a one-pixel-high strip ``[1, T, 3]``; a ``[T, F]`` map
    (time by feature) is already a matrix and renders like an image. ``cmap`` is a matplotlib
    colormap name or instance, by default :data:`DEFAULT_CMAPS` ``[sign]``. See :func:`normalize`
    for ``sign`` and ``clip_percentile``.
    """
    array = _as_map(map2d, allow_1d=True)
    if array.ndim == 1:
        array = array[np.newaxis, :]
    return colorize(normalize(array, sign=sign, clip_percentile=clip_percentile), cmap, sign)


def as_rgb(image: Any) -> np.ndarray:
    """Any image as uint8 RGB: grey and RGBA accepted; float in [0, 1] scaled by 255 (else taken as
    0-255); 16-bit samples (uint16, or integers above 255) scaled by 255/65535, never clipped."""
    array = np.asarray(image)
    if array.ndim == 3 and array.shape[-1] == 1:
        array = array[..., 0]
    if array.ndim == 2:
        array = np.repeat(array[..., np.newaxis], 3, axis=-1)
    if array.ndim != 3 or array.shape[-1] not in (3, 4):
        raise ValueError(
            f"expected an RGB image [H, W, 3] (grey [H, W] and RGBA are accepted too); got an array "
            f"of shape {array.shape}"
        )
    array = array[..., :3]
    if array.dtype == np.uint8:
        return array
    if array.dtype == np.bool_:
        return array.astype(np.uint8) * 255
    values = np.nan_to_num(array.astype(np.float64))
    if array.dtype == np.uint16 or (np.issubdtype(array.dtype, np.integer) and values.max(initial=0) > 255):
        values = values * (255.0 / 65535.0)  # 16-bit samples (uint16, or Pillow's int32 "I;16" images)
    elif np.issubdtype(array.dtype, np.floating) and values.max(initial=0) <= 1.0:
        values = values * 255.0  # a float image in [0, 1]
    return np.clip(values, 0, 255).round().astype(np.uint8)


def resize_unit(unit: np.ndarray, size_hw: tuple[int, int]) -> np.ndarray:
    """Bilinear resize of a float [0, 1] map with Pillow (mode "F" keeps full precision)."""
    from PIL import Image

    if unit.shape == tuple(size_hw):
        return unit
    resized = Image.fromarray(unit.astype(np.float32), mode="F").resize(
        (size_hw[1], size_hw[0]), Image.Resampling.BILINEAR
    )
    return np.clip(np.asarray(resized, dtype=np.float32), 0.0, 1.0)


def check_map_fits(map_shape: Any, image_hw: Any) -> None:
    """``ValueError`` for a map that cannot be a picture of the image: a side as short as a channel
    axis (≤ 4) and an aspect ratio more than twice off the image's (a ``[C, H]`` map of a
    channels-first input, reduced over the wrong axis), which resizing would silently stretch."""
    h, w = map_shape
    aspect, image_aspect = h / w, image_hw[0] / image_hw[1]
    if min(h, w) <= 4 and max(aspect / image_aspect, image_aspect / aspect) > 2 and tuple(image_hw) != (h, w):
        raise ValueError(
            f"a map of shape {tuple(map_shape)} does not fit an image of {image_hw[0]}x{image_hw[1]} pixels "
            "(it looks reduced over a wrong axis, e.g. [C, H] of a channels-first input; explain such "
            f"models with channels_axis=1); received a map of shape {tuple(map_shape)}."
        )


def overlay(image_uint8: np.ndarray, map2d: np.ndarray, *, alpha: float = 0.5, **heatmap_options: Any) -> np.ndarray:
    """Blend a heatmap of ``map2d`` ``[h, w]`` over ``image_uint8`` ``[H, W, 3]`` -> uint8 ``[H, W, 3]``.

    The map is scaled at its own resolution (so percentiles are those of the map), then resized to
    the image bilinearly with Pillow, coloured, and mixed as ``(1 - alpha) * image + alpha * heat``.
    ``heatmap_options`` are those of :func:`heatmap` (``cmap``, ``sign``, ``clip_percentile``).
    The image may also be grey, RGBA, float in [0, 1] or 16-bit (scaled to 8 bits, not clipped).
    """
    if not 0.0 <= float(alpha) <= 1.0:
        raise ValueError(f"alpha must be in [0, 1]; got {alpha!r}")
    unknown = set(heatmap_options) - {"cmap", "sign", "clip_percentile"}
    if unknown:
        raise TypeError(
            f"overlay() got unexpected options {sorted(unknown)}; it accepts alpha, cmap, sign and clip_percentile"
        )
    rgb = as_rgb(image_uint8)
    check_map_fits(np.shape(_as_map(map2d, allow_1d=False)), rgb.shape[:2])
    sign = heatmap_options.get("sign", "abs")
    unit = normalize(
        _as_map(map2d, allow_1d=False), sign=sign, clip_percentile=heatmap_options.get("clip_percentile", 99.0)
    )
    heat = colorize(resize_unit(unit, rgb.shape[:2]), heatmap_options.get("cmap"), sign)
    mixed = (1.0 - alpha) * rgb.astype(np.float32) + alpha * heat.astype(np.float32)
    return np.clip(mixed.round(), 0, 255).astype(np.uint8)
