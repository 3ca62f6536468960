"""Scenes of 1-3 shapes: the data the shipped ``shapes_seg`` and ``shapes_det`` models learn from.

Each image is 64×64 RGB with one to three filled shapes of the ``shapes`` task on the same kind
of cluttered background (a colour gradient, pixel noise and 0-3 lines); for each image the
generator gives the label map a segmentation is scored against and the box of every shape::

    scenes = make_scenes(1000, seed=3)
    scenes.images       # uint8 [n, 64, 64, 3]
    scenes.label_maps   # uint8 [n, 64, 64]: 0 background, 1 + k the pixels of a shape of class k
    scenes.boxes        # float32 [n, 3, 4]: (x0, y0, x1, y1) in pixels, row j < counts[i] is shape j
    scenes.labels       # int64 [n, 3]: the class k of each shape, -1 past counts[i]
    scenes.counts       # int64 [n]: how many shapes (1-3)

Data specification (what ``make_scenes`` guarantees):

- Segmentation classes, in this order: ``SEGMENTATION_CLASSES = ("background", "circle", "square",
  "triangle", "star", "cross")``; shape classes as in ``shapes.CLASS_NAMES`` (index k there is
  k + 1 in a label map).
- The number of shapes is uniform over 1..3 (``objects`` changes the range; ``(0, 0)`` gives the
  backgrounds alone). Each shape's
  circumscribed circle has a diameter uniform in 16..28 px, lies inside the image at least one
  pixel from every edge, and is at least two pixels from every other shape's circle: shapes never
  touch, so every shape's mask and box are its own.
- Each shape is one flat colour that differs from every background pixel beneath it by at least
  100 in summed absolute RGB difference (as in ``shapes``); the shapes are painted over the lines.
- A box is the pixel-edge bounding box of the shape's mask: ``x0 = first column``, ``x1 = last
  column + 1`` (likewise y), so a box's width is the mask's width in pixels.
- Image ``i`` depends only on ``(seed, i)``, and never repeats an image of ``shapes.make_dataset``
  for the same seed.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np
from PIL import Image, ImageDraw

from .shapes import CLASS_NAMES, IMAGE_SIZE, MIN_COLOUR_DISTANCE, NOISE, gradient_background, rasterise, shape_polygon

__all__ = ["SEGMENTATION_CLASSES", "MAX_OBJECTS", "Scenes", "make_scenes", "scene_boxes"]

SEGMENTATION_CLASSES = ("background",) + CLASS_NAMES
MAX_OBJECTS = 3
MIN_DIAMETER, MAX_DIAMETER = 16, 28
GAP = 2  # px between the circumscribed circles of two shapes
_STREAM = 20  # keeps these images' random streams apart from ``shapes.make_dataset``'s


class Scenes(NamedTuple):
    """What :func:`make_scenes` returns (see the module docstring for shapes and meaning)."""

    images: np.ndarray
    label_maps: np.ndarray
    boxes: np.ndarray
    labels: np.ndarray
    counts: np.ndarray


def _place(rng: np.random.Generator, count: int) -> list:
    """``count`` circles ``(cx, cy, radius)`` inside the image, apart by at least ``GAP``; fewer
    when 50 tries find no room for the next one."""
    circles: list[tuple[float, float, float]] = []
    for _ in range(count):
        for _ in range(50):
            radius = rng.uniform(MIN_DIAMETER, MAX_DIAMETER) / 2
            lo, hi = radius + 1, IMAGE_SIZE - 2 - radius
            cx, cy = rng.uniform(lo, hi, size=2)
            if all(math.hypot(cx - x, cy - y) >= radius + r + GAP for x, y, r in circles):
                circles.append((cx, cy, radius))
                break
    return circles


def _one_scene(seed: int, index: int, objects: tuple[int, int]) -> Any:
    """Image ``index`` for ``seed``: (uint8 [64, 64, 3], uint8 label map, boxes [m, 4], labels [m])."""
    rng = np.random.default_rng((seed, index, _STREAM))
    count = int(rng.integers(objects[0], objects[1] + 1))
    while True:  # a scene where some shape finds no colour far enough from the background is redrawn
        background = gradient_background(rng) + rng.integers(-NOISE, NOISE + 1, (IMAGE_SIZE, IMAGE_SIZE, 3))
        canvas = Image.fromarray(np.clip(np.rint(background), 0, 255).astype(np.uint8))
        draw = ImageDraw.Draw(canvas)
        for _ in range(int(rng.integers(0, 4))):
            x0, y0, x1, y1 = rng.uniform(0, IMAGE_SIZE - 1, size=4)
            colour = tuple(int(c) for c in rng.integers(0, 256, size=3))
            draw.line([(x0, y0), (x1, y1)], fill=colour, width=int(rng.integers(1, 3)))
        image = np.array(canvas)
        label_map = np.zeros((IMAGE_SIZE, IMAGE_SIZE), np.uint8)
        boxes, labels = [], []
        for cx, cy, radius in _place(rng, count):
            label = int(rng.integers(len(CLASS_NAMES)))
            mask = rasterise(shape_polygon(label, (cx, cy), radius, rng.uniform(0, 2 * np.pi)))
            colour = _far_colour(rng, image[mask])
            if colour is None:
                break
            image[mask] = colour
            label_map[mask] = label + 1
            rows, cols = np.flatnonzero(mask.any(axis=1)), np.flatnonzero(mask.any(axis=0))
            boxes.append((cols[0], rows[0], cols[-1] + 1, rows[-1] + 1))
            labels.append(label)
        else:
            return image, label_map, np.asarray(boxes, np.float32).reshape(-1, 4), np.asarray(labels, np.int64)


def _far_colour(rng: np.random.Generator, beneath: np.ndarray) -> Any:
    """A colour at least ``MIN_COLOUR_DISTANCE`` from every pixel of ``beneath`` [P, 3], or None."""
    beneath = beneath.astype(np.int16)
    for _ in range(8):
        candidates = rng.integers(0, 256, size=(8, 1, 3), dtype=np.int16)
        distance = np.abs(candidates - beneath).sum(-1, dtype=np.int16).min(axis=1)
        ok = np.flatnonzero(distance >= MIN_COLOUR_DISTANCE)
        if ok.size:
            return candidates[ok[0], 0].astype(np.uint8)
    return None


def make_scenes(n: int, seed: int = 0, *, objects: tuple[int, int] = (1, MAX_OBJECTS)) -> Scenes:
    """Generate ``n`` scenes of ``objects[0]``..``objects[1]`` shapes (see the module docstring).

    Deterministic for a given ``seed``: ``make_scenes(n, s)`` is the first ``n`` scenes of
    ``make_scenes(m, s)`` for any ``m >= n``.
    """
    if int(n) != n or n < 0:
        raise ValueError(f"n must be a non-negative whole number; received {n!r}.")
    low, high = (int(v) for v in objects)
    if not 0 <= low <= high <= MAX_OBJECTS:
        raise ValueError(f"objects must be (low, high) with 0 <= low <= high <= {MAX_OBJECTS}; received {objects!r}.")
    n = int(n)
    images = np.empty((n, IMAGE_SIZE, IMAGE_SIZE, 3), np.uint8)
    label_maps = np.empty((n, IMAGE_SIZE, IMAGE_SIZE), np.uint8)
    boxes = np.zeros((n, MAX_OBJECTS, 4), np.float32)
    labels = np.full((n, MAX_OBJECTS), -1, np.int64)
    counts = np.empty(n, np.int64)
    for i in range(n):
        images[i], label_maps[i], scene_box, scene_labels = _one_scene(int(seed), i, (low, high))
        counts[i] = len(scene_labels)
        boxes[i, : counts[i]] = scene_box
        labels[i, : counts[i]] = scene_labels
    return Scenes(images, label_maps, boxes, labels, counts)


def scene_boxes(scenes: Scenes, i: int) -> tuple[np.ndarray, np.ndarray]:
    """The boxes ``[m, 4]`` and class labels ``[m]`` of scene ``i`` (its padding dropped)."""
    m = int(scenes.counts[i])
    return scenes.boxes[i, :m], scenes.labels[i, :m]
