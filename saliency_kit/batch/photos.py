"""The photo under the maps: one small copy of each input image, so the gallery can lay a heatmap
over it at any opacity (its slider) instead of showing only the overlay blended at write time.

``write_image_outputs`` writes ``<image folder>/photo.png`` (the image as the overlays see it,
its longer side at most :data:`MAX_SIDE` pixels) beside the maps and names it in the manifest
lines of the image's heatmaps and overlays (``"photo": "cats/tom/photo.png"``). It is not an
output of its own: it adds no manifest line and does not change an image's ``outputs`` count, so
``--resume`` treats runs written before it, and runs with it, alike; a gallery whose manifest
names no photo (or whose photo file is gone) shows the blended overlays, as it always did.
"""

from __future__ import annotations

import os

import numpy as np

from ..files import png_bytes, write_atomic

__all__ = ["PHOTO", "MAX_SIDE", "write_photo"]

PHOTO = "photo.png"
MAX_SIDE = 512  # the gallery shows 128 px cards and a larger side-by-side view


def write_photo(out_root: str, folder: str, original: np.ndarray, *, durable: bool = True) -> str | None:
    """Write ``folder/photo.png`` (relative to ``out_root``) from ``original`` (uint8 ``[H, W, 3]``
    or ``[H, W]``); return its relative path, or None when ``folder`` is empty (images sharing
    the root would share one photo) or the array is not an image."""
    from PIL import Image

    picture = np.asarray(original)
    if not folder or picture.dtype != np.uint8 or picture.ndim not in (2, 3) or not picture.size:
        return None
    image = Image.fromarray(picture)
    if max(image.size) > MAX_SIDE:
        image.thumbnail((MAX_SIDE, MAX_SIDE), Image.Resampling.LANCZOS)
    relative = f"{folder}/{PHOTO}"
    root, path = os.path.realpath(out_root), os.path.realpath(os.path.join(out_root, relative))
    if not path.startswith(root + os.sep):
        return None  # the maps' own writing refuses such a folder, with the reason
    write_atomic(path, png_bytes(np.asarray(image)), durable=durable)
    return relative
