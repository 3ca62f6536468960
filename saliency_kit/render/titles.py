"""Titles: what rendering shows of a method (its display title and whether its maps are CAMs,
read from the method's declaration), and text fitted to a panel's width."""

from __future__ import annotations

import textwrap

from ..methods import get

__all__ = ["fit_text", "method_display", "method_title"]


def method_display(method: str) -> tuple[str, bool]:
    """``(title, cam)`` of a method: its short display title, and whether its maps are coarse
    class-activation maps (drawn over the image), from its declaration (``Method.title``,
    ``Method.cam``). The one place rendering looks these up; an unknown name is its own title."""
    try:
        declared = get(method)
    except (ValueError, TypeError):
        return str(method), False
    return declared.title, declared.cam


def method_title(method: str) -> str:
    """A method's short display title (``"Grad-CAM"``)."""
    return method_display(method)[0]


def fit_text(text: str, width_inches: float, fontsize: float = 8.0, *, lines: int = 1) -> str:
    """``text`` made to fit a panel ``width_inches`` wide at ``fontsize`` points: wrapped at spaces,
    ``/``, ``_`` or anywhere onto at most ``lines`` lines, the last shortened with an ellipsis.
    ``$`` is escaped so that matplotlib shows it as typed (no mathtext). For panel titles that must
    not run into their neighbours, e.g. ``ax.set_title(fit_text(layer_name, 1.25, 7, lines=2))``."""

    limit = max(4, int(width_inches * 72 / (fontsize * 0.6)))
    text = " ".join(str(text).split())
    wrapped = textwrap.wrap(text, limit, break_on_hyphens=False) or [""]
    if len(wrapped) > lines:
        rest = " ".join(wrapped[lines - 1 :])
        wrapped = wrapped[: lines - 1] + [rest[: limit - 1] + "\u2026"]
    return "\n".join(wrapped).replace("$", r"\$")
