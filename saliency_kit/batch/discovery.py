"""Which images a batch run explains: discovery under INPUT_DIR, shards, and each image's noise key.

Shards split the images by a hash of their path relative to INPUT_DIR, so the split is the same on
every machine, disjoint, covers every file, and does not move when files are added.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable, Sequence

__all__ = ["IMAGE_EXTENSIONS", "discover_images", "image_key", "parse_shard", "select_shard", "shard_of"]

#: File extensions treated as images (lower case). Anything else under INPUT_DIR is ignored.
IMAGE_EXTENSIONS = frozenset(
    {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm", ".pnm"}
)


def discover_images(root: str, *, exclude: Sequence[str] = ()) -> list[str]:
    """Relative POSIX paths of every image file under ``root`` (recursive, sorted, no hidden entries).

    Directories in ``exclude`` (e.g. an output folder inside ``root``) are not entered.
    """
    root = os.path.abspath(root)
    excluded = {os.path.realpath(path) for path in exclude}
    found = []
    for directory, subdirs, files in os.walk(root):
        subdirs[:] = sorted(
            d for d in subdirs if not d.startswith(".") and os.path.realpath(os.path.join(directory, d)) not in excluded
        )
        for name in files:
            if not name.startswith(".") and os.path.splitext(name)[1].lower() in IMAGE_EXTENSIONS:
                found.append(os.path.relpath(os.path.join(directory, name), root).replace(os.sep, "/"))
    return sorted(found)


def parse_shard(text: str) -> tuple[int, int]:
    """``"I/N"`` -> ``(I, N)`` with ``0 <= I < N``; raises ValueError with the expected form."""
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if not match or int(match[2]) < 1 or int(match[1]) >= int(match[2]):
        raise ValueError(f"--shard expects I/N with 0 <= I < N, e.g. 0/4 ... 3/4; received {text!r}.")
    return int(match[1]), int(match[2])


def shard_of(relative_path: str, count: int) -> int:
    """The shard (0..count-1) a file belongs to: a hash of its relative path, so the split is the
    same on every machine, disjoint, covers every file, and does not move when files are added."""
    digest = hashlib.sha256(relative_path.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % count


def image_key(relative_path: str) -> int:
    """The noise key of an image (``sk.explain(..., input_keys=)``): a 31-bit hash of its path
    relative to INPUT_DIR, so its seeded noise (SmoothGrad, ...) is the same whichever batch,
    shard or worker explains it."""
    digest = hashlib.blake2b(relative_path.encode("utf-8"), digest_size=4, person=b"saliency-noise").digest()
    return int.from_bytes(digest, "big") & 0x7FFFFFFF


def select_shard(relative_paths: Iterable[str], index: int, count: int) -> list[str]:
    return [path for path in relative_paths if shard_of(path, count) == index]
