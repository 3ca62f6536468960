"""The untrained architectures of the shipped ``shapes_seg`` and ``shapes_det`` models.

Both read float32 ``[B, 64, 64, 3]`` in [0, 1] (the ``"unit"`` preprocessing of a uint8 image)
and learn from :mod:`saliency_kit.data.scenes` (``scripts/train_shapes_seg.py``,
``scripts/train_shapes_det.py``):

- :func:`build_segmenter`: a fully convolutional net, ``[B, 64, 64, 6]`` logits (background and
  the five shapes, ``scenes.SEGMENTATION_CLASSES``).
- :func:`build_detector`: a single-stage, anchor-free detector whose output is its raw heads before
  non-max suppression, ``[B, 64, 4 + 1 + 5]``: for each cell of an 8×8 grid one proposal
  ``(x0, y0, x1, y1)`` in input pixels, an objectness logit and five class logits.
  :func:`saliency_kit.targets.detections.decode` turns it into detections.

:class:`CellBoxes` is the detector's one layer of its own (registered with Keras, so the saved
model loads in safe mode once this module is imported; :func:`saliency_kit.load_model` does so).
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
from keras import layers, ops

from .scenes import SEGMENTATION_CLASSES
from .shapes import CLASS_NAMES, IMAGE_SIZE

__all__ = [
    "CellBoxes",
    "build_segmenter",
    "build_detector",
    "DETECTOR_STRIDE",
    "SEGMENTER_CAM_LAYER",
    "DETECTOR_CAM_LAYER",
]

DETECTOR_STRIDE = 8  # input pixels per grid cell
SEGMENTER_CAM_LAYER = "decoder"
DETECTOR_CAM_LAYER = "features"


@keras.saving.register_keras_serializable(package="saliency_kit")
class CellBoxes(layers.Layer):
    """Distances from each grid cell's centre to a box's edges -> the box in input pixels.

    ``[B, h, w, 4]`` non-negative distances ``(left, top, right, bottom)`` in cells ->
    ``[B, h·w, 4]`` boxes ``(x0, y0, x1, y1)``, cells in row-major order: with ``s = stride`` and
    cell ``(i, j)`` centred at ``(s·(j + ½), s·(i + ½))``, ``x0 = s·(j + ½ − left)``,
    ``x1 = s·(j + ½ + right)`` (likewise y). Affine in the distances.
    """

    def __init__(self, stride: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.stride = int(stride)

    def call(self, distances: Any) -> Any:
        h, w = distances.shape[1], distances.shape[2]
        centre_y, centre_x = np.meshgrid(np.arange(h) + 0.5, np.arange(w) + 0.5, indexing="ij")
        centres = np.stack([centre_x, centre_y, centre_x, centre_y], axis=-1).astype("float32")
        signs = np.array([-1.0, -1.0, 1.0, 1.0], dtype="float32")
        centres = ops.convert_to_tensor(centres, dtype=distances.dtype)
        boxes = self.stride * (centres + ops.convert_to_tensor(signs, dtype=distances.dtype) * distances)
        return ops.reshape(boxes, (-1, h * w, 4))

    def compute_output_shape(self, input_shape: tuple) -> tuple:
        return (input_shape[0], input_shape[1] * input_shape[2], 4)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "stride": self.stride}


def build_segmenter() -> keras.Model:
    """The untrained ``shapes_seg`` net: ``[B, 64, 64, 3]`` -> logits ``[B, 64, 64, 6]``.

    An encoder to 16×16 (``conv1``-``conv3``), dilated context (``context1``, ``context2``: a
    receptive field wider than any shape), a decoder at 32×32 joined with ``conv2``'s features
    (``decoder``, the default Grad-CAM layer), 1×1 ``logits`` upsampled bilinearly to the input size.
    """
    inputs = keras.Input((IMAGE_SIZE, IMAGE_SIZE, 3), name="image")
    x = layers.Conv2D(12, 3, padding="same", activation="relu", name="conv1")(inputs)
    x = layers.MaxPooling2D(2, name="pool1")(x)  # 32x32
    skip = layers.Conv2D(24, 3, padding="same", activation="relu", name="conv2")(x)
    x = layers.MaxPooling2D(2, name="pool2")(skip)  # 16x16
    x = layers.Conv2D(32, 3, padding="same", activation="relu", name="conv3")(x)
    x = layers.Conv2D(32, 3, padding="same", dilation_rate=2, activation="relu", name="context1")(x)
    x = layers.Conv2D(32, 3, padding="same", dilation_rate=4, activation="relu", name="context2")(x)
    x = layers.UpSampling2D(2, interpolation="bilinear", name="up")(x)  # 32x32
    x = layers.Concatenate(name="join")([x, skip])
    x = layers.Conv2D(32, 3, padding="same", activation="relu", name=SEGMENTER_CAM_LAYER)(x)
    x = layers.Conv2D(len(SEGMENTATION_CLASSES), 1, name="logits")(x)
    outputs = layers.UpSampling2D(2, interpolation="bilinear", name="segmentation")(x)  # 64x64
    return keras.Model(inputs, outputs, name="shapes_seg")


def build_detector() -> keras.Model:
    """The untrained ``shapes_det`` net: ``[B, 64, 64, 3]`` -> raw heads ``[B, 64, 4 + 1 + 5]``.

    A backbone to an 8×8 grid (``conv1``-``conv4``, then ``features``, dilated: the default
    Grad-CAM layer), and three 1×1 heads per cell: ``box_distances`` (softplus, in cells, to
    :class:`CellBoxes`), ``objectness`` (a logit) and ``class_logits``, concatenated as
    ``detections``.
    """
    grid = IMAGE_SIZE // DETECTOR_STRIDE
    inputs = keras.Input((IMAGE_SIZE, IMAGE_SIZE, 3), name="image")
    x = layers.Conv2D(16, 3, padding="same", activation="relu", name="conv1")(inputs)
    x = layers.MaxPooling2D(2, name="pool1")(x)  # 32x32
    x = layers.Conv2D(24, 3, padding="same", activation="relu", name="conv2")(x)
    x = layers.MaxPooling2D(2, name="pool2")(x)  # 16x16
    x = layers.Conv2D(32, 3, padding="same", activation="relu", name="conv3")(x)
    x = layers.MaxPooling2D(2, name="pool3")(x)  # 8x8
    x = layers.Conv2D(48, 3, padding="same", activation="relu", name="conv4")(x)
    x = layers.Conv2D(48, 3, padding="same", dilation_rate=2, activation="relu", name=DETECTOR_CAM_LAYER)(x)
    distances = layers.Conv2D(4, 1, activation="softplus", name="box_distances")(x)
    boxes = CellBoxes(DETECTOR_STRIDE, name="boxes")(distances)
    objectness = layers.Reshape((grid * grid, 1), name="objectness")(layers.Conv2D(1, 1, name="objectness_logit")(x))
    classes = layers.Reshape((grid * grid, len(CLASS_NAMES)), name="classes")(
        layers.Conv2D(len(CLASS_NAMES), 1, name="class_logits")(x)
    )
    outputs = layers.Concatenate(name="detections")([boxes, objectness, classes])
    return keras.Model(inputs, outputs, name="shapes_det")
