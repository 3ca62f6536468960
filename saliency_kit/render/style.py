"""How figures look: :class:`Style`, the presentation options of :func:`~.figure.grid`,
:func:`~.sequences.series` and :func:`~.sequences.volume`, declared once.

    style = sk.render.Style(sign="all", cmap="RdBu_r", dpi=200)
    fig = sk.render.grid(expl, originals, style=style)          # the same as the keywords:
    fig = sk.render.grid(expl, originals, sign="all", cmap="RdBu_r", dpi=200)
    fig = sk.render.volume(expl3d, volumes, style=style, dpi=100)  # a keyword overrides the style
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import numbers
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from .colour import DEFAULT_CMAPS, colormap

__all__ = ["FIGURE_DEFAULTS", "FIGURE_KEYWORDS", "Style", "resolve", "with_defaults"]


@dataclasses.dataclass(frozen=True)
class Style:
    """How a figure draws maps. Each figure reads the fields it draws with, and takes them as
    keywords too: ``grid(expl, x, sign="all")`` is ``grid(expl, x, style=Style(sign="all"))``, and
    a keyword overrides the same field of ``style``. A figure ignores the fields it does not draw
    with, so one Style serves them all; a field left ``None`` takes the figure's own default.

    Fields (drawn by; default; valid values):

    - ``sign`` (all): how a map is reduced before scaling (see :func:`~.colour.normalize`):
      ``"abs"``, ``"positive"``, ``"negative"`` or ``"all"`` (diverging, zero at the centre
      colour). Default None: ``"abs"`` in a grid; in a series or a volume ``"all"`` for a signed
      method or a map with negative values, else ``"abs"``.
    - ``clip_percentile`` (all): the percentile of the map's magnitudes that reaches the end of the
      colour scale, in (0, 100]. Default 99.0.
    - ``cmap`` (all): a matplotlib colormap name or ``Colormap``. Default None:
      :data:`~.colour.DEFAULT_CMAPS` ``[sign]``.
    - ``alpha`` (grid, volume): the weight of the map over the picture under it (a grid's CAM
      overlays, a volume's grey input), in [0, 1]. Default 0.5.
    - ``overlay_cams`` (grid): lay coarse CAM maps over the image (else draw them as heatmaps at
      the image's size), a bool. Default True.
    - ``dpi`` (all): dots per inch, > 0. Default None: 150 in a grid, 100 in a series or a volume.
    - ``panel_inches`` (grid, volume): the width of one panel in inches, > 0. Default None: 1.9 in
      a grid, 1.5 in a volume.
    - ``max_columns`` (grid): panels in a row before it wraps, a whole number >= 1. Default 5.
    - ``max_features`` (grid, series): the features drawn, a whole number >= 1 (a grid: the bars
      of a tabular explanation, the largest in magnitude; a series: the first features). Default 12.
    - ``width_inches`` (series): the figure's width in inches, > 0. Default 7.0.
    - ``row_inches`` (series): the height of one feature's line in inches, > 0. Default 0.9.

    A value out of its range raises one ``ValueError`` naming the field and its valid values.
    """

    sign: str | None = None
    clip_percentile: float = 99.0
    cmap: Any = None
    alpha: float = 0.5
    overlay_cams: bool = True
    dpi: float | None = None
    panel_inches: float | None = None
    max_columns: int = 5
    max_features: int = 12
    width_inches: float = 7.0
    row_inches: float = 0.9

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            valid, accepts = _VALID[field.name]  # every field declares its valid values
            value = getattr(self, field.name)
            if not accepts(value):
                raise ValueError(f"Style needs {field.name} {valid}; received {value!r}.")
        if isinstance(self.cmap, str):
            colormap(self.cmap, "abs")  # an unknown name: ValueError naming the colormaps to use


def _real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def _positive(value: Any) -> bool:
    return _real(value) and value > 0


def _whole(value: Any) -> bool:
    return _real(value) and float(value).is_integer() and value >= 1


def _is_colormap(value: Any) -> bool:
    from matplotlib.colors import Colormap

    return value is None or isinstance(value, (str, Colormap))


#: Each field's valid values: ``(as an error states them, test)``.
_VALID: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "sign": (f"in {sorted(DEFAULT_CMAPS)} or None", lambda v: v is None or (isinstance(v, str) and v in DEFAULT_CMAPS)),
    "clip_percentile": ("in (0, 100]", lambda v: _real(v) and 0 < v <= 100),
    "cmap": ("to be a matplotlib colormap name or Colormap, or None", _is_colormap),
    "alpha": ("in [0, 1]", lambda v: _real(v) and 0 <= v <= 1),
    "overlay_cams": ("to be True or False", lambda v: isinstance(v, (bool, np.bool_))),
    "dpi": ("> 0 or None", lambda v: v is None or _positive(v)),
    "panel_inches": ("> 0 or None", lambda v: v is None or _positive(v)),
    "max_columns": ("to be a whole number >= 1", _whole),
    "max_features": ("to be a whole number >= 1", _whole),
    "width_inches": ("> 0", _positive),
    "row_inches": ("> 0", _positive),
}

#: The fields each figure draws with: its style keywords.
FIGURE_KEYWORDS = {
    "grid": (
        "sign", "clip_percentile", "cmap", "alpha", "overlay_cams", "dpi", "panel_inches", "max_columns", "max_features"
    ),
    "series": ("sign", "clip_percentile", "cmap", "dpi", "max_features", "width_inches", "row_inches"),
    "volume": ("sign", "clip_percentile", "cmap", "alpha", "dpi", "panel_inches"),
}  # fmt: skip

#: Each figure's own values for the fields a Style leaves None (a series' or a volume's ``sign``
#: stays None: chosen from the map).
FIGURE_DEFAULTS: dict[str, dict[str, Any]] = {
    "grid": {"sign": "abs", "dpi": 150, "panel_inches": 1.9},
    "series": {"dpi": 100},
    "volume": {"dpi": 100, "panel_inches": 1.5},
}


def with_defaults(style: Style | None, **defaults: Any) -> Style:
    """``style`` (``Style()`` for None) with ``defaults`` for the fields it leaves None."""
    if style is None:
        style = Style()
    elif not isinstance(style, Style):
        raise TypeError(f"style must be a sk.render.Style or None; received {type(style).__name__}.")
    return dataclasses.replace(style, **{name: v for name, v in defaults.items() if getattr(style, name) is None})


def resolve(figure: Callable[..., Any], style: Style | None, options: Mapping[str, Any]) -> Style:
    """The Style ``figure`` (:func:`~.figure.grid`, :func:`~.sequences.series` or
    :func:`~.sequences.volume`) draws with: ``style`` (default ``Style()``), its keyword
    ``options`` over it, the figure's own defaults for the fields still None. A keyword that is
    not one of the figure's is a ``TypeError`` naming those it takes, as Python's own."""
    name = figure.__name__
    unknown = [option for option in options if option not in FIGURE_KEYWORDS[name]]
    if unknown:
        named = [p.name for p in inspect.signature(figure).parameters.values() if p.kind != p.VAR_KEYWORD]
        raise TypeError(
            f"{name}() got an unexpected keyword argument {unknown[0]!r}; it takes {', '.join(named)} "
            f"and the style keywords {', '.join(FIGURE_KEYWORDS[name])} (fields of sk.render.Style)."
        )
    return with_defaults(dataclasses.replace(with_defaults(style), **options), **FIGURE_DEFAULTS[name])
