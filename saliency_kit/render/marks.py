"""Marks: what a map explains, drawn on its picture -- a region's outline, a box with its class
name (segmentation and detection targets)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from .colour import as_rgb

__all__ = ["MARK_COLOUR", "Mark", "draw_box", "draw_mark", "outline"]


#: The colour of region outlines and boxes: cyan stands out on every default colormap.
MARK_COLOUR = (0, 255, 255)


@dataclasses.dataclass(frozen=True)
class Mark:
    """What one map explains, to draw on its overlay: a region ``mask`` (bool ``[h, w]``, any
    resolution: it is scaled to the picture) and/or a ``box`` ``(x0, y0, x1, y1)`` in the pixels of
    a ``frame`` ``(height, width)`` (the model's input; ``None``: the picture's own), with a
    ``label`` written at the box (e.g. its class name)."""

    mask: np.ndarray | None = None
    box: tuple | None = None
    label: str | None = None
    frame: tuple | None = None


def _line_width(shape_hw: Any) -> int:
    """Outline width in pixels: 1 up to 192 px pictures, then 1 more per 192 px of the short side."""
    return max(1, int(min(shape_hw[:2])) // 192 + 1)


def outline(
    image_uint8: np.ndarray, mask: np.ndarray, *, colour: Any = MARK_COLOUR, width: int | None = None
) -> np.ndarray:
    """``image_uint8`` ``[H, W, 3]`` with the outline of ``mask`` drawn in ``colour`` -> a new uint8 image.

    ``mask``: bool (or nonzero = in) ``[h, w]``, scaled to ``[H, W]`` by nearest neighbour. The
    outline is the mask's own pixels within ``width`` pixels (4-neighbour steps; default from the
    picture's size) of a pixel outside it or of the picture's edge: it never covers the region's
    surroundings, and an empty mask draws nothing.
    """
    from PIL import Image

    rgb = as_rgb(image_uint8).copy()
    region = np.asarray(mask)
    if region.ndim != 2:
        raise ValueError(f"outline() needs a mask [h, w]; received an array of shape {region.shape}.")
    region = region.astype(bool)
    if region.shape != rgb.shape[:2]:
        scaled = Image.fromarray(region.astype(np.uint8) * 255).resize(
            (rgb.shape[1], rgb.shape[0]), Image.Resampling.NEAREST
        )
        region = np.asarray(scaled) > 127
    inner = region
    for _ in range(width or _line_width(rgb.shape)):
        padded = np.pad(inner, 1, constant_values=False)
        inner = inner & padded[:-2, 1:-1] & padded[2:, 1:-1] & padded[1:-1, :-2] & padded[1:-1, 2:]
    rgb[region & ~inner] = colour
    return rgb


def draw_box(
    image_uint8: np.ndarray,
    box: Any,
    label: str | None = None,
    *,
    frame: Any = None,
    colour: Any = MARK_COLOUR,
    width: int | None = None,
) -> np.ndarray:
    """``image_uint8`` ``[H, W, 3]`` with ``box`` drawn as a rectangle and ``label`` written on a
    ``colour`` band at its top-left corner (above the box when there is room, else inside).

    ``box``: ``(x0, y0, x1, y1)`` pixel edges in a ``frame`` ``(height, width)`` (the model's input
    size; default the picture's own), scaled to the picture; the rectangle's lines are the box's
    outermost pixels, ``width`` wide (default from the picture's size), clipped to the picture.
    """
    from PIL import Image, ImageDraw, ImageFont

    rgb = as_rgb(image_uint8)
    values = np.asarray(box, dtype=np.float64).reshape(-1)
    if values.shape != (4,) or not np.all(np.isfinite(values)):
        raise ValueError(f"draw_box() needs a box (x0, y0, x1, y1) of 4 finite numbers; received {box!r}.")
    height, width_px = rgb.shape[:2]
    frame_h, frame_w = frame if frame is not None else (height, width_px)
    x0, x1 = values[[0, 2]] * (width_px / frame_w)
    y0, y1 = values[[1, 3]] * (height / frame_h)
    x0, y0 = int(np.clip(np.floor(x0 + 0.5), 0, width_px - 1)), int(np.clip(np.floor(y0 + 0.5), 0, height - 1))
    x1, y1 = int(np.clip(np.floor(x1 + 0.5), x0 + 1, width_px)), int(np.clip(np.floor(y1 + 0.5), y0 + 1, height))
    picture = Image.fromarray(rgb.copy())
    draw = ImageDraw.Draw(picture)
    draw.rectangle([x0, y0, x1 - 1, y1 - 1], outline=tuple(colour), width=width or _line_width(rgb.shape))
    if label:
        font = ImageFont.load_default(size=max(8, min(height, width_px) // 8))
        left, top, right, bottom = draw.textbbox((0, 0), str(label), font=font)
        text_w, text_h = right - left + 2, bottom - top + 2
        band_top = y0 - text_h if y0 - text_h >= 0 else y0
        band_left = min(x0, max(0, width_px - text_w))
        draw.rectangle([band_left, band_top, band_left + text_w - 1, band_top + text_h - 1], fill=tuple(colour))
        draw.text((band_left + 1 - left, band_top + 1 - top), str(label), fill=(0, 0, 0), font=font)
    return np.asarray(picture)


def draw_mark(image_uint8: np.ndarray, mark: Mark | None) -> np.ndarray:
    """``image_uint8`` with ``mark``'s region outline and box drawn (unchanged for ``None``)."""
    rgb = as_rgb(image_uint8)
    if mark is None:
        return rgb
    if mark.mask is not None:
        rgb = outline(rgb, mark.mask)
    if mark.box is not None:
        rgb = draw_box(rgb, mark.box, mark.label, frame=mark.frame)
    return rgb
