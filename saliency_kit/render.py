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

import dataclasses
import functools
import io
import os
from collections.abc import Mapping, Sequence, Set
from typing import Any

import numpy as np

__all__ = ["normalize", "heatmap", "overlay", "grid", "show", "fit_text", "method_title", "save_png", "png_bytes",
           "Mark", "outline", "draw_box", "draw_mark", "MARK_COLOUR",
           "write_atomic", "atomic_path", "DEFAULT_CMAPS"]

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


def method_display(method: str) -> tuple[str, bool]:
    """``(title, cam)`` of a method: its short display title, and whether its maps are coarse
    class-activation maps (drawn over the image). The one place rendering looks these up."""
    return METHOD_TITLES.get(method, str(method)), method in CAM_METHODS


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
    The image may also be grey, RGBA, float in [0, 1] or 16-bit (scaled to 8 bits, not clipped).
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
# Marks: what a map explains, drawn on it -- a region's outline, a box with its class name

#: The colour of region outlines and boxes: cyan stands out on every default colormap.
MARK_COLOUR = (0, 255, 255)


@dataclasses.dataclass(frozen=True)
class Mark:
    """What one map explains, to draw on its overlay: a region ``mask`` (bool ``[h, w]``, any
    resolution: it is scaled to the picture) and/or a ``box`` ``(x0, y0, x1, y1)`` in the pixels of
    a ``frame`` ``(height, width)`` (the model's input; ``None``: the picture's own), with a
    ``label`` written at the box (e.g. its class name)."""

    mask: np.ndarray | None = None
    box: tuple | None = None
    label: str | None = None
    frame: tuple | None = None


def _line_width(shape_hw) -> int:
    """Outline width in pixels: 1 up to 192 px pictures, then 1 more per 192 px of the short side."""
    return max(1, int(min(shape_hw[:2])) // 192 + 1)


def outline(image_uint8, mask, *, colour=MARK_COLOUR, width: int | None = None) -> np.ndarray:
    """``image_uint8`` ``[H, W, 3]`` with the outline of ``mask`` drawn in ``colour`` -> a new uint8 image.

    ``mask``: bool (or nonzero = in) ``[h, w]``, scaled to ``[H, W]`` by nearest neighbour. The
    outline is the mask's own pixels within ``width`` pixels (4-neighbour steps; default from the
    picture's size) of a pixel outside it or of the picture's edge: it never covers the region's
    surroundings, and an empty mask draws nothing.
    """
    from PIL import Image

    rgb = _as_rgb(image_uint8).copy()
    region = np.asarray(mask)
    if region.ndim != 2:
        raise ValueError(f"outline() needs a mask [h, w]; received an array of shape {region.shape}.")
    region = region.astype(bool)
    if region.shape != rgb.shape[:2]:
        scaled = Image.fromarray(region.astype(np.uint8) * 255).resize((rgb.shape[1], rgb.shape[0]),
                                                                       Image.Resampling.NEAREST)
        region = np.asarray(scaled) > 127
    inner = region
    for _ in range(width or _line_width(rgb.shape)):
        padded = np.pad(inner, 1, constant_values=False)
        inner = inner & padded[:-2, 1:-1] & padded[2:, 1:-1] & padded[1:-1, :-2] & padded[1:-1, 2:]
    rgb[region & ~inner] = colour
    return rgb


def draw_box(image_uint8, box, label: str | None = None, *, frame=None, colour=MARK_COLOUR,
             width: int | None = None) -> np.ndarray:
    """``image_uint8`` ``[H, W, 3]`` with ``box`` drawn as a rectangle and ``label`` written on a
    ``colour`` band at its top-left corner (above the box when there is room, else inside).

    ``box``: ``(x0, y0, x1, y1)`` pixel edges in a ``frame`` ``(height, width)`` (the model's input
    size; default the picture's own), scaled to the picture; the rectangle's lines are the box's
    outermost pixels, ``width`` wide (default from the picture's size), clipped to the picture.
    """
    from PIL import Image, ImageDraw, ImageFont

    rgb = _as_rgb(image_uint8)
    values = np.asarray(box, dtype=np.float64).reshape(-1)
    if values.shape != (4,) or not np.all(np.isfinite(values)):
        raise ValueError(f"draw_box() needs a box (x0, y0, x1, y1) of 4 finite numbers; received {box!r}.")
    height, width_px = rgb.shape[:2]
    frame_h, frame_w = frame if frame is not None else (height, width_px)
    x0, x1 = values[[0, 2]] * (width_px / frame_w)
    y0, y1 = values[[1, 3]] * (height / frame_h)
    x0, y0 = int(np.clip(np.floor(x0 + 0.5), 0, width_px - 1)), int(np.clip(np.floor(y0 + 0.5), 0, height - 1))
    x1, y1 = int(np.clip(np.floor(x1 + 0.5), x0 + 1, width_px)), int(np.clip(np.floor(y1 + 0.5), y0 + 1, height))
    picture = Image.fromarray(rgb.copy())
    draw = ImageDraw.Draw(picture)
    draw.rectangle([x0, y0, x1 - 1, y1 - 1], outline=tuple(colour), width=width or _line_width(rgb.shape))
    if label:
        font = ImageFont.load_default(size=max(8, min(height, width_px) // 8))
        left, top, right, bottom = draw.textbbox((0, 0), str(label), font=font)
        text_w, text_h = right - left + 2, bottom - top + 2
        band_top = y0 - text_h if y0 - text_h >= 0 else y0
        band_left = min(x0, max(0, width_px - text_w))
        draw.rectangle([band_left, band_top, band_left + text_w - 1, band_top + text_h - 1], fill=tuple(colour))
        draw.text((band_left + 1 - left, band_top + 1 - top), str(label), fill=(0, 0, 0), font=font)
    return np.asarray(picture)


def draw_mark(image_uint8, mark: "Mark | None") -> np.ndarray:
    """``image_uint8`` with ``mark``'s region outline and box drawn (unchanged for ``None``)."""
    rgb = _as_rgb(image_uint8)
    if mark is None:
        return rgb
    if mark.mask is not None:
        rgb = outline(rgb, mark.mask)
    if mark.box is not None:
        rgb = draw_box(rgb, mark.box, mark.label, frame=mark.frame)
    return rgb


# --------------------------------------------------------------------------------------------
# Grids


def _explanations(explanation) -> list:
    items = list(explanation) if isinstance(explanation, (list, tuple)) else [explanation]
    if not items:
        raise ValueError("grid() needs at least one Explanation; received an empty list.")
    batch = {np.asarray(e.maps).shape[0] for e in items}
    if len(batch) != 1:
        raise ValueError(f"grid() needs explanations of the same inputs; received batch sizes {sorted(batch)}.")
    return items


def _class_label(class_names, index: int) -> str:
    if class_names is not None and 0 <= index < len(class_names):
        return str(class_names[index])
    return f"class {index}"


def _is_image(original) -> bool:
    array = np.asarray(original)
    return array.ndim == 3 and array.shape[-1] in (1, 3, 4)


def _is_tabular(e) -> bool:
    """Attributions ``[B, K, F]``: one value per feature of a flat input (no spatial axes).
    (Objects with only ``maps``, ``targets``, ``scores`` and ``method`` are drawn from the maps.)"""
    attributions = getattr(e, "attributions", None)
    return attributions is not None and np.ndim(attributions) == 3 and not method_display(e.method)[1]


def _display_image(original, max_side: int) -> np.ndarray:
    """The original as uint8 RGB, shrunk (never enlarged) so that its longer side is ``max_side``."""
    from PIL import Image

    rgb = _as_rgb(original)
    height, width = rgb.shape[:2]
    if max(height, width) <= max_side:
        return rgb
    scale = max_side / max(height, width)
    size = (max(1, round(width * scale)), max(1, round(height * scale)))
    return np.asarray(Image.fromarray(rgb).resize(size, Image.Resampling.LANCZOS))


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
        raise ValueError(f"cannot show an original of shape {array.shape} in a grid; expected an image "
                         f"[H, W, C], a sequence [T, F] or [T]; received shape {array.shape}.")


def _style(ax) -> None:
    ax.set_xticks([])
    ax.set_yticks([])
    for spine in ax.spines.values():
        spine.set_visible(False)


def fit_text(text: str, width_inches: float, fontsize: float = 8.0, *, lines: int = 1) -> str:
    """``text`` made to fit a panel ``width_inches`` wide at ``fontsize`` points: wrapped at spaces,
    ``/``, ``_`` or anywhere onto at most ``lines`` lines, the last shortened with an ellipsis.
    ``$`` is escaped so that matplotlib shows it as typed (no mathtext). For panel titles that must
    not run into their neighbours, e.g. ``ax.set_title(fit_text(layer_name, 1.25, 7, lines=2))``."""
    import textwrap

    limit = max(4, int(width_inches * 72 / (fontsize * 0.6)))
    text = " ".join(str(text).split())
    wrapped = textwrap.wrap(text, limit, break_on_hyphens=False) or [""]
    if len(wrapped) > lines:
        rest = " ".join(wrapped[lines - 1:])
        wrapped = wrapped[:lines - 1] + [rest[: limit - 1] + "\u2026"]
    return "\n".join(wrapped).replace("$", r"\$")


def _bars(ax, values, features, feature_names, *, max_features: int) -> None:
    """Horizontal bars of a tabular attribution ``[F]``: the largest magnitudes, red for evidence
    for the class and blue against it, each labelled with the feature's name (and value)."""
    values = np.nan_to_num(np.asarray(values, dtype=np.float64).reshape(-1))
    order = np.argsort(-np.abs(values), kind="stable")[:max_features][::-1]
    labels = []
    for i in order:
        name = str(feature_names[i]) if feature_names is not None and i < len(feature_names) else f"x{i}"
        name = fit_text(name, 0.75, 6)  # the name is shortened, never the value
        if features is not None:
            name += f" = {float(np.asarray(features).reshape(-1)[i]):.3g}"
        labels.append(name)
    shown = values[order]
    ax.barh(np.arange(order.size), shown, color=np.where(shown >= 0, "#c0392b", "#2e6db4"), height=0.7)
    ax.axvline(0.0, color="0.3", linewidth=0.6)
    ax.set_yticks(np.arange(order.size), labels, fontsize=6)
    ax.tick_params(axis="x", labelsize=5.5, length=2, pad=1)
    ax.tick_params(axis="y", length=0, pad=2)
    limit = float(np.abs(shown).max()) if shown.size else 0.0
    ax.set_xlim(-limit * 1.05 - 1e-12, limit * 1.05 + 1e-12)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def _panel_rows(items, max_columns: int) -> list[list[tuple]]:
    """The (explanation, k) panels of one input, in rows: one row per method (wrapped after
    ``max_columns``) when some method explains several classes, else every method side by side."""
    if max(np.asarray(e.maps).shape[1] for e in items) == 1:
        groups = [[(e, 0) for e in items]]
    else:
        groups = [[(e, k) for k in range(np.asarray(e.maps).shape[1])] for e in items]
    return [group[i:i + max_columns] for group in groups for i in range(0, len(group), max_columns)]


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
    max_columns: int = 5,
    feature_names: Sequence[str] | None = None,
    max_features: int = 12,
    marks: Sequence[Sequence["Mark | None"]] | None = None,
):
    """A labelled figure of the maps of one or several methods on the same inputs.

    ``explanation``: an :class:`~saliency_kit.Explanation` or a list of them (several methods on
    the same inputs). ``originals``: the inputs as loaded (uint8 images ``[B, H, W, 3]`` or a list
    of arrays of any sizes; sequences ``[B, T, F]``; tabular rows ``[B, F]``), or ``None`` to leave
    out the input column.

    Layout: each input gets a block of rows. When every method explains one class the block is one
    row -- the input, then one panel per method; otherwise each method gets its own row of classes.
    A row holds at most ``max_columns`` panels and wraps after that; one-row blocks small enough
    are placed side by side (e.g. 4 inputs with one map each: two rows of up to three inputs);
    blocks stacked one per line form columns, and their method names head the first line only. Each panel is titled with its
    method (bold) and below that the class name (from ``class_names``, else ``"class i"``) and the
    score the map explains, ``score_name`` (e.g. ``"logit"``) saying what the score is; long
    names are shortened so that titles never run into each other. ``row_labels`` name the inputs.

    Panels: every image panel has the input's aspect ratio -- pixel-level maps are scaled to the
    image's size as shown, and the coarse CAM maps are laid over the image when ``overlay_cams``
    is true. Sequence maps ``[T]`` show as strips and ``[T, F]`` as matrices. Tabular
    explanations (attributions ``[B, K, F]``) show one bar per feature, the ``max_features``
    largest in magnitude, named by ``feature_names`` (else ``x0``, ``x1``, ...) with the input's
    value when ``originals`` are given. Returns a bare :class:`matplotlib.figure.Figure` (no
    pyplot state); save it with :func:`save_png`.

    ``marks``: per input, one :class:`Mark` (or ``None``) per target column ``k`` -- the region
    outline or the box a map explains, drawn on that column's image panels of every method.
    """
    from matplotlib.figure import Figure

    items = _explanations(explanation)
    n_inputs = np.asarray(items[0].maps).shape[0]
    if originals is not None and len(originals) != n_inputs:
        raise ValueError(f"grid() needs one original per explained input ({n_inputs}); "
                         f"received {len(originals)} originals.")
    if row_labels is not None and len(row_labels) != n_inputs:
        raise ValueError(f"grid() needs one row label per input ({n_inputs}); received {len(row_labels)}.")
    if int(max_columns) < 1:
        raise ValueError(f"max_columns must be at least 1; received {max_columns!r}.")
    if marks is not None and len(marks) != n_inputs:
        raise ValueError(f"grid() needs one list of marks per input ({n_inputs}); received {len(marks)}.")
    options = dict(sign=sign, clip_percentile=clip_percentile, cmap=cmap)
    tabular = any(_is_tabular(e) for e in items)
    show_input = originals is not None and not tabular  # tabular values are written on the bars
    layout = _panel_rows(items, int(max_columns))
    block_width = max(len(row) for row in layout) + int(show_input)
    # Inputs with a single short row each sit side by side, as many as max_columns allows.
    per_line = max(1, (int(max_columns) + int(show_input)) // block_width) if len(layout) == 1 else 1
    per_line = min(per_line, n_inputs)
    n_cols = block_width * per_line
    n_rows = len(layout) * -(-n_inputs // per_line)

    shown = None
    if originals is not None and _is_image(originals[0]):
        shown = [_display_image(o, max_side=max(64, int(panel_inches * dpi))) for o in originals]
    aspect = 1.0
    if tabular:
        features = max(np.shape(e.attributions)[-1] for e in items if _is_tabular(e))
        aspect = max(0.8, (0.14 * min(max_features, features) + 0.25) / panel_inches)
    elif shown is not None:
        aspect = float(np.clip(shown[0].shape[0] / shown[0].shape[1], 0.3, 3.0))
    elif np.asarray(items[0].maps).ndim == 4:
        height, width = np.asarray(items[0].maps).shape[2:]
        aspect = float(np.clip(height / width, 0.3, 3.0))
    title_inches = 0.55  # a bold method header, then two lines: the class name and the score
    fig = Figure(figsize=(panel_inches * n_cols, (panel_inches * aspect + title_inches) * n_rows),
                 dpi=dpi, layout="constrained")
    axes = fig.subplots(n_rows, n_cols, squeeze=False)
    for ax in axes.flat:
        ax.set_axis_off()

    # One input per line, methods in columns: the method names head the first line only.
    headers_once = len(layout) == 1 and per_line == 1
    for i in range(n_inputs):
        first, left = (i // per_line) * len(layout), (i % per_line) * block_width
        headed = i == 0 or not headers_once
        if show_input:
            ax = axes[first, left]
            ax.set_axis_on()
            if shown is not None:
                ax.imshow(shown[i])
            else:
                _show_original(ax, originals[i])
            _style(ax)
            ax.set_title(" \n ", fontsize=_TITLE_POINTS, pad=3)  # keeps the header at the height of the others
            if row_labels is not None or headed:
                _column_header(ax, fit_text(str(row_labels[i]) if row_labels is not None else "Input",
                                            panel_inches, 8.5))
        elif row_labels is not None:
            axes[first, left].set_ylabel(fit_text(str(row_labels[i]), panel_inches * aspect, 8), fontsize=8)
        for r, row in enumerate(layout):
            for c, (e, k) in enumerate(row):
                ax = axes[first + r, left + c + int(show_input)]
                ax.set_axis_on()
                mark = marks[i][k] if marks is not None and k < len(marks[i]) else None
                _draw_panel(ax, e, i, k, originals, shown, options, overlay_cams=overlay_cams, alpha=alpha,
                            feature_names=feature_names, max_features=max_features, mark=mark)
                target = int(np.asarray(e.targets)[i, k])
                score = float(np.asarray(e.scores)[i, k])
                value = f"{score_name} {score:.3g}" if score_name else f"{score:.3g}"
                label = fit_text(_class_label(class_names, target), panel_inches, _TITLE_POINTS)
                ax.set_title(f"{label}\n{value}", fontsize=_TITLE_POINTS, pad=3)
                if headed:
                    _column_header(ax, fit_text(method_title(e.method), panel_inches, 8.5))
                if row_labels is not None and not show_input and c == 0 and r > 0:
                    ax.set_ylabel(" ", fontsize=8)
    return fig


def _first_inputs(e, n: int):
    """``e`` restricted to its first ``n`` inputs (the arrays a grid reads), for display."""
    import dataclasses

    if len(np.asarray(e.maps)) <= n or not dataclasses.is_dataclass(e):
        return e
    rows = {name: getattr(e, name)[:n] for name in ("attributions", "maps", "targets", "scores")}
    return dataclasses.replace(e, **rows)


def explanation_png(explanation, originals=None, class_names=None, *, max_inputs: int = 8, **grid_options) -> bytes:
    """PNG bytes of :func:`grid` for an Explanation (or a list of them) -- what Jupyter shows.

    At most ``max_inputs`` inputs are drawn (the first ones), so that displaying the explanation
    of a large batch stays quick. Without ``originals`` the grid has no input column.
    """
    items = [_first_inputs(e, max_inputs) for e in _explanations(explanation)]
    if originals is not None:
        originals = originals[:max_inputs]
    figure = grid(items if isinstance(explanation, (list, tuple)) else items[0], originals, class_names,
                  **{"dpi": 100, **grid_options})
    return png_bytes(figure)


def _in_notebook() -> bool:
    import sys

    shell = getattr(sys.modules.get("IPython"), "get_ipython", lambda: None)()
    return shell is not None and "IPKernelApp" in getattr(shell, "config", {})


def _interactive_backend() -> bool:
    import matplotlib

    backend = matplotlib.get_backend().lower()
    try:
        from matplotlib.backends import BackendFilter, backend_registry

        return backend in backend_registry.list_builtin(BackendFilter.INTERACTIVE)
    except ImportError:  # matplotlib < 3.9
        return backend not in {"agg", "pdf", "ps", "svg", "pgf", "cairo", "template"} and "inline" not in backend


def show(explanation, originals=None, class_names=None, *, path=None, block=None, **grid_options) -> None:
    """Show the :func:`grid` of ``explanation`` from a script or a notebook.

    Where it goes: in a Jupyter kernel, inline in the notebook; with an interactive matplotlib
    backend (a desktop session: TkAgg, QtAgg, macosx, ...), in a window (``pyplot.show(block=block)``);
    with no display (the ``Agg`` backend of servers and CI), nowhere -- a ``UserWarning`` says so,
    unless ``path`` is given. ``path``: also write the grid there as a PNG (atomically), whatever
    the display. ``grid_options`` are those of :func:`grid`. Returns None, like ``pyplot.show``
    (so that a notebook does not draw it twice); :func:`grid` returns the Figure itself.
    """
    figure = grid(explanation, originals, class_names, **grid_options)
    if path is not None:
        save_png(figure, path)
    if _in_notebook():
        from IPython.display import Image, display

        display(Image(data=png_bytes(figure)))
    elif _interactive_backend():
        from matplotlib import pyplot
        from PIL import Image

        picture = np.asarray(Image.open(io.BytesIO(png_bytes(figure))))
        height, width = picture.shape[:2]
        window = pyplot.figure(figsize=(width / figure.dpi, height / figure.dpi), dpi=figure.dpi)
        axes = window.add_axes((0, 0, 1, 1))
        axes.imshow(picture)
        axes.set_axis_off()
        pyplot.show(block=block)
    elif path is None:
        import warnings

        import matplotlib

        warnings.warn(f"render.show(): matplotlib backend {matplotlib.get_backend()!r} has no display; nothing "
                      f"was shown. Pass path='grid.png' to save the grid, or use grid() and save_png().",
                      UserWarning, stacklevel=2)


_TITLE_POINTS = 7.5  # panel titles: two lines of this size, under a header of 8.5 points


def _column_header(ax, text: str) -> None:
    """A bold header above the axes' two-line title (plain text: no mathtext surprises with '-' or '_')."""
    from matplotlib.transforms import ScaledTranslation

    shift = ScaledTranslation(0, (3 + 2 * _TITLE_POINTS * 1.25 + 1) / 72, ax.figure.dpi_scale_trans)
    ax.text(0.5, 1.0, text, transform=ax.transAxes + shift, ha="center", va="bottom",
            fontsize=8.5, fontweight="bold", clip_on=False)


def method_title(method: str) -> str:
    """A method's short display title (``"Grad-CAM"``)."""
    return method_display(method)[0]


def _draw_panel(ax, e, i, k, originals, shown, options, *, overlay_cams, alpha, feature_names, max_features,
                mark=None):
    """One map of a grid: bars (tabular), a strip (sequence), an overlay (CAM) or a heatmap (an
    image panel with ``mark`` drawn on it)."""
    if _is_tabular(e):
        features = None if originals is None else originals[i]
        _bars(ax, np.asarray(e.attributions)[i, k], features, feature_names, max_features=max_features)
        return
    map_ = np.asarray(e.maps[i, k])
    if map_.ndim == 1:  # a sequence strip
        ax.imshow(heatmap(map_, **options), aspect="auto", interpolation="nearest")
    elif shown is not None and map_.ndim == 2:
        if method_display(e.method)[1] and overlay_cams:
            ax.imshow(draw_mark(overlay(shown[i], map_, alpha=alpha, **options), mark))
        else:  # scaled at its own resolution, then shown at the image's size and aspect
            unit = normalize(map_, sign=options["sign"], clip_percentile=options["clip_percentile"])
            picture = _colorize(_resize_unit(unit, shown[i].shape[:2]), options["cmap"], options["sign"])
            ax.imshow(draw_mark(picture, mark))
    else:
        square = map_.ndim == 2 and map_.shape[0] == map_.shape[1]
        image_like = originals is None and np.asarray(e.maps).ndim == 4
        ax.imshow(heatmap(map_, **options), aspect="equal" if image_like or square else "auto")
    _style(ax)


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
