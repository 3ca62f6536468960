"""Train the shipped "shapes_det" detector and write ``saliency_kit/data/shapes_det.keras``.

    .venv/bin/python scripts/train_shapes_det.py        # a few minutes on 2 CPU cores

Data: scenes of 1-3 shapes with their boxes (``saliency_kit.data.scenes``), plus a tenth as many
scenes with no shape (so that a plain background is not a detection). Seeds: 21 training (26 the
empty scenes), 22 validation (monitoring only), 23 the held-out test set reported below; the
package's tests use seeds 24 and 27. Deterministic (fixed seeds, TensorFlow op determinism) on one machine
and library versions.

Training targets, per cell of the detector's 8×8 grid: a cell is a positive of a shape when its
centre lies inside the shape's box and within one cell (8 px) of the box's centre on each axis (a
cell two shapes claim goes to the smaller box); its targets are that box, objectness 1 and the
shape's class. Loss: binary cross-entropy of the objectness logit on every cell, plus, on the
positives, the class cross-entropy and the L1 distance of the box edges in cells, all divided by
the number of positives.

Prints, on the held-out scenes after ``saliency_kit.targets.detections.decode`` (default thresholds): box
recall (a true box counts when a detection of its class overlaps it with IoU >= 0.5), precision,
the mean IoU of the matched boxes, the file size and the training time.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from saliency_kit.data import scene_models, scenes  # noqa: E402
from saliency_kit.data.shapes import CLASS_NAMES, IMAGE_SIZE, preprocess  # noqa: E402
from saliency_kit.targets import detections  # noqa: E402

TRAIN_SEED, VAL_SEED, TEST_SEED, EMPTY_SEED = 21, 22, 23, 26
WEIGHT_SEED = 0
MATCH_IOU = 0.5


def cell_targets(data: scenes.Scenes) -> np.ndarray:
    """float32 ``[n, cells, 4 + 1 + C]``: each cell's box, objectness (1 = positive) and one-hot class."""
    stride = scene_models.DETECTOR_STRIDE
    grid = IMAGE_SIZE // stride
    centres = (np.stack(np.meshgrid(np.arange(grid), np.arange(grid), indexing="xy"), -1).reshape(-1, 2) + 0.5) * stride
    targets = np.zeros((len(data.images), grid * grid, 5 + len(CLASS_NAMES)), np.float32)
    for i in range(len(data.images)):
        boxes, labels = scenes.scene_boxes(data, i)
        for j in np.argsort(-(boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])):  # smaller boxes last
            x0, y0, x1, y1 = boxes[j]
            inside = (centres[:, 0] > x0) & (centres[:, 0] < x1) & (centres[:, 1] > y0) & (centres[:, 1] < y1)
            near = (np.abs(centres[:, 0] - (x0 + x1) / 2) <= stride) & (np.abs(centres[:, 1] - (y0 + y1) / 2) <= stride)
            cells = inside & near
            targets[i, cells] = 0.0
            targets[i, cells, :4] = boxes[j]
            targets[i, cells, 4] = 1.0
            targets[i, cells, 5 + labels[j]] = 1.0
    return targets


def detection_loss(y_true, y_pred):
    positive = y_true[..., 4]
    count = tf.maximum(tf.reduce_sum(positive), 1.0)
    objectness = tf.nn.sigmoid_cross_entropy_with_logits(labels=positive, logits=y_pred[..., 4])
    classes = tf.nn.softmax_cross_entropy_with_logits(labels=y_true[..., 5:], logits=y_pred[..., 5:])
    edges = tf.reduce_sum(tf.abs(y_true[..., :4] - y_pred[..., :4]), -1) / scene_models.DETECTOR_STRIDE
    return (tf.reduce_sum(objectness) + tf.reduce_sum(positive * (classes + edges))) / count


def detection_scores(raw: np.ndarray, data: scenes.Scenes) -> dict:
    """Recall, precision and mean matched IoU of ``decode(raw)`` against the scenes' boxes: each
    true box is matched to the best-overlapping unmatched detection of its class."""
    found = detections.decode(raw)
    matched, ious, truths = 0, [], int(data.counts.sum())
    for i, image_found in enumerate(found):
        boxes, labels = scenes.scene_boxes(data, i)
        free = list(image_found)
        for box, label in zip(boxes, labels):
            candidates = [d for d in free if d.label == label]
            if not candidates:
                continue
            overlap = detections.box_iou([box], [d.box for d in candidates])[0]
            best = int(overlap.argmax())
            if overlap[best] >= MATCH_IOU:
                matched += 1
                ious.append(float(overlap[best]))
                free.remove(candidates[best])
    total = sum(len(f) for f in found)
    return {
        "recall": matched / truths,
        "precision": matched / max(total, 1),
        "mean_iou": float(np.mean(ious)) if ious else 0.0,
        "boxes": truths,
        "detections": total,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train-size", type=int, default=12_000)
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--test-size", type=int, default=1_000)
    parser.add_argument("--empty-fraction", type=float, default=0.1, help="scenes without a shape, per scene with")
    parser.add_argument("--out", type=Path, default=ROOT / "saliency_kit" / "data" / "shapes_det.keras")
    args = parser.parse_args(argv)

    keras.utils.set_random_seed(WEIGHT_SEED)
    tf.config.experimental.enable_op_determinism()
    start = time.perf_counter()
    train = scenes.make_scenes(args.train_size, seed=TRAIN_SEED)
    empty = scenes.make_scenes(int(args.train_size * args.empty_fraction), seed=EMPTY_SEED, objects=(0, 0))
    train = scenes.Scenes(*(np.concatenate([a, b]) for a, b in zip(train, empty, strict=True)))
    val = scenes.make_scenes(500, seed=VAL_SEED)
    print(f"generated {len(train.images)} training scenes in {time.perf_counter() - start:.1f} s", flush=True)

    model = scene_models.build_detector()
    steps = args.epochs * int(np.ceil(len(train.images) / args.batch_size))
    schedule = keras.optimizers.schedules.CosineDecay(3e-3, decay_steps=steps, alpha=0.02)
    model.compile(optimizer=keras.optimizers.Adam(schedule), loss=detection_loss)
    model.fit(
        preprocess(train.images),
        cell_targets(train),
        batch_size=args.batch_size,
        epochs=args.epochs,
        validation_data=(preprocess(val.images), cell_targets(val)),
        shuffle=True,
        verbose=2,
    )
    train_time = time.perf_counter() - start

    shipped = scene_models.build_detector()  # architecture and weights only, no optimizer state
    shipped.set_weights(model.get_weights())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    shipped.save(args.out)

    reloaded = keras.saving.load_model(args.out, compile=False)
    test = scenes.make_scenes(args.test_size, seed=TEST_SEED)
    scores = detection_scores(reloaded.predict(preprocess(test.images), batch_size=100, verbose=0), test)
    print(
        f"held-out box recall: {scores['recall']:.4f}, precision {scores['precision']:.4f}, mean IoU of "
        f"matched boxes {scores['mean_iou']:.3f} ({scores['boxes']} boxes, {scores['detections']} detections, "
        f"{args.test_size} scenes, seed {TEST_SEED}; IoU >= {MATCH_IOU} and the right class)"
    )
    empty = scenes.make_scenes(200, seed=EMPTY_SEED + 1, objects=(0, 0))
    false = detections.decode(reloaded.predict(preprocess(empty.images), batch_size=100, verbose=0))
    print(f"false detections on 200 scenes without a shape: {sum(len(f) for f in false)}")
    print(f"file: {args.out} ({args.out.stat().st_size / 1e6:.3f} MB, {reloaded.count_params()} parameters)")
    print(f"training time: {train_time:.0f} s (data generation included; {os.cpu_count()} CPUs visible)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
