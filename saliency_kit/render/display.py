"""What an :class:`~saliency_kit.Explanation` shows in a notebook (its ``_repr_png_`` and
``_repr_html_``), for every kind of explanation.

* one image, sequence, tabular or inner-layer part: its grid as a PNG (:func:`~.figure.grid`);
  a volume: its slices (:func:`~.sequences.volume`); no HTML, so Jupyter shows the PNG;
* token ids explained at their embedding, or an explanation given tokens
  (:meth:`~saliency_kit.Explanation.with_tokens`): escaped, coloured token spans
  (:func:`~.sequences.tokens_html`), the tokens' positions as their labels when no tokens were
  given; no PNG;
* generated text (:func:`saliency_kit.explain_generation`): its ``[generated × source]`` matrix
  (:func:`~.generation.generation_html`); no PNG;
* several parts (a model's several inputs): HTML with one section per part, headed by its name,
  each drawn as above (a PNG part as an embedded image); and, for front ends that show only
  images, a PNG of every part's picture stacked under its name (token parts as strips).

Only the first :data:`MAX_INPUTS` inputs are drawn, so that showing a large batch stays quick.
"""

from __future__ import annotations

import base64
import dataclasses
import html
import io
from typing import Any

import numpy as np

from ..files import png_bytes
from .figure import explanation_png
from .generation import generation_html, is_generation
from .sequences import tokens_html

__all__ = ["MAX_INPUTS", "display_png", "display_html", "part_explanations"]

MAX_INPUTS = 8
_HEADER = 26  # pixels above each part of a stacked PNG, for its name


def part_explanations(explanation: Any) -> list[tuple[str, str, object]]:
    """``[(name, kind, explanation of that part alone)]`` of each explained part (``kind`` as
    :attr:`~saliency_kit.Explanation.parts`, ``"input"`` for a plain explanation), its arrays
    cut to the first :data:`MAX_INPUTS` inputs."""
    parts = explanation.parts or {"input": "input"}
    out = []
    for name, kind in parts.items():
        if explanation.parts is None:
            attributions, maps = explanation.attributions, explanation.maps
        else:
            attributions, maps = explanation.attributions_of(name), explanation.map_of(name)
        part = dataclasses.replace(explanation, attributions=attributions, maps=maps, parts=None)
        out.append((str(name), kind, _first_inputs(part)))
    return out


def _first_inputs(part: Any) -> Any:
    rows = {
        name: np.asarray(getattr(part, name))[:MAX_INPUTS]
        for name in ("attributions", "maps", "targets", "scores", "completeness_gap")
        if getattr(part, name) is not None
    }
    info = part.target_info[:MAX_INPUTS] if part.target_info is not None else None
    return dataclasses.replace(part, target_info=info, **rows)


def _token_part(explanation: Any) -> str | None:
    """The name of the part the explanation's tokens (:meth:`~saliency_kit.Explanation.with_tokens`)
    belong to: its first embedding part (its ``token_maps``), or its one part."""
    if explanation.parts is None:
        return "input"
    return next((name for name, kind in explanation.parts.items() if kind == "embedding"), None)


def _is_tokens(explanation: Any, name: str, kind: str) -> bool:
    return kind == "embedding" or explanation.tokens is not None and name == _token_part(explanation)


def _tokens_of(explanation: Any, name: str, part: Any) -> tuple[list, bool]:
    """``(tokens per input, given)``: the explanation's tokens for its token part, else each
    position's index."""
    count, length = np.shape(part.maps)[0], np.shape(part.maps)[2]
    if explanation.tokens is not None and name == _token_part(explanation):
        return explanation.tokens[:count], True
    return [[str(t) for t in range(length)] for _ in range(count)], False


def _originals_of(explanation: Any, originals: Any, name: str) -> Any:
    """The originals of part ``name``: ``originals`` itself for one part; for several, its entry
    (``originals`` in the structure the maps have: a dict by name, or a list in the model's
    input order), else None."""
    if originals is None or explanation.parts is None or len(explanation.parts) == 1:
        return None if originals is None else originals[:MAX_INPUTS]
    if isinstance(explanation.maps, dict):
        found = originals.get(name) if isinstance(originals, dict) else None
    elif isinstance(originals, (list, tuple)) and len(originals) == len(explanation.maps):
        explained = [i for i, m in enumerate(explanation.maps) if m is not None]  # as map_of reads a list
        found = originals[explained[list(explanation.parts).index(name)]]
    else:
        found = None
    return None if found is None else found[:MAX_INPUTS]


def _part_png(explanation: Any, name: str, part: Any, originals: Any, class_names: Any) -> bytes:
    return explanation_png(part, _originals_of(explanation, originals, name), class_names, max_inputs=MAX_INPUTS)


def display_png(explanation: Any, originals: Any = None, class_names: Any = None) -> bytes | None:
    """The PNG a notebook shows for ``explanation``, or None for a token explanation (see the module)."""
    parts = part_explanations(explanation)
    if all(_is_tokens(explanation, name, kind) for name, kind, _ in parts):
        return None
    if len(parts) == 1:
        name, _, part = parts[0]
        return _part_png(explanation, name, part, originals, class_names)
    return _stacked(
        [(f"{name} ({kind})", _part_png(explanation, name, part, originals, class_names)) for name, kind, part in parts]
    )


def _stacked(sections: list[tuple[str, bytes]]) -> bytes:
    """The PNGs of ``sections`` one under another, each under a band with its label."""
    from PIL import Image, ImageDraw, ImageFont

    pictures = [Image.open(io.BytesIO(data)).convert("RGB") for _, data in sections]
    width = max(p.width for p in pictures)
    canvas = Image.new("RGB", (width, sum(_HEADER + p.height for p in pictures)), "white")
    draw = ImageDraw.Draw(canvas)
    font = ImageFont.load_default(size=14)
    top = 0
    for (label, _), picture in zip(sections, pictures):
        draw.text((8, top + 5), label, fill="black", font=font)
        canvas.paste(picture, (0, top + _HEADER))
        top += _HEADER + picture.height
    return png_bytes(np.asarray(canvas))


def display_html(explanation: Any, originals: Any = None, class_names: Any = None) -> str | None:
    """The HTML a notebook shows for ``explanation``, or None where its PNG says it all (one
    part that is not tokens). Every name is escaped."""
    if is_generation(explanation):
        return generation_html(explanation)
    parts = part_explanations(explanation)
    if len(parts) == 1:
        name, kind, part = parts[0]
        return _tokens_section(explanation, name, part, class_names) if _is_tokens(explanation, name, kind) else None
    sections = ['<div class="saliency-parts" style="font-family:sans-serif">']
    for name, kind, part in parts:
        sections.append(
            '<div class="saliency-part"><div class="saliency-part-name" style="font-weight:bold;margin:8px 0 4px">'
            f"{html.escape(name)} ({html.escape(kind)})</div>"
        )
        if _is_tokens(explanation, name, kind):
            sections.append(_tokens_section(explanation, name, part, class_names))
        else:
            data = base64.b64encode(_part_png(explanation, name, part, originals, class_names)).decode("ascii")
            sections.append(
                f'<img class="saliency-part-image" alt="{html.escape(name)}" src="data:image/png;base64,{data}">'
            )
        sections.append("</div>")
    sections.append("</div>")
    return "\n".join(sections)


def _tokens_section(explanation: Any, name: str, part: Any, class_names: Any) -> str:
    tokens, given = _tokens_of(explanation, name, part)
    fragment = tokens_html(part, tokens, class_names=class_names)
    if given:
        return fragment
    note = (
        '<div class="saliency-tokens-note" style="font-size:11px;color:#555">token positions: no tokens were '
        "given (explanation.with_tokens(tokens) shows the words)</div>"
    )
    return fragment + "\n" + note
