"""Image files -> model inputs: ``load_images``, ``load_image``, ``to_rgb``, ``ImageLoadError``.

    inputs, originals = sk.load_images(["cat.jpg", "dog.png"], spec)  # spec from sk.load_model

Every file goes through the same steps:

1. **Open** with Pillow. Empty, missing, non-image, corrupt or truncated files, and images with more
   than ``max_pixels`` pixels (Pillow's decompression-bomb limit, ``PIL.Image.MAX_IMAGE_PIXELS``,
   by default; a larger ``max_pixels`` raises Pillow's limit for that read only) raise
   :class:`ImageLoadError` naming the file. Animated files give their first frame.
2. **Orient**: the EXIF orientation tag is applied (``PIL.ImageOps.exif_transpose``), so the
   image is the right way up, as a viewer shows it.
3. **To RGB uint8** (:func:`to_rgb`): grey and palette images are expanded to RGB; anything with
   transparency (RGBA, grey + alpha, palette with a transparent colour) is composited on **white**;
   16-bit (and 32-bit integer) grey images are scaled from 0..65535 to 0..255, not clipped; 16-bit
   RGB files Pillow itself reduces to 8 bits (their high byte); float images are taken as 0..1;
   CMYK goes through Pillow's CMYK -> RGB conversion. This RGB image is the
   ``original`` returned for overlays, at its own size.
4. **Resize** the whole image to the model's ``spec.input_size`` with Pillow's antialiased bilinear
   filter, without cropping (the aspect ratio is not kept). This is how Keras feeds images to
   ``keras.applications`` models (``keras.utils.image_dataset_from_directory`` defaults:
   bilinear, no crop), and it keeps every pixel of the original in view, so a saliency map
   stretched back over the original lines up with it exactly. (ImageNet accuracy is usually
   quoted after a central 87.5 % crop; that costs about a point of top-1 here but would cut the
   image's borders out of every map.) An image already at the input size is not resampled.
5. **To the model's channels**: a model taking grey images (``spec.channels == 1``, read from its
   input shape ``[B, H, W, 1]``) gets the resized RGB image's luminance, as Pillow converts RGB to
   ``"L"`` (``L = R * 299/1000 + G * 587/1000 + B * 114/1000``; a grey file comes back unchanged),
   ``[H, W, 1]``; colour files work with it too. The ``original`` stays RGB.
6. **Preprocess** with ``spec.preprocess`` -> float32 ``[H, W, channels]`` model input.
"""

from __future__ import annotations

import contextlib
import os
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

__all__ = ["ImageLoadError", "load_image", "load_images", "to_rgb", "read_rgb"]


class ImageLoadError(ValueError):
    """A file could not be read as an image. ``.path`` is the file; the message says why."""

    def __init__(self, path: Any, reason: str) -> None:
        self.path = str(path)
        self.reason = reason
        super().__init__(f"cannot load image {self.path}: {reason}")


def _white_composite(image: Image.Image) -> Image.Image:
    rgba = image.convert("RGBA")
    background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
    return Image.alpha_composite(background, rgba).convert("RGB")


def to_rgb(image: Image.Image) -> np.ndarray:
    """Any Pillow image -> uint8 RGB ``[H, W, 3]`` (see step 3 of the module docstring)."""
    mode = image.mode
    if mode == "RGB":
        return np.asarray(image, dtype=np.uint8).copy()
    if mode in ("RGBA", "LA", "PA", "RGBa", "La") or (mode in ("P", "L", "RGB") and "transparency" in image.info):
        return np.asarray(_white_composite(image), dtype=np.uint8).copy()
    if mode.startswith("I;16") or mode == "I":
        values = np.asarray(image).astype(np.float64)
        grey = np.clip(np.rint(values / 257.0), 0, 255).astype(np.uint8)
        return np.repeat(grey[..., None], 3, axis=-1)
    if mode == "F":
        values = np.nan_to_num(np.asarray(image, dtype=np.float64))
        grey = np.clip(np.rint(values * 255.0), 0, 255).astype(np.uint8)
        return np.repeat(grey[..., None], 3, axis=-1)
    return np.asarray(image.convert("RGB"), dtype=np.uint8).copy()


class _PillowLimit:
    """Pillow's decompression-bomb limit (``PIL.Image.MAX_IMAGE_PIXELS``, one global), raised while
    reads with a larger ``max_pixels`` are open: to the largest of them while any is (threads
    decoding at once share the global), back to the value it had when the last one ends."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._raised: list[int] = []  # the limits of the reads in flight that raised it
        self._own: int | None = None  # the limit before the first of them

    def own(self) -> int | None:
        """Pillow's limit as its user set it, whatever reads are raising it now."""
        with self._lock:
            return self._own if self._raised else Image.MAX_IMAGE_PIXELS

    @contextlib.contextmanager
    def at_least(self, limit: int) -> Iterator[None]:
        """Pillow's limit at least ``limit`` pixels inside the ``with``."""
        with self._lock:
            if not self._raised:
                self._own = Image.MAX_IMAGE_PIXELS
            self._raised.append(limit)
            self._set()
        try:
            yield
        finally:
            with self._lock:
                self._raised.remove(limit)
                self._set()

    def _set(self) -> None:
        own = self._own
        Image.MAX_IMAGE_PIXELS = max(own, *self._raised) if self._raised and own is not None else own


_PILLOW_LIMIT = _PillowLimit()

#: What a refusal for size advises.
_RAISE_ADVICE = "raise max_pixels (--max-pixels N on the command line) if you trust the file"


def read_rgb(path: str | os.PathLike, *, max_pixels: int | None = None) -> np.ndarray:
    """Read one image file as EXIF-oriented uint8 RGB ``[H, W, 3]`` at its own size.

    Raises :class:`ImageLoadError` (naming ``path``) for anything that is not a readable image of
    at most ``max_pixels`` pixels (default ``PIL.Image.MAX_IMAGE_PIXELS``, about 89 million).
    A ``max_pixels`` above Pillow's limit raises that limit for this read only; the global is
    put back afterwards.
    """
    path = Path(os.fspath(path))
    own = _PILLOW_LIMIT.own()
    limit = own if max_pixels is None else max_pixels
    raised = (
        _PILLOW_LIMIT.at_least(limit)
        if limit is not None and own is not None and limit > own
        else contextlib.nullcontext()
    )
    try:
        if not path.is_file():
            raise ImageLoadError(path, "no such file" if not path.exists() else "not a regular file")
        if path.stat().st_size == 0:
            raise ImageLoadError(path, "the file is empty")
        with raised, warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(path) as opened:
                width, height = opened.size
                if limit is not None and width * height > limit:
                    raise ImageLoadError(
                        path,
                        f"{width}x{height} = {width * height} pixels is over "
                        f"the limit of {limit} (a decompression bomb?); {_RAISE_ADVICE}",
                    )
                opened.load()  # decode now, so truncated/corrupt data fails here, inside the try
                image = ImageOps.exif_transpose(opened)  # a copy: still valid once the file is closed
    except ImageLoadError:
        raise
    except UnidentifiedImageError:
        raise ImageLoadError(path, "not an image format Pillow can read") from None
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as e:
        raise ImageLoadError(path, f"too many pixels (decompression-bomb guard): {e}; {_RAISE_ADVICE}") from None
    except PermissionError:
        raise ImageLoadError(path, "permission denied") from None
    except (OSError, SyntaxError, ValueError, EOFError, IndexError, TypeError, KeyError, MemoryError) as e:
        reason = str(e) or type(e).__name__
        if "truncated" in reason:
            reason = f"the file is truncated ({reason})"
        else:
            reason = f"corrupt or unsupported image data ({type(e).__name__}: {reason})"
        raise ImageLoadError(path, reason) from None
    # Outside the try: only Pillow's reading of the file (above) can mean a corrupt image; a
    # mistake in this package's own conversion must surface as itself, not as "corrupt data".
    try:
        return to_rgb(image)
    except ValueError as e:  # Pillow: "conversion from MODE to RGB not supported"
        raise ImageLoadError(path, f"unsupported colour mode {image.mode!r} ({e})") from None


def _resize(rgb: np.ndarray, size: Any) -> np.ndarray:
    """uint8 RGB -> uint8 RGB of ``size = (H, W)``; antialiased bilinear; unchanged if same size."""
    height, width = int(size[0]), int(size[1])
    if rgb.shape[:2] == (height, width):
        return rgb
    return np.asarray(Image.fromarray(rgb).resize((width, height), Image.Resampling.BILINEAR))


def _to_channels(rgb: np.ndarray, channels: int) -> np.ndarray:
    """uint8 RGB ``[..., H, W, 3]`` -> uint8 ``[..., H, W, channels]`` (step 5 of the module docstring)."""
    if channels == 3:
        return rgb
    if channels == 1:
        grey = [np.asarray(Image.fromarray(image).convert("L")) for image in rgb.reshape(-1, *rgb.shape[-3:])]
        return np.stack(grey).reshape(*rgb.shape[:-1], 1)
    raise ValueError(
        f"the model takes images of {channels} channels; image files are read as RGB (3 channels) or grey (1)"
    )


def load_image(path: str | os.PathLike, spec: Any, *, max_pixels: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """One file -> ``(input float32 [H, W, C], original uint8 [h, w, 3])`` for ``spec``
    (``C = spec.channels``: 3, or 1 for a grey model).

    ``input`` is ``spec.preprocess`` of the image resized to ``spec.input_size``; ``original`` is
    the RGB image at its own size. Raises :class:`ImageLoadError` naming the file.
    """
    original = read_rgb(path, max_pixels=max_pixels)
    resized = _to_channels(_resize(original, spec.input_size), getattr(spec, "channels", 3))
    model_input = np.asarray(spec.preprocess(resized[None]), dtype=np.float32)[0]
    return model_input, original


def load_images(paths: Any, spec: Any, *, max_pixels: int | None = None) -> tuple[np.ndarray, list[np.ndarray]]:
    """Files -> ``(inputs float32 [B, H, W, C], originals: list of uint8 [h_i, w_i, 3])``.

    ``paths``: a path or a sequence of paths. The first unreadable file raises
    :class:`ImageLoadError` naming it (use :func:`load_image` per file to skip bad ones).
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    paths = list(paths)
    if not paths:
        raise ValueError("load_images needs at least one path, got none")
    originals = [read_rgb(p, max_pixels=max_pixels) for p in paths]
    batch = _to_channels(np.stack([_resize(o, spec.input_size) for o in originals]), getattr(spec, "channels", 3))
    inputs = np.asarray(spec.preprocess(batch), dtype=np.float32)
    return inputs, originals
