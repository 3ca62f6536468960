"""Generated text drawn as its ``[generated × source]`` matrix: an escaped HTML table
(:func:`generation_html`) and a matplotlib figure (:func:`generation_figure`).

Row ``k`` is the ``k``-th generated token, column ``t`` the sequence's token ``t`` (the prompt's,
then the generated ones, which explain what follows them); each cell is the map's value
``maps[0, k, t]`` on one diverging scale (zero at the centre colour), with a legend naming the
scale's ends. Cells at or after a row's own token explain nothing and are drawn empty.

``merge="words"`` joins sub-word tokens into words first (:func:`word_matrix`): a word starts at
a token that begins with a space, after one that ends with one, at punctuation, at the first
token and at the first generated token; the maps of a word's source tokens are summed, and so
are its generated rows (the attribution of the word's log-probability, the sum of its tokens').
"""

from __future__ import annotations

import html
from typing import Any

import numpy as np

from .colour import DEFAULT_CMAPS
from .colour import colormap as find_colormap
from .sequences import legend_stops, token_colours
from .titles import method_title

__all__ = ["generation_html", "generation_figure", "word_matrix", "word_groups", "is_generation"]

MERGES = ("tokens", "words")


def word_groups(tokens: list[str], start: int) -> list[list[int]]:
    """The positions of each word of ``tokens``, in order (see the module)."""

    def edge(text: str, last: bool) -> str:
        stripped = text.strip()
        return (stripped[-1:] if last else stripped[:1]) or " "

    groups: list[list[int]] = []
    for t, token in enumerate(tokens):
        before = tokens[t - 1] if t else ""
        new = (
            t in (0, start)
            or token[:1].isspace()
            or before[-1:].isspace()
            or not edge(token, False).isalnum()
            or not edge(before, True).isalnum()
        )
        if new:
            groups.append([t])
        else:
            groups[-1].append(t)
    return groups


def is_generation(explanation: Any) -> bool:
    """Whether ``explanation`` explains generated text (``sk.explain_generation``: its tokens and start)."""
    options = getattr(explanation, "options", None) or {}
    return bool(getattr(explanation, "tokens", None)) and "start" in options


def word_matrix(explanation: Any, merge: str = "tokens") -> tuple[list[str], list[str], np.ndarray, np.ndarray]:
    """``(row labels, column labels, values [R, C], hidden bool [R, C])`` of an
    :func:`saliency_kit.explain_generation` explanation: rows the generated tokens (or words),
    columns the sequence's; ``hidden`` marks the cells at or after a row's own (last) token."""
    if merge not in MERGES:
        raise ValueError(f"merge must be one of {list(MERGES)}; received {merge!r}.")
    if not is_generation(explanation):
        raise ValueError(
            "a generation figure needs an explanation of generated text (sk.explain_generation), with its tokens "
            "and start; received one without."
        )
    tokens, start = list(explanation.tokens[0]), int(explanation.options["start"])
    maps = np.asarray(explanation.token_maps, np.float64)[0]  # [K, T]
    if merge == "tokens":
        groups = [[t] for t in range(len(tokens))]
    else:
        groups = word_groups(tokens, start)
    rows = [g for g in groups if g[0] >= start]
    values = np.array([[maps[[r - start for r in row]][:, col].sum() for col in groups] for row in rows])
    hidden = np.array([[col[0] >= row[-1] for col in groups] for row in rows], bool)
    labels = ["".join(tokens[t] for t in g) for g in groups]
    return [labels[groups.index(r)] for r in rows], labels, np.where(hidden, 0.0, values), hidden


def _label(token: str) -> str:
    """A token as an axis label: escapes and controls visible, ``$`` not read as mathematics."""
    return repr(token)[1:-1].replace("$", r"\$")


def _scale_label(value: float) -> str:
    return f"{value:.3g}"


def generation_html(explanation: Any, *, merge: str = "tokens", cmap: Any = None, clip_percentile: float = 99.0) -> str:
    """The ``[generated × source]`` matrix as an HTML fragment: a ``table`` whose header holds the
    sequence's tokens and whose rows start with each generated token, every cell coloured on a
    diverging scale (``cmap``, default ``"RdBu_r"``: red for evidence for the token, blue against;
    ``±`` the ``clip_percentile``-th percentile of ``|value|`` at the ends), its value on hover,
    and a legend. Every token is HTML-escaped: a token is user text and adds no markup."""
    row_labels, column_labels, values, hidden = word_matrix(explanation, merge)
    shown = values[~hidden]
    colours, texts, scale = token_colours(shown, cmap=cmap, clip_percentile=clip_percentile)
    escape = html.escape
    cell = 'style="padding:2px 4px;border:1px solid #ddd;{}"'
    lines = [
        '<div class="saliency-generation" style="font-family:sans-serif;font-size:13px">',
        f'<div style="font-weight:bold">{escape(method_title(explanation.method))}: each generated token '
        "(row) by the tokens before it (columns)</div>",
        '<table style="border-collapse:collapse">',
        "<tr><th></th>" + "".join(f"<th {cell.format('')}>{escape(label)}</th>" for label in column_labels) + "</tr>",
    ]
    at = 0
    for r, label in enumerate(row_labels):
        cells = []
        for c in range(len(column_labels)):
            if hidden[r, c]:
                cells.append(f"<td {cell.format('background:#f4f4f4')}></td>")
                continue
            value = values[r, c]
            style = f"background:{colours[at]};color:{texts[at]}"
            cells.append(f'<td {cell.format(style)} title="{value:.4g}">{value:.2g}</td>')
            at += 1
        lines.append(f"<tr><th {cell.format('text-align:right')}>{escape(label)}</th>{''.join(cells)}</tr>")
    lines.append("</table>")
    stops = ", ".join(legend_stops(cmap))
    lines.append(
        '<div class="saliency-legend" style="margin-top:6px">'
        f"<span>{escape(_scale_label(-scale))}</span>"
        f'<span style="display:inline-block;width:160px;height:10px;margin:0 6px;'
        f'background:linear-gradient(to right, {stops})"></span>'
        f"<span>{escape(_scale_label(scale))}</span> (against · for the generated token)</div>"
    )
    lines.append("</div>")
    return "\n".join(lines)


def generation_figure(
    explanation: Any,
    *,
    merge: str = "tokens",
    cmap: Any = None,
    clip_percentile: float = 99.0,
    dpi: int = 100,
) -> Any:
    """The ``[generated × source]`` matrix as a :class:`matplotlib.figure.Figure` (no pyplot state):
    token labels on both axes, cells on a diverging scale symmetric about zero (``±`` the
    ``clip_percentile``-th percentile of ``|value|``), cells at or after a row's own token blank,
    and a colour bar as the legend."""
    from matplotlib.figure import Figure

    row_labels, column_labels, values, hidden = word_matrix(explanation, merge)
    shown = np.abs(values[~hidden])
    scale = float(np.percentile(shown, clip_percentile)) if shown.size and shown.max() > 0 else 1.0
    scale = scale if scale > 0 else float(shown.max() or 1.0)
    colormap = find_colormap(cmap if cmap is not None else DEFAULT_CMAPS["all"], "all").with_extremes(bad="#f4f4f4")
    width = 1.6 + 0.45 * len(column_labels)
    height = 1.4 + 0.35 * len(row_labels)
    figure = Figure(figsize=(max(width, 4.0), max(height, 2.5)), dpi=dpi, layout="constrained")
    axes = figure.add_subplot()
    image = axes.imshow(
        np.ma.masked_array(values, hidden), cmap=colormap, vmin=-scale, vmax=scale, aspect="auto", interpolation="none"
    )
    axes.set_xticks(range(len(column_labels)), [_label(label) for label in column_labels], rotation=60, ha="right")
    axes.set_yticks(range(len(row_labels)), [_label(label) for label in row_labels])
    axes.set_xlabel("source tokens")
    axes.set_ylabel("generated tokens")
    axes.set_title(method_title(explanation.method))
    figure.colorbar(image, ax=axes, label="attribution (blue: against, red: for)")
    return figure
