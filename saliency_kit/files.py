"""Writing files so that a killed process never leaves half of one: atomic writes, NPZ and JSON.

    from saliency_kit.files import write_atomic, atomic_path, write_json
    write_atomic("out/map.png", png_bytes)         # temporary file beside it, then a rename
    with atomic_path("out/table.csv") as temp:     # any writer: it writes temp, we rename
        frame.to_csv(temp)

Every file is first written to a hidden ``.NAME.*.partial`` file in the same folder and renamed
onto its name, so a reader sees either the old file or the complete new one. ``durable=True``
also flushes the contents to disk (``fsync``) before the rename, so they survive a power cut too.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import tempfile
from collections.abc import Iterator
from typing import Any

import numpy as np

__all__ = [
    "png_bytes",
    "save_png",
    "atomic_path",
    "write_atomic",
    "write_json",
    "npz_bytes",
    "PARTIAL_SUFFIX",
    "remove_partials",
]

PARTIAL_SUFFIX = ".partial"


def _umask() -> int:
    """The process's umask, read without changing it where Linux allows (no race with threads)."""
    try:
        with open("/proc/self/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_UMASK = _umask()


def _usual_permissions(fd: int) -> None:
    """mkstemp makes files private (0600); give the file what ``open()`` would (0666 - umask)."""
    if hasattr(os, "fchmod"):
        os.fchmod(fd, 0o666 & ~_UMASK)


def _temporary_beside(path: str) -> tuple[int, str]:
    """A new hidden ``.NAME.*.partial`` file in ``path``'s folder (made if missing)."""
    directory = os.path.dirname(path) or "."
    prefix = f".{os.path.basename(path)}."
    try:
        return tempfile.mkstemp(dir=directory, prefix=prefix, suffix=PARTIAL_SUFFIX)
    except FileNotFoundError:
        os.makedirs(directory, exist_ok=True)
        return tempfile.mkstemp(dir=directory, prefix=prefix, suffix=PARTIAL_SUFFIX)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, *, durable: bool = True) -> Iterator[str]:
    """Yield a temporary path beside ``path``; on success it is renamed onto ``path``.

    A process killed at any moment leaves either the old file or the complete new one, never a
    half-written ``path`` (at worst a hidden ``.NAME.*.partial`` file, which callers may delete).
    ``durable=True`` also flushes the contents to disk (``fsync``) before the rename.
    """
    path = os.fspath(path)
    fd, temp = _temporary_beside(path)
    try:
        _usual_permissions(fd)
        os.close(fd)
        yield temp
        if durable:
            with open(temp, "rb+") as handle:
                os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(temp)
        raise


def write_atomic(path: str | os.PathLike, data: bytes, *, durable: bool = True) -> str:
    """Write ``data`` to ``path`` through a temporary file and a rename (see :func:`atomic_path`)."""
    path = os.fspath(path)
    with atomic_path(path, durable=durable) as temp:
        with open(temp, "wb") as handle:
            handle.write(data)
    return path


def _plain(value: Any) -> Any:
    """JSON-ready: NumPy scalars as Python numbers, NaN and infinities as ``null``."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (float, np.floating)):
        return float(value) if np.isfinite(value) else None
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.bool_):
        return bool(value)
    return value


def write_json(data: Any, path: str | os.PathLike, *, durable: bool = True) -> str:
    """Write ``data`` as indented JSON atomically; NumPy numbers become plain ones, NaN ``null``."""
    text = json.dumps(_plain(data), indent=2, ensure_ascii=False) + "\n"
    return write_atomic(path, text.encode("utf-8"), durable=durable)


def npz_bytes(**arrays: Any) -> bytes:
    """The contents of a compressed ``.npz`` file holding ``arrays``."""
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    return buffer.getvalue()


def remove_partials(directory: str | os.PathLike) -> None:
    """Delete leftover ``.*.partial`` files of a killed run in one folder (missing folder: nothing)."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return
    for name in names:
        if name.startswith(".") and name.endswith(PARTIAL_SUFFIX):
            with contextlib.suppress(OSError):
                os.remove(os.path.join(directory, name))


def png_bytes(array_or_figure: Any, *, dpi: int | None = None) -> bytes:
    """PNG file contents of a uint8 ``[H, W, 3]`` / ``[H, W]`` array or of a matplotlib Figure."""
    from PIL import Image

    buffer = io.BytesIO()
    if hasattr(array_or_figure, "savefig"):
        array_or_figure.savefig(
            buffer, format="png", dpi=dpi or "figure", facecolor="white", bbox_inches="tight", pad_inches=0.05
        )
    else:
        array = np.asarray(array_or_figure)
        if array.dtype != np.uint8 or array.ndim not in (2, 3) or (array.ndim == 3 and array.shape[-1] not in (3, 4)):
            raise ValueError(
                f"save_png() expects a Figure or a uint8 image [H, W(, 3|4)]; got "
                f"{array.dtype} {array.shape} (use heatmap() or overlay() to make one)"
            )
        Image.fromarray(array).save(buffer, format="PNG", compress_level=1)  # fastest; no bigger here
    return buffer.getvalue()


def save_png(array_or_figure: Any, path: str | os.PathLike, *, dpi: int | None = None, durable: bool = True) -> str:
    """Write a uint8 ``[H, W, 3]`` / ``[H, W]`` array or a matplotlib Figure to ``path`` atomically.

    Returns ``path``. The figure is saved with a tight bounding box on a white background.
    ``durable``: see :func:`atomic_path`.
    """
    return write_atomic(path, png_bytes(array_or_figure, dpi=dpi), durable=durable)
