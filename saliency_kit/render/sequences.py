"""Maps that are not images: time series, volumes and tokens.

fig = sk.render.series(expl, series, k=0, index=0)   # maps [B, K, T]: each feature a line, the map a band
fig = sk.render.volume(expl3d, volumes, slices=6)     # maps [B, K, D, H, W]: a row of slices
page = sk.render.tokens_html(expl_text, tokens)       # maps [B, K, T]: coloured, escaped spans
expl_text.with_tokens(tokens)                         # shows as those spans in a notebook
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..methods import get
from .colour import DEFAULT_CMAPS, normalize
from .colour import colormap as find_colormap
from .style import Style, resolve
from .titles import method_title

__all__ = ["series", "volume", "tokens_html", "check_tokens", "token_colours", "legend_stops"]


def _one_map(explanation: Any, index: int, k: int, what: str) -> np.ndarray:
    """``explanation.maps[index, k]`` with ``index`` and ``k`` checked (of its token input, when
    a model's several inputs were explained)."""
    maps = np.asarray(getattr(explanation, "token_maps", explanation.maps))
    if maps.ndim < 3:
        raise ValueError(
            f"{what}() needs maps [B, K, ...] with at least one axis per input; received maps of shape {maps.shape}."
        )
    for name, value, limit in (("index", index, maps.shape[0]), ("k", k, maps.shape[1])):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 <= value < limit:
            raise ValueError(f"{what}() needs {name} in [0, {limit}); received {value!r}.")
    return maps[index, k]


def _default_sign(explanation: Any, values: np.ndarray) -> str:
    """``"all"`` (diverging) for a method whose sign matters, or a map with negative values;
    ``"abs"`` otherwise."""
    try:
        if get(explanation.method).signed:
            return "all"
    except (ValueError, TypeError):
        pass
    return "all" if np.nanmin(values) < 0 else "abs"


def _colour_scale(values: np.ndarray, sign: str, clip_percentile: float) -> float:
    """The value :func:`saliency_kit.render.normalize` maps to the end of the colour scale."""
    values = np.asarray(values, np.float64)
    if sign == "positive":
        values = np.where(values > 0, values, 0.0)
    elif sign == "negative":
        values = np.where(values < 0, -values, 0.0)
    magnitude = np.abs(values[np.isfinite(values)])
    if not magnitude.size:
        return 0.0
    scale = float(np.percentile(magnitude, clip_percentile))
    return scale if scale > 0 else float(magnitude.max())


def _scale_bar(fig: Any, axes: Any, sign: str, cmap: Any, scale: float, label: str) -> None:
    """A colour bar beside ``axes`` labelled in the map's own units."""
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize

    low = -scale if sign == "all" else 0.0
    mappable = ScalarMappable(norm=Normalize(low, scale if scale > 0 else 1.0), cmap=cmap)
    bar = fig.colorbar(mappable, ax=axes, fraction=0.04, pad=0.02, shrink=0.9)
    bar.set_label(label, fontsize=7)
    bar.ax.tick_params(labelsize=6)


def _figure_heading(explanation: Any, index: int, k: int, class_names: Any) -> str:
    target = int(np.asarray(explanation.targets)[index, k])
    name = str(class_names[target]) if class_names is not None and 0 <= target < len(class_names) else f"class {target}"
    heading = f"{method_title(explanation.method)} \u00b7 input {index} \u00b7 {name}"
    if getattr(explanation, "scores", None) is None:  # made with_scores=False
        return heading
    return f"{heading} \u00b7 score {float(np.asarray(explanation.scores)[index, k]):.3g}"


def _sign_and_colormap(style: Style, explanation: Any, values: np.ndarray) -> tuple[str, Any]:
    """The ``sign`` ``values`` are drawn with (the style's, else chosen from the map) and its colormap."""
    sign = _default_sign(explanation, values) if style.sign is None else style.sign
    return sign, find_colormap(style.cmap if style.cmap is not None else DEFAULT_CMAPS[sign], sign)


def _map_of_rank(explanation: Any, index: int, k: int, rank: int) -> np.ndarray:
    """``explanation.maps[index, k]`` as float64, refused in one line (naming the figure that draws
    it) unless it has ``rank`` axes: 1 for :func:`series`, 3 for :func:`volume`."""
    name, maps = _DRAWN_BY[rank]
    map_ = np.asarray(_one_map(explanation, index, k, name), np.float64)
    if map_.ndim != rank:
        route = f"use sk.render.{_DRAWN_BY[map_.ndim][0]}" if map_.ndim in _DRAWN_BY else "use sk.render.grid"
        raise ValueError(
            f"{name}() draws {maps}; {route} for maps of one input of shape "
            f"{map_.shape}; received maps of shape {np.shape(explanation.maps)}."
        )
    return map_


#: The figure that draws a map of one input of each rank, and its maps.
_DRAWN_BY = {1: ("series", "time-series maps [B, K, T]"), 3: ("volume", "volume maps [B, K, D, H, W]")}


# -- time series -----------------------------------------------------------------------------------------
def _series_input(inputs: Any, index: int, length: int, count: int) -> np.ndarray:
    """One input of ``inputs`` as ``[T, F]`` (channels-first ``[F, T]`` and univariate ``[T]`` accepted)."""
    array = np.asarray(inputs)
    if array.ndim not in (2, 3) or len(array) != count:
        raise ValueError(
            f"series() needs the explained inputs [B, T, F] (or [B, T]), B = {count}; received shape {array.shape}."
        )
    x = np.asarray(array[index], np.float64)
    if x.ndim == 1:
        x = x[:, None]
    if x.shape[0] == length:
        return x
    if x.shape[1] == length:  # channels first: [F, T]
        return x.T
    raise ValueError(
        f"series() needs inputs whose time axis has the map's length {length}; received one input "
        f"of shape {array.shape[1:]}."
    )


def series(
    explanation: Any,
    inputs: Any,
    *,
    k: int = 0,
    index: int = 0,
    feature_names: Sequence[str] | None = None,
    class_names: Sequence[str] | None = None,
    per_feature: bool = False,
    style: Style | None = None,
    **style_options: Any,
) -> Any:
    """A time series with its map: each feature a line, the map a coloured band under it.

    ``explanation``: an :class:`~saliency_kit.Explanation` whose maps are ``[B, K, T]`` (a Conv1D
    CAM, or any method's map of a ``[B, T, F]`` input); ``inputs``: the explained inputs
    ``[B, T, F]`` (``[B, F, T]`` for a channels-first model, found from the map's length; ``[B, T]``
    for one feature). Draws input ``index`` and target ``k``. ``per_feature=True``: each band is
    that feature's own attribution ``attributions[index, k, :, f]`` rather than the map (methods
    with a feature axis). Bands share one colour scale, with a colour bar in the map's units. At
    most ``max_features`` features are drawn (the first ones; the title says so). Returns a bare
    matplotlib Figure.

    Looks: ``style`` (a :class:`Style`) and its fields as keywords -- ``sign`` (default: chosen
    from the map), ``clip_percentile``, ``cmap``, ``dpi`` (default 100), ``max_features``,
    ``width_inches`` and ``row_inches``.
    """
    from matplotlib.figure import Figure

    style = resolve(series, style, style_options)
    map_ = _map_of_rank(explanation, index, k, 1)
    length = map_.size
    x = _series_input(inputs, index, length, np.shape(explanation.maps)[0])
    features = x.shape[1]
    if feature_names is not None and len(feature_names) != features:
        raise ValueError(f"series() needs one feature name per feature ({features}); received {len(feature_names)}.")
    shown = min(features, int(style.max_features))
    bands = _feature_bands(explanation, index, k, (length, features))[:shown] if per_feature else map_[None]
    sign, colormap = _sign_and_colormap(style, explanation, bands)
    unit = np.broadcast_to(normalize(bands, sign=sign, clip_percentile=style.clip_percentile), (shown, length))
    height = shown * style.row_inches * 1.3 + 0.7
    fig = Figure(figsize=(style.width_inches, height), dpi=style.dpi, layout="constrained")
    axes = _draw_rows(fig, x[:, :shown], unit, colormap, feature_names)
    title = _figure_heading(explanation, index, k, class_names)
    if shown < features:
        title += f" \u00b7 first {shown} of {features} features"
    fig.suptitle(title, fontsize=8)
    scale = _colour_scale(bands, sign, style.clip_percentile)
    _scale_bar(fig, axes, sign, colormap, scale, "attribution" if per_feature else "map")
    return fig


def _feature_bands(explanation: Any, index: int, k: int, shape: tuple[int, int]) -> np.ndarray:
    """Each feature's own attribution ``[F, T]`` for input ``index`` and target ``k``, from
    attributions ``[B, K, T, F]`` (or ``[B, K, F, T]``); ``shape`` is ``(T, F)``."""
    attributions = np.asarray(explanation.attributions)[index, k]
    if attributions.shape not in (shape, shape[::-1]):
        raise ValueError(
            f"per_feature=True needs attributions [T, F] per input and target {shape}; "
            f"received {attributions.shape} (a CAM has one value per time step: use the map)."
        )
    bands = attributions if attributions.shape == shape else attributions.T
    return np.asarray(bands, np.float64).T  # [F, T], scaled together


def _draw_rows(fig: Any, x: np.ndarray, unit: np.ndarray, colormap: Any, feature_names: Any) -> list:
    """One row per feature of ``x`` ``[T, F]``: its line, and under it its band of ``unit``
    ``[F, T]`` (values in [0, 1] on ``colormap``); returns the axes, line and band by feature."""
    length, features = x.shape
    grid = fig.add_gridspec(2 * features, 1, height_ratios=[1.0, 0.3] * features)
    steps = np.arange(length)
    axes = []
    for f in range(features):
        line = fig.add_subplot(grid[2 * f])
        band = fig.add_subplot(grid[2 * f + 1], sharex=line)
        line.plot(steps, x[:, f], color="0.15", linewidth=1.0)
        name = str(feature_names[f]) if feature_names is not None else f"x{f}"
        line.set_ylabel(name, fontsize=7, rotation=0, ha="right", va="center")
        line.tick_params(labelsize=6, labelbottom=False, length=2)
        extent = (-0.5, length - 0.5, 0.0, 1.0)
        band.imshow(
            unit[f][None], aspect="auto", cmap=colormap, vmin=0.0, vmax=1.0, interpolation="nearest", extent=extent
        )
        band.set_yticks([])
        band.tick_params(labelsize=6, labelbottom=f == features - 1, length=2)
        for spine in ("top", "right"):
            line.spines[spine].set_visible(False)
        axes += [line, band]
    axes[0].set_xlim(-0.5, length - 0.5)
    axes[-1].set_xlabel("time step", fontsize=7)
    return axes


# -- volumes ---------------------------------------------------------------------------------------------
_AXIS_NAMES = ("depth", "height", "width")


def _volume_input(inputs: Any, index: int, shape: tuple, count: int) -> np.ndarray:
    """One input of ``inputs`` as a grey volume ``[D, H, W]`` in [0, 1] (channels averaged)."""
    array = np.asarray(inputs)
    if len(array) != count:
        raise ValueError(f"volume() needs the explained inputs, B = {count}; received shape {array.shape}.")
    x = np.asarray(array[index], np.float64)
    if x.shape == shape:
        grey = x
    elif x.ndim == 4 and x.shape[:3] == shape:
        grey = x.mean(axis=-1)
    elif x.ndim == 4 and x.shape[1:] == shape:  # channels first
        grey = x.mean(axis=0)
    else:
        raise ValueError(
            f"volume() needs inputs [B, D, H, W(, C)] matching the map {shape}; received one input of shape {x.shape}."
        )
    grey = np.nan_to_num(grey)
    low, high = grey.min(), grey.max()
    return (grey - low) / (high - low) if high > low else np.zeros_like(grey)


def _slice_indices(slices: Any, length: int) -> list[int]:
    if isinstance(slices, (int, np.integer)) and not isinstance(slices, bool):
        if slices < 1:
            raise ValueError(f"volume() needs slices >= 1 or a list of slice indices; received {slices!r}.")
        return sorted({int(i) for i in np.linspace(0, length - 1, min(int(slices), length)).round()})
    chosen = [int(i) for i in slices]
    if not chosen or any(not 0 <= i < length for i in chosen):
        raise ValueError(f"volume() needs slice indices in [0, {length}); received {list(slices)!r}.")
    return chosen


def volume(
    explanation: Any,
    inputs: Any = None,
    *,
    k: int = 0,
    index: int = 0,
    axis: int = 0,
    slices: Any = 6,
    class_names: Sequence[str] | None = None,
    style: Style | None = None,
    **style_options: Any,
) -> Any:
    """A volume's map as a row of slices.

    ``explanation``: maps ``[B, K, D, H, W]`` (a Conv3D CAM, or any method's map of a volume
    input ``[B, D, H, W, C]``). ``inputs``: the explained volumes (``[B, D, H, W, C]``,
    ``[B, C, D, H, W]`` or ``[B, D, H, W]``), drawn in grey under the map with ``alpha``, or
    ``None`` for the map alone. ``axis``: the axis sliced (0 depth, 1 height, 2 width);
    ``slices``: how many evenly spaced slices, or their indices. The whole volume shares one
    colour scale (:func:`saliency_kit.render.normalize`), shown by a colour bar. Returns a bare
    matplotlib Figure.

    Looks: ``style`` (a :class:`Style`) and its fields as keywords -- ``sign`` (default: chosen
    from the map), ``clip_percentile``, ``cmap``, ``alpha``, ``dpi`` (default 100) and
    ``panel_inches`` (default 1.5).
    """
    style = resolve(volume, style, style_options)
    map_ = _map_of_rank(explanation, index, k, 3)
    if isinstance(axis, bool) or axis not in (0, 1, 2):
        raise ValueError(f"volume() needs axis 0 (depth), 1 (height) or 2 (width); received {axis!r}.")
    chosen = _slice_indices(slices, map_.shape[axis])
    sign, colormap = _sign_and_colormap(style, explanation, map_)
    heat = colormap(normalize(map_, sign=sign, clip_percentile=style.clip_percentile))[..., :3]
    if inputs is not None:
        grey = _volume_input(inputs, index, map_.shape, np.shape(explanation.maps)[0])[..., None]
        heat = (1.0 - style.alpha) * grey + style.alpha * heat
    fig, axes = _slice_row(heat, axis, chosen, style)
    fig.suptitle(_figure_heading(explanation, index, k, class_names), fontsize=8)
    _scale_bar(fig, axes, sign, colormap, _colour_scale(map_, sign, style.clip_percentile), "map")
    return fig


def _slice_row(heat: np.ndarray, axis: int, chosen: list[int], style: Style) -> tuple[Any, list]:
    """A figure of the ``chosen`` slices along ``axis`` of ``heat`` ``[D, H, W, 3]`` (RGB in
    [0, 1]) in a row, each titled with its axis and index; ``(figure, axes)``."""
    from matplotlib.figure import Figure

    inches = style.panel_inches
    assert inches is not None  # resolve() gave the volume's own default
    height, width = np.take(heat, 0, axis=axis).shape[:2]
    figsize = (inches * len(chosen) + 0.9, inches * height / width + 0.6)
    fig = Figure(figsize=figsize, dpi=style.dpi, layout="constrained")
    axes = list(fig.subplots(1, len(chosen), squeeze=False)[0])
    for ax, i in zip(axes, chosen):
        ax.imshow(np.clip(np.take(heat, i, axis=axis), 0.0, 1.0), interpolation="nearest")
        ax.set_title(f"{_AXIS_NAMES[axis]} {i}", fontsize=7)
        ax.set_xticks([])
        ax.set_yticks([])
    return fig, axes


# -- tokens ----------------------------------------------------------------------------------------------
def check_tokens(tokens: Any, maps_shape: tuple) -> list[list[str]]:
    """``tokens`` as one list of str per input, checked against maps ``[B, K, T]``: a list of str
    per input, or one list for a single input; at most ``T`` tokens each (positions after the
    last token, such as padding, are not shown)."""
    if len(maps_shape) != 3:
        raise ValueError(f"tokens need maps [B, K, T], one value per token; received maps of shape {maps_shape}.")
    count, length = maps_shape[0], maps_shape[2]
    if isinstance(tokens, (str, bytes)) or not isinstance(tokens, Sequence):
        raise TypeError(
            f"tokens must be a list of str per input (or one list for one input); received {type(tokens).__name__}."
        )
    rows = list(tokens)
    if rows and all(isinstance(t, str) for t in rows):
        rows = [rows]
    if len(rows) != count:
        raise ValueError(f"tokens must hold one list per explained input ({count}); received {len(rows)}.")
    checked = []
    for b, row in enumerate(rows):
        if isinstance(row, (str, bytes)) or not isinstance(row, Sequence) or not all(isinstance(t, str) for t in row):
            raise TypeError(f"tokens[{b}] must be a list of str; received {type(row).__name__}.")
        if len(row) > length:
            raise ValueError(
                f"tokens[{b}] has {len(row)} tokens but the map has {length} positions; received {len(row)} tokens."
            )
        checked.append(list(row))
    return checked


def _hex_colour(rgb: Any) -> str:
    r, g, b = (int(round(float(c) * 255)) for c in rgb[:3])
    return f"#{r:02x}{g:02x}{b:02x}"


def _text_colour(rgb: Any) -> str:
    """Black or white text, whichever reads better on ``rgb``."""
    return "#000000" if 0.299 * rgb[0] + 0.587 * rgb[1] + 0.114 * rgb[2] > 0.55 else "#ffffff"


def token_colours(
    values: Any, *, cmap: Any = None, clip_percentile: float = 99.0
) -> tuple[list[str], list[str], float]:
    """``(background colours, text colours, scale)`` of token ``values`` ``[N]`` on one diverging
    scale: each value's colour ``"#rrggbb"`` on ``cmap`` (default ``"RdBu_r"``), zero at the centre
    colour and ``±scale`` (the ``clip_percentile``-th percentile of ``|values|``) at the ends; the
    text colour (black or white) that reads on it."""
    flat = np.asarray(values, np.float64).reshape(-1)
    colormap = find_colormap(cmap if cmap is not None else DEFAULT_CMAPS["all"], "all")
    unit = normalize(flat, sign="all", clip_percentile=clip_percentile) if flat.size else flat
    colours = colormap(unit)[:, :3] if flat.size else np.zeros((0, 3))
    return (
        [_hex_colour(c) for c in colours],
        [_text_colour(c) for c in colours],
        _colour_scale(flat, "all", clip_percentile),
    )


def legend_stops(cmap: Any = None, count: int = 9) -> list[str]:
    """``count`` colours ``"#rrggbb"`` evenly along the diverging scale of :func:`token_colours`."""
    colormap = find_colormap(cmap if cmap is not None else DEFAULT_CMAPS["all"], "all")
    return [_hex_colour(colormap(u)[:3]) for u in np.linspace(0.0, 1.0, count)]


def tokens_html(
    explanation: Any,
    tokens: Any,
    *,
    k: int = 0,
    class_names: Sequence[str] | None = None,
    cmap: Any = None,
    clip_percentile: float = 99.0,
) -> str:
    """Tokens coloured by their map, as an HTML fragment (a ``div`` of ``span`` elements) with a legend.

    ``explanation``: maps ``[B, K, T]``, one value per token; ``tokens``: a list of str per input
    (or one list for one input), at most ``T`` each (positions after the last token are not
    shown). Each token is a ``span`` whose background is its value on a diverging scale, zero at
    the centre colour (``cmap``, default ``"RdBu_r"``: red for evidence for target ``k``, blue
    against), shared by every input and scaled by the ``clip_percentile``-th percentile of
    ``|value|``; hovering shows the value. The legend names the scale's ends in the map's units.
    Every piece of text (tokens, class names, the method's name) is HTML-escaped, so no input can
    add markup to the page.
    """
    maps = np.asarray(getattr(explanation, "token_maps", explanation.maps))
    rows = check_tokens(tokens, maps.shape)
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 0 <= k < maps.shape[1]:
        raise ValueError(f"tokens_html() needs k in [0, {maps.shape[1]}); received {k!r}.")
    values = [np.asarray(maps[b, k, : len(row)], np.float64) for b, row in enumerate(rows)]
    flat = np.concatenate(values) if values else np.zeros(0)
    backgrounds, texts, scale = token_colours(flat, cmap=cmap, clip_percentile=clip_percentile)

    escape = html.escape
    targets = np.asarray(explanation.targets)
    lines = [
        '<div class="saliency-tokens" style="font-family:sans-serif;font-size:13px;line-height:1.9">',
        f'<div class="saliency-tokens-title" style="font-weight:bold">{escape(method_title(explanation.method))}</div>',
    ]
    at = 0
    for b, row in enumerate(rows):
        target = int(targets[b, k])
        name = class_names[target] if class_names is not None and 0 <= target < len(class_names) else f"class {target}"
        spans = []
        for t, token in enumerate(row):
            spans.append(
                f'<span class="saliency-token" style="background-color:{backgrounds[at]};'
                f"color:{texts[at]};"
                f'padding:1px 2px;border-radius:3px;white-space:pre" title="{t}: {values[b][t]:+.4g}">'
                f"{escape(token)}</span>"
            )
            at += 1
        lines.append(
            f'<div class="saliency-tokens-row"><span class="saliency-tokens-label" style="color:#555">'
            f"{escape(f'input {b} · {name}:')}</span> " + " ".join(spans) + "</div>"
        )
    stops = ",".join(legend_stops(cmap))
    lines.append(
        '<div class="saliency-tokens-legend" style="font-size:11px;color:#555">'
        f"<span>{-scale:+.3g}</span> "
        f'<span class="saliency-tokens-scale" style="display:inline-block;width:160px;height:10px;'
        f'vertical-align:middle;background:linear-gradient(to right,{stops})"></span> '
        f"<span>{scale:+.3g}</span> <span>(0 at the centre colour"
        f"{'; red: for the target, blue: against' if cmap is None else ''})</span></div>"
    )
    lines.append("</div>")
    return "\n".join(lines)
