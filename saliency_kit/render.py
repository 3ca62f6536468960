"""Turning saliency maps into pictures: heatmaps, overlays, labelled grids, and atomic PNG files.

    import saliency_kit as sk
    expl = sk.explain(model, inputs, "guided_backprop", targets="top1")
    rgb = sk.render.heatmap(expl.maps[0, 0])                 # uint8 [H, W, 3]
    mix = sk.render.overlay(originals[0], expl.maps[0, 0])   # uint8, the size of the image
    fig = sk.render.grid(expl, originals, spec.class_names)  # matplotlib Figure
    sk.render.save_png(fig, "figure.png")

Everything here works on NumPy arrays and a bare :class:`matplotlib.figure.Figure`: the pyplot
global state is never touched, so a batch job can render millions of figures without leaking any.

Scaling. A map is first reduced according to ``sign`` -- ``"abs"`` (magnitude), ``"positive"``
(evidence for the class), ``"negative"`` (evidence against it) or ``"all"`` (both, on a diverging
colormap whose centre colour is exactly zero) -- then divided by its ``clip_percentile``-th
percentile (so a few extreme pixels do not wash out the rest) and clipped to [0, 1]. NaN counts as
zero, +inf / -inf as the largest positive / negative value; an all-zero map renders as the
colormap's zero colour. Nothing here ever produces NaN.
"""
from __future__ import annotations

import functools
import io
import os
from collections.abc import Mapping, Sequence, Set
from typing import Any

import numpy as np

__all__ = ["normalize", "heatmap", "overlay", "grid", "save_png", "png_bytes", "write_atomic", "atomic_path",
           "DEFAULT_CMAPS"]

#: The colormap used for each ``sign`` when ``cmap`` is not given. ``"all"`` is diverging with
#: (near-)white at zero, blue for negative and red for positive evidence.
DEFAULT_CMAPS = {"abs": "inferno", "positive": "Reds", "negative": "Blues", "all": "RdBu_r"}

class _MethodTitles(Mapping):
    """``{method name: display title}``, read from the method registry (``Method.title``)."""

    def __getitem__(self, name):
        from .methods import get

        try:
            return get(name).title
        except (ValueError, TypeError):
            raise KeyError(name) from None

    def __iter__(self):
        from .methods import names

        return iter(names())

    def __len__(self):
        from .methods import names

        return len(names())


class _CamMethods(Set):
    """The methods whose maps are coarse class-activation maps (``Method.cam``): shown on top of
    the image in a grid. Read from the method registry."""

    def __contains__(self, name):
        from .methods import get

        try:
            return get(name).cam
        except (ValueError, TypeError):
            return False

    def __iter__(self):
        from .methods import get, names

        return (name for name in names() if get(name).cam)

    def __len__(self):
        return sum(1 for _ in self)


#: Methods whose maps are coarse class-activation maps, from the registry.
CAM_METHODS = _CamMethods()

#: Display title of every method, from the registry.
METHOD_TITLES = _MethodTitles()


# --------------------------------------------------------------------------------------------
# Scaling and colouring


def normalize(map_, *, sign: str = "abs", clip_percentile: float = 99.0) -> np.ndarray:
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


@functools.lru_cache(maxsize=None)
def _named_colormap(name: str):
    """A registered colormap by name (``matplotlib.colormaps[name]`` makes a copy at every call)."""
    import matplotlib

    try:
        return matplotlib.colormaps[name]
    except KeyError:
        raise ValueError(
            f"unknown colormap {name!r}; use a matplotlib colormap name such as "
            f"'inferno', 'gray', 'RdBu_r' (see matplotlib.colormaps)"
        ) from None


def _colormap(cmap: Any, sign: str):
    if cmap is None:
        cmap = DEFAULT_CMAPS[sign]
    return _named_colormap(cmap) if isinstance(cmap, str) else cmap  # else a Colormap instance


@functools.lru_cache(maxsize=None)
def _named_table(name: str) -> np.ndarray:
    return _table(_named_colormap(name))


def _table(colormap) -> np.ndarray:
    """uint8 ``[N, 3]``: the colormap's own N colours (what matplotlib indexes into)."""
    return np.ascontiguousarray(colormap(np.arange(colormap.N), bytes=True)[:, :3])


def _colorize(unit: np.ndarray, cmap: Any, sign: str) -> np.ndarray:
    """float [0, 1] array -> uint8 RGB of the same shape plus a trailing 3.

    The same colours as ``cmap(unit, bytes=True)`` (index ``min(int(x * N), N - 1)`` into the
    colormap's table), by one table look-up: batch jobs colour many maps.
    """
    name = DEFAULT_CMAPS[sign] if cmap is None else cmap
    colormap = _colormap(cmap, sign)
    table = _named_table(name) if isinstance(name, str) else _table(colormap)
    index = np.minimum((unit * colormap.N).astype(np.intp), colormap.N - 1)
    return table[np.maximum(index, 0)]


def _as_map(map_, *, allow_1d: bool) -> np.ndarray:
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


def heatmap(map2d, *, cmap=None, sign: str = "abs", clip_percentile: float = 99.0) -> np.ndarray:
    """Colour a map: ``map2d`` ``[H, W]`` -> uint8 RGB ``[H, W, 3]``.

    A sequence map ``[T]`` renders as a one-pixel-high strip ``[1, T, 3]``; a ``[T, F]`` map
    (time by feature) is already a matrix and renders like an image. ``cmap`` is a matplotlib
    colormap name or instance, by default :data:`DEFAULT_CMAPS` ``[sign]``. See :func:`normalize`
    for ``sign`` and ``clip_percentile``.
    """
    array = _as_map(map2d, allow_1d=True)
    if array.ndim == 1:
        array = array[np.newaxis, :]
    return _colorize(normalize(array, sign=sign, clip_percentile=clip_percentile), cmap, sign)


def _as_rgb(image) -> np.ndarray:
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
    if array.dtype != np.uint8:
        if np.issubdtype(array.dtype, np.floating) and np.nanmax(array, initial=0) <= 1.0:
            array = array * 255.0  # a float image in [0, 1]
        array = np.clip(np.nan_to_num(array.astype(np.float64)), 0, 255).round().astype(np.uint8)
    return array


def _resize_unit(unit: np.ndarray, size_hw: tuple[int, int]) -> np.ndarray:
    """Bilinear resize of a float [0, 1] map with Pillow (mode "F" keeps full precision)."""
    from PIL import Image

    if unit.shape == tuple(size_hw):
        return unit
    resized = Image.fromarray(unit.astype(np.float32), mode="F").resize(
        (size_hw[1], size_hw[0]), Image.Resampling.BILINEAR
    )
    return np.clip(np.asarray(resized, dtype=np.float32), 0.0, 1.0)


def overlay(image_uint8, map2d, *, alpha: float = 0.5, **heatmap_options) -> np.ndarray:
    """Blend a heatmap of ``map2d`` ``[h, w]`` over ``image_uint8`` ``[H, W, 3]`` -> uint8 ``[H, W, 3]``.

    The map is scaled at its own resolution (so percentiles are those of the map), then resized to
    the image bilinearly with Pillow, coloured, and mixed as ``(1 - alpha) * image + alpha * heat``.
    ``heatmap_options`` are those of :func:`heatmap` (``cmap``, ``sign``, ``clip_percentile``).
    """
    if not 0.0 <= float(alpha) <= 1.0:
        raise ValueError(f"alpha must be in [0, 1]; got {alpha!r}")
    unknown = set(heatmap_options) - {"cmap", "sign", "clip_percentile"}
    if unknown:
        raise TypeError(f"overlay() got unexpected options {sorted(unknown)}; "
                        f"it accepts alpha, cmap, sign and clip_percentile")
    rgb = _as_rgb(image_uint8)
    sign = heatmap_options.get("sign", "abs")
    unit = normalize(_as_map(map2d, allow_1d=False), sign=sign,
                     clip_percentile=heatmap_options.get("clip_percentile", 99.0))
    heat = _colorize(_resize_unit(unit, rgb.shape[:2]), heatmap_options.get("cmap"), sign)
    mixed = (1.0 - alpha) * rgb.astype(np.float32) + alpha * heat.astype(np.float32)
    return np.clip(mixed.round(), 0, 255).astype(np.uint8)


# --------------------------------------------------------------------------------------------
# Grids


def _explanations(explanation) -> list:
    items = list(explanation) if isinstance(explanation, (list, tuple)) else [explanation]
    if not items:
        raise ValueError("grid() needs at least one Explanation")
    batch = {np.asarray(e.maps).shape[0] for e in items}
    if len(batch) != 1:
        raise ValueError(f"grid() needs explanations of the same inputs; got batch sizes {sorted(batch)}")
    return items


def _class_label(class_names, index: int) -> str:
    if class_names is not None and 0 <= index < len(class_names):
        return str(class_names[index])
    return f"class {index}"


def _show_original(ax, original) -> None:
    array = np.asarray(original)
    if array.ndim == 3 and array.shape[-1] in (1, 3, 4):
        ax.imshow(_as_rgb(array))
    elif array.ndim == 2:  # a [T, F] sequence: time runs left to right
        ax.imshow(array.T, aspect="auto", cmap="viridis", interpolation="nearest")
    elif array.ndim == 1:
        ax.plot(np.arange(array.size), array, color="0.2", linewidth=1.0)
        ax.set_xlim(0, max(array.size - 1, 1))
    else:
        raise ValueError(f"cannot show an original of shape {array.shape} in a grid")


def _style(ax) -> None:
    ax.set_xticks([])
    ax.set_yticks([])
    for spine in ax.spines.values():
        spine.set_visible(False)


def grid(
    explanation,
    originals=None,
    class_names: Sequence[str] | None = None,
    *,
    sign: str = "abs",
    clip_percentile: float = 99.0,
    cmap=None,
    overlay_cams: bool = True,
    alpha: float = 0.5,
    row_labels: Sequence[str] | None = None,
    score_name: str | None = None,
    panel_inches: float = 1.9,
    dpi: int = 150,
):
    """A labelled figure: one row per input, the image then one panel per (method, class).

    ``explanation``: an :class:`~saliency_kit.Explanation` or a list of them (several methods on
    the same inputs). ``originals``: the images as loaded (uint8 ``[B, H, W, 3]`` or a list of
    arrays of any sizes), or ``None`` to leave out the image column. Panels are titled with the
    class name (from ``class_names``, else ``"class i"``) and the score the map explains; the top
    row also names the method; ``score_name`` (e.g. ``"logit"``) says what the score is.
    Pixel-level maps are shown as heatmaps; the coarse CAM maps
    (Grad-CAM, Grad-CAM++) are laid over the image when ``overlay_cams`` is true. Sequence maps
    ``[T]`` show as strips and ``[T, F]`` as matrices. Returns a bare
    :class:`matplotlib.figure.Figure` (no pyplot state); save it with :func:`save_png`.
    """
    from matplotlib.figure import Figure

    items = _explanations(explanation)
    n_rows = np.asarray(items[0].maps).shape[0]
    show_originals = originals is not None
    if show_originals and len(originals) != n_rows:
        raise ValueError(f"grid() got {len(originals)} originals for {n_rows} explained inputs")
    if row_labels is not None and len(row_labels) != n_rows:
        raise ValueError(f"grid() got {len(row_labels)} row labels for {n_rows} inputs")
    columns = [(e, k) for e in items for k in range(np.asarray(e.maps).shape[1])]
    n_cols = len(columns) + int(show_originals)

    fig = Figure(figsize=(panel_inches * n_cols, panel_inches * 1.12 * n_rows), dpi=dpi,
                 layout="constrained")
    axes = fig.subplots(n_rows, n_cols, squeeze=False)
    for row in range(n_rows):
        col = 0
        if show_originals:
            ax = axes[row, 0]
            _show_original(ax, originals[row])
            _style(ax)
            ax.set_title(" ", fontsize=8, pad=3)  # keeps the header at the height of the others
            if row == 0:
                _column_header(ax, "Input")
            col = 1
        if row_labels is not None:
            axes[row, 0].set_ylabel(str(row_labels[row]), fontsize=8)
        for e, k in columns:
            ax = axes[row, col]
            col += 1
            map_ = np.asarray(e.maps[row, k])
            cam = e.method in CAM_METHODS
            options = dict(sign=sign, clip_percentile=clip_percentile, cmap=cmap)
            if map_.ndim == 1:  # a sequence strip
                ax.imshow(heatmap(map_, **options), aspect="auto", interpolation="nearest")
            elif cam and overlay_cams and show_originals and np.asarray(originals[row]).ndim == 3:
                ax.imshow(overlay(originals[row], map_, alpha=alpha, **options))
            else:
                image_like = show_originals and np.asarray(originals[row]).ndim == 3
                square = map_.shape[0] == map_.shape[1]
                ax.imshow(heatmap(map_, **options), aspect="equal" if image_like or square else "auto")
            _style(ax)
            target = int(np.asarray(e.targets)[row, k])
            score = float(np.asarray(e.scores)[row, k])
            shown = f"{score_name} {score:.3g}" if score_name else f"{score:.3g}"
            label = f"{_class_label(class_names, target)}  {shown}"
            ax.set_title(label, fontsize=8, pad=3)
            if row == 0:
                _column_header(ax, METHOD_TITLES.get(e.method, str(e.method)))
    return fig


def _column_header(ax, text: str) -> None:
    """A bold header above the axes' title (plain text: no mathtext surprises with '-' or '_')."""
    from matplotlib.transforms import ScaledTranslation

    shift = ScaledTranslation(0, 13 / 72, ax.figure.dpi_scale_trans)
    ax.text(0.5, 1.0, text, transform=ax.transAxes + shift, ha="center", va="bottom",
            fontsize=9, fontweight="bold", clip_on=False)


# --------------------------------------------------------------------------------------------
# Files (atomic writing lives in saliency_kit.files; re-exported here for existing callers)

from .files import atomic_path, write_atomic  # noqa: E402


def png_bytes(array_or_figure, *, dpi: int | None = None) -> bytes:
    """PNG file contents of a uint8 ``[H, W, 3]`` / ``[H, W]`` array or of a matplotlib Figure."""
    from PIL import Image

    buffer = io.BytesIO()
    if hasattr(array_or_figure, "savefig"):
        array_or_figure.savefig(buffer, format="png", dpi=dpi or "figure", facecolor="white",
                                bbox_inches="tight", pad_inches=0.05)
    else:
        array = np.asarray(array_or_figure)
        if array.dtype != np.uint8 or array.ndim not in (2, 3) or (array.ndim == 3 and array.shape[-1] not in (3, 4)):
            raise ValueError(f"save_png() expects a Figure or a uint8 image [H, W(, 3|4)]; got "
                             f"{array.dtype} {array.shape} (use heatmap() or overlay() to make one)")
        Image.fromarray(array).save(buffer, format="PNG", compress_level=1)  # fastest; no bigger here
    return buffer.getvalue()


def save_png(array_or_figure, path: str | os.PathLike, *, dpi: int | None = None, durable: bool = True) -> str:
    """Write a uint8 ``[H, W, 3]`` / ``[H, W]`` array or a matplotlib Figure to ``path`` atomically.

    Returns ``path``. The figure is saved with a tight bounding box on a white background.
    ``durable``: see :func:`atomic_path`.
    """
    return write_atomic(path, png_bytes(array_or_figure, dpi=dpi), durable=durable)
