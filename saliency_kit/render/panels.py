"""A grid's panels (:func:`~.figure.grid`): the input as loaded, and each map drawn by its kind --
bars of a tabular explanation, a strip of a sequence, a CAM laid over the image, a heatmap at the
image's size -- titled with its method, class and score.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from .colour import as_rgb, colorize, heatmap, normalize, overlay, resize_unit
from .marks import Mark, draw_mark
from .style import Style
from .titles import fit_text, method_display, method_title

__all__ = ["Panels", "draw_input", "draw_map", "grid_panels", "is_tabular", "label_map"]

TITLE_POINTS = 7.5  # panel titles: two lines of this size, under a header of 8.5 points


@dataclasses.dataclass(frozen=True)
class Panels:
    """What a grid's panels show besides their maps: the arguments of :func:`~.figure.grid` of the
    same names, ``shown`` the image originals as drawn (uint8 ``[h, w, 3]`` each, or None), ``inches``
    the panels' width and ``aspect`` their height over width."""

    originals: Any
    shown: list | None
    style: Style
    inches: float
    aspect: float
    class_names: Sequence[str] | None
    row_labels: Sequence[str] | None
    score_name: str | None
    feature_names: Sequence[str] | None
    marks: Sequence[Sequence[Mark | None]] | None

    def mark(self, i: int, k: int) -> Mark | None:
        return self.marks[i][k] if self.marks is not None and k < len(self.marks[i]) else None


def grid_panels(
    items: list,
    originals: Any,
    tabular: bool,
    style: Style,
    class_names: Sequence[str] | None,
    row_labels: Sequence[str] | None,
    score_name: str | None,
    feature_names: Sequence[str] | None,
    marks: Sequence[Sequence[Mark | None]] | None,
) -> Panels:
    """The :class:`Panels` of a grid of ``items`` (its explanations): the image originals shrunk to
    the panels' size at the figure's dpi, the panels' aspect from them (or from the maps, or from
    the bars of a ``tabular`` explanation)."""
    inches, dpi = style.panel_inches, style.dpi
    assert inches is not None and dpi is not None  # resolve() gave the grid's own defaults
    shown = None
    if originals is not None and _is_image(originals[0]):
        shown = [_display_image(o, max_side=max(64, int(inches * dpi))) for o in originals]
    aspect = _panel_aspect(items, shown, tabular, int(style.max_features), inches)
    return Panels(originals, shown, style, inches, aspect, class_names, row_labels, score_name, feature_names, marks)


def draw_input(ax: Any, original: Any, shown: np.ndarray | None, header: str | None, inches: float) -> None:
    """A grid's input panel: the image as shown (``shown`` ``[h, w, 3]``), else the original drawn
    by its kind; headed by ``header`` when given."""
    ax.set_axis_on()
    if shown is not None:
        ax.imshow(shown)
    else:
        _show_original(ax, original)
    _plain(ax)
    ax.set_title(" \n ", fontsize=TITLE_POINTS, pad=3)  # keeps the header at the height of the others
    if header is not None:
        _column_header(ax, fit_text(header, inches, 8.5))


def draw_map(ax: Any, e: Any, i: int, k: int, panels: Panels) -> None:
    """One map of a grid: bars (tabular), a strip (sequence), an overlay (CAM) or a heatmap (an
    image panel with its mark drawn on it)."""
    style, shown = panels.style, panels.shown
    options: dict[str, Any] = dict(sign=style.sign, clip_percentile=style.clip_percentile, cmap=style.cmap)
    if is_tabular(e):
        features = None if panels.originals is None else panels.originals[i]
        values = np.asarray(e.attributions)[i, k]
        _bars(ax, values, features, panels.feature_names, max_features=int(style.max_features))
        return
    map_ = np.asarray(e.maps[i, k])
    if map_.ndim == 1:  # a sequence strip
        ax.imshow(heatmap(map_, **options), aspect="auto", interpolation="nearest")
    elif shown is not None and map_.ndim == 2:
        if method_display(e.method)[1] and style.overlay_cams:
            ax.imshow(draw_mark(overlay(shown[i], map_, alpha=style.alpha, **options), panels.mark(i, k)))
        else:  # scaled at its own resolution, then shown at the image's size and aspect
            unit = normalize(map_, sign=options["sign"], clip_percentile=options["clip_percentile"])
            picture = colorize(resize_unit(unit, shown[i].shape[:2]), options["cmap"], options["sign"])
            ax.imshow(draw_mark(picture, panels.mark(i, k)))
    else:
        square = map_.ndim == 2 and map_.shape[0] == map_.shape[1]
        image_like = panels.originals is None and np.asarray(e.maps).ndim == 4
        ax.imshow(heatmap(map_, **options), aspect="equal" if image_like or square else "auto")
    _plain(ax)


def label_map(ax: Any, e: Any, i: int, k: int, panels: Panels, headed: bool) -> None:
    """A map panel's two-line title (class, score) and, when ``headed``, its method's name above."""
    title = _panel_title(e, i, k, panels.class_names, panels.score_name, panels.inches)
    ax.set_title(title, fontsize=TITLE_POINTS, pad=3)
    if headed:
        _column_header(ax, fit_text(method_title(e.method), panels.inches, 8.5))


def is_tabular(e: Any) -> bool:
    """Attributions ``[B, K, F]``: one value per feature of a flat input (no spatial axes).
    (Objects with only ``maps``, ``targets``, ``scores`` and ``method`` are drawn from the maps.)"""
    attributions = getattr(e, "attributions", None)
    return attributions is not None and np.ndim(attributions) == 3 and not method_display(e.method)[1]


def _panel_aspect(items: list, shown: list | None, tabular: bool, max_features: int, panel_inches: float) -> float:
    """Height over width of a grid's panels: room for the bars of a tabular explanation, else the
    shown images' aspect, else the maps' (``[B, K, H, W]``), else square."""
    if tabular:
        features = max(np.shape(e.attributions)[-1] for e in items if is_tabular(e))
        return max(0.8, (0.14 * min(max_features, features) + 0.25) / panel_inches)
    if shown is not None:
        return float(np.clip(shown[0].shape[0] / shown[0].shape[1], 0.3, 3.0))
    if np.asarray(items[0].maps).ndim == 4:
        height, width = np.asarray(items[0].maps).shape[2:]
        return float(np.clip(height / width, 0.3, 3.0))
    return 1.0


def _panel_title(e: Any, i: int, k: int, class_names: Any, score_name: str | None, panel_inches: float) -> str:
    """Two lines under a map panel: the class name of target ``[i, k]`` and the score the map
    explains (none for an explanation made with ``with_scores=False``)."""
    target = int(np.asarray(e.targets)[i, k])
    value = ""
    if getattr(e, "scores", None) is not None:
        score = float(np.asarray(e.scores)[i, k])
        value = f"{score_name} {score:.3g}" if score_name else f"{score:.3g}"
    return f"{fit_text(_class_label(class_names, target), panel_inches, TITLE_POINTS)}\n{value}"


def _column_header(ax: Any, text: str) -> None:
    """A bold header above the axes' two-line title (plain text: no mathtext surprises with '-' or '_')."""
    from matplotlib.transforms import ScaledTranslation

    shift = ScaledTranslation(0, (3 + 2 * TITLE_POINTS * 1.25 + 1) / 72, ax.figure.dpi_scale_trans)
    ax.text(
        0.5,
        1.0,
        text,
        transform=ax.transAxes + shift,
        ha="center",
        va="bottom",
        fontsize=8.5,
        fontweight="bold",
        clip_on=False,
    )


def _class_label(class_names: Any, index: int) -> str:
    if class_names is not None and 0 <= index < len(class_names):
        return str(class_names[index])
    return f"class {index}"


def _is_image(original: Any) -> bool:
    array = np.asarray(original)
    return array.ndim == 3 and array.shape[-1] in (1, 3, 4)


def _display_image(original: Any, max_side: int) -> np.ndarray:
    """The original as uint8 RGB, shrunk (never enlarged) so that its longer side is ``max_side``."""
    from PIL import Image

    rgb = as_rgb(original)
    height, width = rgb.shape[:2]
    if max(height, width) <= max_side:
        return rgb
    scale = max_side / max(height, width)
    size = (max(1, round(width * scale)), max(1, round(height * scale)))
    return np.asarray(Image.fromarray(rgb).resize(size, Image.Resampling.LANCZOS))


def _show_original(ax: Any, original: Any) -> None:
    array = np.asarray(original)
    if array.ndim == 3 and array.shape[-1] in (1, 3, 4):
        ax.imshow(as_rgb(array))
    elif array.ndim == 2:  # a [T, F] sequence: time runs left to right
        ax.imshow(array.T, aspect="auto", cmap="viridis", interpolation="nearest")
    elif array.ndim == 1:
        ax.plot(np.arange(array.size), array, color="0.2", linewidth=1.0)
        ax.set_xlim(0, max(array.size - 1, 1))
    else:
        raise ValueError(
            f"cannot show an original of shape {array.shape} in a grid; expected an image "
            f"[H, W, C], a sequence [T, F] or [T]; received shape {array.shape}."
        )


def _plain(ax: Any) -> None:
    """No ticks, no frame."""
    ax.set_xticks([])
    ax.set_yticks([])
    for spine in ax.spines.values():
        spine.set_visible(False)


def _bars(ax: Any, values: Any, features: Any, feature_names: Any, *, max_features: int) -> None:
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
