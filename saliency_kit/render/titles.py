"""What rendering shows of a method: its display title and whether its maps are CAMs, read
from the method's declaration."""

from __future__ import annotations

__all__ = ["method_display", "method_title"]


def method_display(method: str) -> tuple[str, bool]:
    """``(title, cam)`` of a method: its short display title, and whether its maps are coarse
    class-activation maps (drawn over the image), from its declaration (``Method.title``,
    ``Method.cam``). The one place rendering looks these up; an unknown name is its own title."""
    from ..methods import get

    try:
        declared = get(method)
    except (ValueError, TypeError):
        return str(method), False
    return declared.title, declared.cam


def method_title(method: str) -> str:
    """A method's short display title (``"Grad-CAM"``)."""
    return method_display(method)[0]
