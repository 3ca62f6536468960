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
from .marks import Mark
from .panels import Panels, draw_input, draw_map, grid_panels, is_tabular, label_map
from .sequences import volume
from .style import Style, resolve, with_defaults
from .titles import fit_text

__all__ = ["explanation_png", "grid", "show"]


def _explanations(explanation: Any) -> list:
    items = list(explanation) if isinstance(explanation, (list, tuple)) else [explanation]
    if not items:
        raise ValueError("grid() needs at least one Explanation; received an empty list.")
    batch = {np.asarray(e.maps).shape[0] for e in items}
    if len(batch) != 1:
        raise ValueError(f"grid() needs explanations of the same inputs; received batch sizes {sorted(batch)}.")
    return items


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
    style: Style | None = None,
    row_labels: Sequence[str] | None = None,
    score_name: str | None = None,
    feature_names: Sequence[str] | None = None,
    marks: Sequence[Sequence[Mark | None]] | None = None,
    **style_options: Any,
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

    Looks: ``style`` (a :class:`Style`) and its fields as keywords -- ``sign`` (default
    ``"abs"``), ``clip_percentile``, ``cmap``, ``alpha``, ``overlay_cams``, ``dpi`` (default
    150), ``panel_inches`` (default 1.9), ``max_columns`` and ``max_features``.
    """
    style = resolve(grid, style, style_options)
    items = _explanations(explanation)
    n_inputs = _check_grid(items, originals, row_labels, marks)
    tabular = any(is_tabular(e) for e in items)
    show_input = originals is not None and not tabular  # tabular values are written on the bars
    layout = _grid_layout(items, n_inputs, show_input, int(style.max_columns))
    panels = grid_panels(items, originals, tabular, style, class_names, row_labels, score_name, feature_names, marks)
    axes = _grid_axes(layout, panels)
    for i in range(n_inputs):
        _draw_block(axes, layout, panels, i)
    return axes[0, 0].figure


@dataclasses.dataclass(frozen=True)
class _Layout:
    """Where a grid puts its panels: each input's block of ``rows`` (lists of (explanation, k)
    panels, the same for every input), ``block_width`` axes wide (the input's panel first when
    ``show_input``), ``per_line`` blocks side by side."""

    rows: list[list[tuple]]
    n_inputs: int
    show_input: bool
    block_width: int
    per_line: int

    @property
    def shape(self) -> tuple[int, int]:
        """``(rows, columns)`` of the figure's axes."""
        return len(self.rows) * -(-self.n_inputs // self.per_line), self.block_width * self.per_line

    def corner(self, i: int) -> tuple[int, int]:
        """``(row, column)`` of the top-left axes of input ``i``'s block."""
        return (i // self.per_line) * len(self.rows), (i % self.per_line) * self.block_width

    def headed(self, i: int) -> bool:
        """Whether input ``i``'s block carries the method names: every block, except when the
        blocks are one row stacked one per line (methods in columns), where the first does."""
        return i == 0 or not (len(self.rows) == 1 and self.per_line == 1)


def _grid_layout(items: list, n_inputs: int, show_input: bool, max_columns: int) -> _Layout:
    rows = _panel_rows(items, max_columns)
    block_width = max(len(row) for row in rows) + int(show_input)
    # Inputs with a single short row each sit side by side, as many as max_columns allows.
    per_line = max(1, (max_columns + int(show_input)) // block_width) if len(rows) == 1 else 1
    return _Layout(rows, n_inputs, show_input, block_width, min(per_line, n_inputs))


def _grid_axes(layout: _Layout, panels: Panels) -> np.ndarray:
    """The axes ``[rows, columns]`` of a new figure for ``layout``, each switched off until drawn."""
    from matplotlib.figure import Figure

    title_inches = 0.55  # a bold method header, then two lines: the class name and the score
    n_rows, n_cols = layout.shape
    width, height = panels.inches * n_cols, (panels.inches * panels.aspect + title_inches) * n_rows
    fig = Figure(figsize=(width, height), dpi=panels.style.dpi, layout="constrained")
    axes = fig.subplots(n_rows, n_cols, squeeze=False)
    for ax in axes.flat:
        ax.set_axis_off()
    return axes


def _draw_block(axes: np.ndarray, layout: _Layout, panels: Panels, i: int) -> None:
    """Input ``i``'s block: its input panel (or its row label), then its map panels, titled."""
    top, left = layout.corner(i)
    headed, row_labels = layout.headed(i), panels.row_labels
    if layout.show_input:
        header = str(row_labels[i]) if row_labels is not None else "Input" if headed else None
        image = None if panels.shown is None else panels.shown[i]
        draw_input(axes[top, left], panels.originals[i], image, header, panels.inches)
    elif row_labels is not None:
        axes[top, left].set_ylabel(fit_text(str(row_labels[i]), panels.inches * panels.aspect, 8), fontsize=8)
    for r, row in enumerate(layout.rows):
        for c, (e, k) in enumerate(row):
            ax = axes[top + r, left + c + int(layout.show_input)]
            ax.set_axis_on()
            draw_map(ax, e, i, k, panels)
            label_map(ax, e, i, k, panels, headed)
            if row_labels is not None and not layout.show_input and c == 0 and r > 0:
                ax.set_ylabel(" ", fontsize=8)


def _first_inputs(e: Any, n: int) -> Any:
    """``e`` restricted to its first ``n`` inputs (the arrays a grid reads), for display."""
    if len(np.asarray(e.maps)) <= n or not dataclasses.is_dataclass(e) or isinstance(e, type):
        return e
    names = ("attributions", "maps", "targets", "scores")
    rows = {name: getattr(e, name)[:n] for name in names if getattr(e, name) is not None}
    return dataclasses.replace(e, **rows)


def explanation_png(
    explanation: Any,
    originals: Any = None,
    class_names: Any = None,
    *,
    max_inputs: int = 8,
    style: Style | None = None,
    **grid_options: Any,
) -> bytes:
    """PNG bytes of :func:`grid` for an Explanation (or a list of them) -- what Jupyter shows, at
    100 dpi unless ``style`` or a ``dpi`` keyword says otherwise.

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
        style=with_defaults(style, dpi=100),
        **grid_options,
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


def _check_grid(items: list, originals: Any, row_labels: Any, marks: Any) -> int:
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
    if marks is not None and len(marks) != n_inputs:
        raise ValueError(f"grid() needs one list of marks per input ({n_inputs}); received {len(marks)}.")
    return int(n_inputs)
