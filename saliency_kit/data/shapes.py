"""The "shapes" task: a synthetic data set and the small CNN that saliency_kit ships trained.

Every image is 64×64 RGB with exactly one filled shape on a cluttered background; the mask says
which pixels the shape covers, so saliency maps can be scored against ground truth
(``sk.evaluate.pointing_game``). The generator needs only NumPy and Pillow::

    images, masks, labels = make_dataset(1000, seed=3)   # uint8 [n,64,64,3], bool [n,64,64], int64 [n]

Data specification (what ``make_dataset`` guarantees):

- Classes, in this order: ``CLASS_NAMES = ("circle", "square", "triangle", "star", "cross")``.
  The star is a regular five-pointed star (inner radius 0.382 × outer); the cross is a plus sign
  whose arms are one third of its tip-to-tip length wide.
- The shape's circumscribed circle has a diameter drawn uniformly from 18 to 34 px and lies fully
  inside the image (at least one pixel from every edge); the rotation is uniform over all angles.
- Background: a linear colour gradient in a random direction between two random colours, plus
  per-pixel uniform integer noise in [-16, 16] (clipped to 0..255), then 0-3 straight lines
  (1-2 px wide, random colours) drawn on it. The shape is painted last, so the lines run under it.
- The shape is one flat colour that differs from *every* background pixel beneath it (noise and
  lines included) by at least 100 in summed absolute RGB difference.
- ``masks[i]`` is exactly the set of pixels painted with the shape's colour: the pixels at least
  half covered by the ideal shape (no anti-aliasing).
- Image ``i`` depends only on ``(seed, i)``: the same seed gives the same data, and
  ``make_dataset(n, s)`` is the first ``n`` images of ``make_dataset(m, s)`` for any ``m >= n``.

The model's input is the uint8 image scaled to [0, 1] (float32).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from PIL import Image, ImageDraw

__all__ = ["shape_polygon", "rasterise", "gradient_background", "make_dataset", "preprocess", "build_model"]

CLASS_NAMES = ("circle", "square", "triangle", "star", "cross")
IMAGE_SIZE = 64
MIN_DIAMETER, MAX_DIAMETER = 18, 34
NOISE = 16
MIN_COLOUR_DISTANCE = 100
STAR_INNER_RATIO = (3 - math.sqrt(5)) / 2  # 0.382: a regular pentagram's inner/outer radius
GRADCAM_LAYER = "conv4"  # the last spatial layer of build_model()


# ----------------------------------------------------------------------------------- geometry
def shape_polygon(label: int, centre: tuple[float, float], radius: float, angle: float) -> list:
    """Vertices ``[(x, y), ...]`` of shape ``label`` with circumscribed ``radius`` (px), rotated by
    ``angle`` (radians) about ``centre``. The circle is returned as a 96-gon."""
    if label == 0:  # circle
        thetas = np.linspace(0, 2 * np.pi, 96, endpoint=False)
        radii = np.full_like(thetas, radius)
    elif label == 1:  # square: corners on the circle
        thetas = np.pi / 4 + np.arange(4) * np.pi / 2
        radii = np.full(4, radius)
    elif label == 2:  # equilateral triangle
        thetas = -np.pi / 2 + np.arange(3) * 2 * np.pi / 3
        radii = np.full(3, radius)
    elif label == 3:  # five-pointed star: outer and inner vertices alternate
        thetas = -np.pi / 2 + np.arange(10) * np.pi / 5
        radii = np.where(np.arange(10) % 2 == 0, radius, radius * STAR_INNER_RATIO)
    elif label == 4:  # plus-shaped cross, arm width = length / 3
        # Tip-to-tip length L, half-width w = L/6; the arm-end corners lie on the circle:
        # (L/2)^2 + (L/6)^2 = radius^2.
        half = radius / math.sqrt(1 + 1 / 9)
        w = half / 3
        pts = np.array(
            [
                (w, half),
                (w, w),
                (half, w),
                (half, -w),
                (w, -w),
                (w, -half),
                (-w, -half),
                (-w, -w),
                (-half, -w),
                (-half, w),
                (-w, w),
                (-w, half),
            ]
        )
        thetas = np.arctan2(pts[:, 1], pts[:, 0])
        radii = np.hypot(pts[:, 0], pts[:, 1])
    else:
        raise ValueError(f"label must be 0..{len(CLASS_NAMES) - 1}, got {label}")
    thetas = thetas + angle
    cx, cy = centre
    return list(zip(cx + radii * np.cos(thetas), cy + radii * np.sin(thetas)))


def rasterise(polygon: Any, supersample: int = 4) -> np.ndarray:
    """bool [64, 64]: pixels at least half covered by ``polygon`` (coordinates in pixels, pixel
    ``(i, j)`` spanning ``[j, j+1) x [i, i+1)``), measured on a ``supersample``-times finer grid."""
    size = IMAGE_SIZE * supersample
    canvas = Image.new("L", (size, size), 0)
    ImageDraw.Draw(canvas).polygon([(x * supersample, y * supersample) for x, y in polygon], fill=255)
    return np.asarray(canvas.reduce(supersample)) >= 128  # block mean, rounded: >= half covered


def gradient_background(rng: np.random.Generator) -> np.ndarray:
    """A float [64, 64, 3] linear gradient between two random colours in a random direction."""
    c0, c1 = rng.integers(0, 256, size=(2, 3)).astype(np.float32)
    phi = rng.uniform(0, 2 * np.pi)
    coords = np.arange(IMAGE_SIZE, dtype=np.float32) - (IMAGE_SIZE - 1) / 2
    proj = np.cos(phi) * coords[None, :] + np.sin(phi) * coords[:, None]  # [y, x]
    t = (proj - proj.min()) / (proj.max() - proj.min())
    return c0 + t[..., None] * (c1 - c0)


def _one_image(seed: int, index: int) -> Any:
    """Image ``index`` of the data set for ``seed``: (uint8 [64,64,3], bool [64,64], label, info)."""
    rng = np.random.default_rng((seed, index))
    label = int(rng.integers(len(CLASS_NAMES)))
    while True:  # a scene where no colour is far enough from the background is redrawn (rare)
        background = gradient_background(rng)
        background += rng.integers(-NOISE, NOISE + 1, size=background.shape)
        canvas = Image.fromarray(np.clip(np.rint(background), 0, 255).astype(np.uint8))
        draw = ImageDraw.Draw(canvas)
        n_lines = int(rng.integers(0, 4))
        for _ in range(n_lines):
            x0, y0, x1, y1 = rng.uniform(0, IMAGE_SIZE - 1, size=4)
            colour = tuple(int(c) for c in rng.integers(0, 256, size=3))
            draw.line([(x0, y0), (x1, y1)], fill=colour, width=int(rng.integers(1, 3)))

        radius = rng.uniform(MIN_DIAMETER, MAX_DIAMETER) / 2
        lo, hi = radius + 1, IMAGE_SIZE - 2 - radius  # circumscribed circle >= 1 px from each edge
        centre = (rng.uniform(lo, hi), rng.uniform(lo, hi))
        angle = rng.uniform(0, 2 * np.pi)
        mask = rasterise(shape_polygon(label, centre, radius, angle))

        image = np.array(canvas)
        beneath = image[mask].astype(np.int16)  # [P, 3]
        for _ in range(8):  # up to 8 x 8 random colours; the first one far enough is used
            candidates = rng.integers(0, 256, size=(8, 1, 3), dtype=np.int16)
            distance = np.abs(candidates - beneath).sum(-1, dtype=np.int16).min(axis=1)
            ok = np.flatnonzero(distance >= MIN_COLOUR_DISTANCE)
            if ok.size:
                break
        if ok.size:
            colour = candidates[ok[0], 0].astype(np.uint8)
            info = {
                "radius": radius,
                "centre": centre,
                "angle": angle,
                "colour": colour,
                "lines": n_lines,
                "background": image.copy(),
            }
            image[mask] = colour
            return image, mask, label, info


def make_dataset(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Generate ``n`` labelled images (see the module docstring for the exact specification).

    Returns ``(images uint8 [n, 64, 64, 3], masks bool [n, 64, 64], labels int64 [n])``.
    Deterministic for a given ``seed``; over 1,000 images per second on one core.
    """
    images, masks, labels = _allocate(n)
    for i in range(len(labels)):
        images[i], masks[i], labels[i], _ = _one_image(int(seed), i)
    return images, masks, labels


def _make_dataset_with_info(n: int, seed: int = 0) -> Any:
    """``make_dataset`` plus one dict per image for tests: ``radius``, ``centre`` (x, y),
    ``angle``, ``colour``, ``lines`` (how many) and ``background`` (the image before the shape)."""
    images, masks, labels = _allocate(n)
    infos = []
    for i in range(len(labels)):
        images[i], masks[i], labels[i], info = _one_image(int(seed), i)
        infos.append(info)
    return images, masks, labels, infos


def _allocate(n: Any) -> Any:
    if int(n) != n or n < 0:
        raise ValueError(f"n must be a non-negative integer, got {n!r}")
    n = int(n)
    return (
        np.empty((n, IMAGE_SIZE, IMAGE_SIZE, 3), np.uint8),
        np.empty((n, IMAGE_SIZE, IMAGE_SIZE), bool),
        np.empty(n, np.int64),
    )


def preprocess(images: Any) -> np.ndarray:
    """The shapes model's input: uint8 ``[B, H, W, 3]`` -> float32 in [0, 1]."""
    return np.asarray(images, dtype=np.float32) / np.float32(255.0)


# -------------------------------------------------------------------------------------- model
def build_model() -> Any:
    """The untrained shapes CNN: float32 [B, 64, 64, 3] in [0, 1] -> softmax [B, 5].

    Built to exercise every path ``sk.rewrite`` must handle:

    - ``conv1``: a Conv2D with a fused ``activation="relu"``;
    - ``conv2`` -> ``bn2`` (BatchNormalization) -> ``relu2`` (``Activation("relu")``);
    - ``block3``: a small functional keras Model nested in this one
      (``block3_conv`` -> ``block3_bn`` -> ``block3_relu``, a ``keras.layers.ReLU``);
    - ``conv4``: the last spatial layer (8×8×64, fused relu), the default Grad-CAM layer;
    - ``pool`` (global max pooling) -> ``predictions`` (Dense(5) with softmax).
    """
    import keras
    from keras import layers

    inner_in = keras.Input((16, 16, 24), name="block3_input")
    x = layers.Conv2D(32, 3, padding="same", use_bias=False, name="block3_conv")(inner_in)
    x = layers.BatchNormalization(name="block3_bn")(x)
    x = layers.ReLU(name="block3_relu")(x)
    block3 = keras.Model(inner_in, x, name="block3")

    inputs = keras.Input((IMAGE_SIZE, IMAGE_SIZE, 3), name="image")
    x = layers.Conv2D(16, 3, padding="same", activation="relu", name="conv1")(inputs)
    x = layers.MaxPooling2D(2, name="pool1")(x)  # 32x32
    x = layers.Conv2D(24, 3, padding="same", use_bias=False, name="conv2")(x)
    x = layers.BatchNormalization(name="bn2")(x)
    x = layers.Activation("relu", name="relu2")(x)
    x = layers.MaxPooling2D(2, name="pool2")(x)  # 16x16
    x = block3(x)
    x = layers.MaxPooling2D(2, name="pool3")(x)  # 8x8
    x = layers.Conv2D(64, 3, padding="same", activation="relu", name="conv4")(x)
    x = layers.GlobalMaxPooling2D(name="pool")(x)
    outputs = layers.Dense(len(CLASS_NAMES), activation="softmax", name="predictions")(x)
    return keras.Model(inputs, outputs, name="shapes")
