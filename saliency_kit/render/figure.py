"""Figures: labelled grids of maps (:func:`grid`), their PNG (:func:`explanation_png`) and
:func:`show` in notebooks and scripts, on a bare :class:`matplotlib.figure.Figure` (the pyplot
global state is never touched).
"""

from __future__ import annotations

import dataclasses
import io
import sys
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..files import png_bytes, save_png
from .colour import as_rgb, colorize, heatmap, normalize, overlay, resize_unit
from .marks import Mark, draw_mark
from .sequences import volume
from .titles import fit_text, method_display, method_title

__all__ = ["explanation_png", "grid", "show"]


def _explanations(explanation: Any) -> list:
    items = list(explanation) if isinstance(explanation, (list, tuple)) else [explanation]
    if not items:
        raise ValueError("grid() needs at least one Explanation; received an empty list.")
    batch = {np.asarray(e.maps).shape[0] for e in items}
    if len(batch) != 1:
        raise ValueError(f"grid() needs explanations of the same inputs; received batch sizes {sorted(batch)}.")
    return items


def _class_label(class_names: Any, index: int) -> str:
    if class_names is not None and 0 <= index < len(class_names):
        return str(class_names[index])
    return f"class {index}"


def _is_image(original: Any) -> bool:
    array = np.asarray(original)
    return array.ndim == 3 and array.shape[-1] in (1, 3, 4)


def _is_tabular(e: Any) -> bool:
    """Attributions ``[B, K, F]``: one value per feature of a flat input (no spatial axes).
    (Objects with only ``maps``, ``targets``, ``scores`` and ``method`` are drawn from the maps.)"""
    attributions = getattr(e, "attributions", None)
    return attributions is not None and np.ndim(attributions) == 3 and not method_display(e.method)[1]


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


def _style(ax: Any) -> None:
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


def _panel_rows(items: Any, max_columns: int) -> list[list[tuple]]:
    """The (explanation, k) panels of one input, in rows: one row per method (wrapped after
    ``max_columns``) when some method explains several classes, else every method side by side."""
    if max(np.asarray(e.maps).shape[1] for e in items) == 1:
        groups = [[(e, 0) for e in items]]
    else:
        groups = [[(e, k) for k in range(np.asarray(e.maps).shape[1])] for e in items]
    return [group[i : i + max_columns] for group in groups for i in range(0, len(group), max_columns)]


def grid(
    explanation: Any,
    originals: Any = None,
    class_names: Sequence[str] | None = None,
    *,
    sign: str = "abs",
    clip_percentile: float = 99.0,
    cmap: Any = None,
    overlay_cams: bool = True,
    alpha: float = 0.5,
    row_labels: Sequence[str] | None = None,
    score_name: str | None = None,
    panel_inches: float = 1.9,
    dpi: int = 150,
    max_columns: int = 5,
    feature_names: Sequence[str] | None = None,
    max_features: int = 12,
    marks: Sequence[Sequence[Mark | None]] | None = None,
) -> Any:
    """A labelled figure of the maps of one or several methods on the same inputs.

    ``explanation``: an :class:`~saliency_kit.Explanation` or a list of them (several methods on
    the same inputs). ``originals``: the inputs as loaded (uint8 images ``[B, H, W, 3]`` or a list
    of arrays of any sizes; sequences ``[B, T, F]``; tabular rows ``[B, F]``), or ``None`` to leave
    out the input column.

    Layout: each input gets a block of rows. When every method explains one class the block is one
    row -- the input, then one panel per method; otherwise each method gets its own row of classes.
    A row holds at most ``max_columns`` panels and wraps after that; one-row blocks small enough
    are placed side by side (e.g. 4 inputs with one map each: two rows of up to three inputs);
    blocks stacked one per line form columns, and their method names head the first line only. Each
    panel is titled with its method (bold) and below that the class name (from ``class_names``,
    else ``"class i"``) and the score the map explains, ``score_name`` (e.g. ``"logit"``) saying
    what the score is; long names are shortened so that titles never run into each other.
    ``row_labels`` name the inputs.

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
    n_inputs = _check_grid(items, originals, row_labels, max_columns, marks)
    options = dict(sign=sign, clip_percentile=clip_percentile, cmap=cmap)
    style = _PanelStyle(options, overlay_cams, alpha, feature_names, max_features)
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
    aspect = _panel_aspect(items, shown, tabular, max_features, panel_inches)
    title_inches = 0.55  # a bold method header, then two lines: the class name and the score
    fig = Figure(
        figsize=(panel_inches * n_cols, (panel_inches * aspect + title_inches) * n_rows), dpi=dpi, layout="constrained"
    )
    axes = fig.subplots(n_rows, n_cols, squeeze=False)
    for ax in axes.flat:
        ax.set_axis_off()

    # One input per line, methods in columns: the method names head the first line only.
    headers_once = len(layout) == 1 and per_line == 1
    for i in range(n_inputs):
        first, left = (i // per_line) * len(layout), (i % per_line) * block_width
        headed = i == 0 or not headers_once
        if show_input:
            header = str(row_labels[i]) if row_labels is not None else "Input" if headed else None
            image = None if shown is None else shown[i]
            _draw_input_panel(axes[first, left], originals[i], image, header, panel_inches)
        elif row_labels is not None:
            axes[first, left].set_ylabel(fit_text(str(row_labels[i]), panel_inches * aspect, 8), fontsize=8)
        for r, row in enumerate(layout):
            for c, (e, k) in enumerate(row):
                ax = axes[first + r, left + c + int(show_input)]
                ax.set_axis_on()
                mark = marks[i][k] if marks is not None and k < len(marks[i]) else None
                _draw_panel(ax, e, i, k, originals, shown, style, mark=mark)
                title = _panel_title(e, i, k, class_names, score_name, panel_inches)
                ax.set_title(title, fontsize=_TITLE_POINTS, pad=3)
                if headed:
                    _column_header(ax, fit_text(method_title(e.method), panel_inches, 8.5))
                if row_labels is not None and not show_input and c == 0 and r > 0:
                    ax.set_ylabel(" ", fontsize=8)
    return fig


def _first_inputs(e: Any, n: int) -> Any:
    """``e`` restricted to its first ``n`` inputs (the arrays a grid reads), for display."""
    if len(np.asarray(e.maps)) <= n or not dataclasses.is_dataclass(e) or isinstance(e, type):
        return e
    names = ("attributions", "maps", "targets", "scores")
    rows = {name: getattr(e, name)[:n] for name in names if getattr(e, name) is not None}
    return dataclasses.replace(e, **rows)


def explanation_png(
    explanation: Any, originals: Any = None, class_names: Any = None, *, max_inputs: int = 8, **grid_options: Any
) -> bytes:
    """PNG bytes of :func:`grid` for an Explanation (or a list of them) -- what Jupyter shows.

    At most ``max_inputs`` inputs are drawn (the first ones), so that displaying the explanation
    of a large batch stays quick. Without ``originals`` the grid has no input column.
    """
    if not isinstance(explanation, (list, tuple)) and np.ndim(explanation.maps) == 5:  # a volume: its slices
        return png_bytes(volume(explanation, originals, class_names=class_names))
    items = [_first_inputs(e, max_inputs) for e in _explanations(explanation)]
    if originals is not None:
        originals = originals[:max_inputs]
    figure = grid(
        items if isinstance(explanation, (list, tuple)) else items[0],
        originals,
        class_names,
        **{"dpi": 100, **grid_options},
    )
    return png_bytes(figure)


def _in_notebook() -> bool:

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


def show(
    explanation: Any,
    originals: Any = None,
    class_names: Any = None,
    *,
    path: Any = None,
    block: bool | None = None,
    **grid_options: Any,
) -> None:
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
        from PIL import Image as PILImage

        picture = np.asarray(PILImage.open(io.BytesIO(png_bytes(figure))))
        height, width = picture.shape[:2]
        window = pyplot.figure(figsize=(width / figure.dpi, height / figure.dpi), dpi=figure.dpi)
        axes = window.add_axes((0, 0, 1, 1))
        axes.imshow(picture)
        axes.set_axis_off()
        pyplot.show(block=block)
    elif path is None:
        import matplotlib

        warnings.warn(
            f"render.show(): matplotlib backend {matplotlib.get_backend()!r} has no display; nothing "
            f"was shown. Pass path='grid.png' to save the grid, or use grid() and save_png().",
            UserWarning,
            stacklevel=2,
        )


_TITLE_POINTS = 7.5  # panel titles: two lines of this size, under a header of 8.5 points


def _column_header(ax: Any, text: str) -> None:
    """A bold header above the axes' two-line title (plain text: no mathtext surprises with '-' or '_')."""
    from matplotlib.transforms import ScaledTranslation

    shift = ScaledTranslation(0, (3 + 2 * _TITLE_POINTS * 1.25 + 1) / 72, ax.figure.dpi_scale_trans)
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


@dataclasses.dataclass(frozen=True)
class _PanelStyle:
    """How a grid draws its map panels (the keywords of :func:`grid` of the same names)."""

    options: dict[str, Any]  # the keywords of heatmap() and overlay(): sign, clip_percentile, cmap
    overlay_cams: bool
    alpha: float
    feature_names: Sequence[str] | None
    max_features: int


def _check_grid(items: list, originals: Any, row_labels: Any, max_columns: int, marks: Any) -> int:
    """The number of inputs the explanations ``items`` explain, after checking that the other
    arguments of :func:`grid` hold one entry per input; ``ValueError`` otherwise."""
    volumes = [np.shape(e.maps) for e in items if np.ndim(e.maps) == 5]
    if volumes:
        raise ValueError(
            f"grid() draws image, sequence and tabular maps; volume maps [B, K, D, H, W] are drawn as "
            f"slices by sk.render.volume(explanation, inputs); received maps of shape {volumes[0]}."
        )
    n_inputs = np.asarray(items[0].maps).shape[0]
    if originals is not None and len(originals) != n_inputs:
        raise ValueError(
            f"grid() needs one original per explained input ({n_inputs}); received {len(originals)} originals."
        )
    if row_labels is not None and len(row_labels) != n_inputs:
        raise ValueError(f"grid() needs one row label per input ({n_inputs}); received {len(row_labels)}.")
    if int(max_columns) < 1:
        raise ValueError(f"max_columns must be at least 1; received {max_columns!r}.")
    if marks is not None and len(marks) != n_inputs:
        raise ValueError(f"grid() needs one list of marks per input ({n_inputs}); received {len(marks)}.")
    return int(n_inputs)


def _panel_aspect(items: list, shown: list | None, tabular: bool, max_features: int, panel_inches: float) -> float:
    """Height over width of a grid's panels: room for the bars of a tabular explanation, else the
    shown images' aspect, else the maps' (``[B, K, H, W]``), else square."""
    if tabular:
        features = max(np.shape(e.attributions)[-1] for e in items if _is_tabular(e))
        return max(0.8, (0.14 * min(max_features, features) + 0.25) / panel_inches)
    if shown is not None:
        return float(np.clip(shown[0].shape[0] / shown[0].shape[1], 0.3, 3.0))
    if np.asarray(items[0].maps).ndim == 4:
        height, width = np.asarray(items[0].maps).shape[2:]
        return float(np.clip(height / width, 0.3, 3.0))
    return 1.0


def _draw_input_panel(ax: Any, original: Any, shown: np.ndarray | None, header: str | None, inches: float) -> None:
    """A grid's input panel: the image as shown (``shown`` ``[h, w, 3]``), else the original drawn
    by its kind; headed by ``header`` when given."""
    ax.set_axis_on()
    if shown is not None:
        ax.imshow(shown)
    else:
        _show_original(ax, original)
    _style(ax)
    ax.set_title(" \n ", fontsize=_TITLE_POINTS, pad=3)  # keeps the header at the height of the others
    if header is not None:
        _column_header(ax, fit_text(header, inches, 8.5))


def _panel_title(e: Any, i: int, k: int, class_names: Any, score_name: str | None, panel_inches: float) -> str:
    """Two lines under a map panel: the class name of target ``[i, k]`` and the score the map
    explains (none for an explanation made with ``with_scores=False``)."""
    target = int(np.asarray(e.targets)[i, k])
    value = ""
    if getattr(e, "scores", None) is not None:
        score = float(np.asarray(e.scores)[i, k])
        value = f"{score_name} {score:.3g}" if score_name else f"{score:.3g}"
    return f"{fit_text(_class_label(class_names, target), panel_inches, _TITLE_POINTS)}\n{value}"


def _draw_panel(
    ax: Any, e: Any, i: int, k: int, originals: Any, shown: list | None, style: _PanelStyle, mark: Mark | None = None
) -> None:
    """One map of a grid: bars (tabular), a strip (sequence), an overlay (CAM) or a heatmap (an
    image panel with ``mark`` drawn on it)."""
    options = style.options
    if _is_tabular(e):
        features = None if originals is None else originals[i]
        _bars(ax, np.asarray(e.attributions)[i, k], features, style.feature_names, max_features=style.max_features)
        return
    map_ = np.asarray(e.maps[i, k])
    if map_.ndim == 1:  # a sequence strip
        ax.imshow(heatmap(map_, **options), aspect="auto", interpolation="nearest")
    elif shown is not None and map_.ndim == 2:
        if method_display(e.method)[1] and style.overlay_cams:
            ax.imshow(draw_mark(overlay(shown[i], map_, alpha=style.alpha, **options), mark))
        else:  # scaled at its own resolution, then shown at the image's size and aspect
            unit = normalize(map_, sign=options["sign"], clip_percentile=options["clip_percentile"])
            picture = colorize(resize_unit(unit, shown[i].shape[:2]), options["cmap"], options["sign"])
            ax.imshow(draw_mark(picture, mark))
    else:
        square = map_.ndim == 2 and map_.shape[0] == map_.shape[1]
        image_like = originals is None and np.asarray(e.maps).ndim == 4
        ax.imshow(heatmap(map_, **options), aspect="equal" if image_like or square else "auto")
    _style(ax)
