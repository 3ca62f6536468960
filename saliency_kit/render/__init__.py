"""Turning saliency maps into pictures: heatmaps, overlays, labelled grids, and atomic PNG files.

    import saliency_kit as sk
    expl = sk.explain(model, inputs, "guided_backprop", targets="top1")
    rgb = sk.render.heatmap(expl.maps[0, 0])                 # uint8 [H, W, 3]
    mix = sk.render.overlay(originals[0], expl.maps[0, 0])   # uint8, the size of the image
    fig = sk.render.grid(expl, originals, spec.class_names)  # matplotlib Figure
    sk.render.save_png(fig, "figure.png")
    fig = sk.render.series(expl_1d, series)                  # time series [B, T, F]: lines over bands
    fig = sk.render.volume(expl_3d, volumes)                 # volumes: a row of slices
    style = sk.render.Style(sign="all", dpi=200)             # how the figures look, declared once
    fig = sk.render.grid(expl, originals, style=style)       # the same as grid(..., sign="all", dpi=200)
    page = sk.render.tokens_html(expl_text, tokens)          # tokens: escaped, coloured HTML spans
    page = sk.render.generation_html(expl_gen)               # generated text: [generated x source] matrix
    fig = sk.render.generation_figure(expl_gen, merge="words")

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

from ..files import png_bytes, save_png
from .colour import DEFAULT_CMAPS, heatmap, normalize, overlay
from .figure import explanation_png, grid, show
from .generation import generation_figure, generation_html
from .marks import MARK_COLOUR, Mark, draw_box, draw_mark, outline
from .sequences import check_tokens, series, tokens_html, volume
from .style import Style
from .titles import fit_text, method_title

__all__ = [
    "DEFAULT_CMAPS",
    "MARK_COLOUR",
    "Mark",
    "Style",
    "check_tokens",
    "draw_box",
    "draw_mark",
    "outline",
    "explanation_png",
    "fit_text",
    "generation_figure",
    "generation_html",
    "grid",
    "heatmap",
    "method_title",
    "normalize",
    "overlay",
    "png_bytes",
    "save_png",
    "series",
    "show",
    "tokens_html",
    "volume",
]
