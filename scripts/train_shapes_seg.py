"""Train the shipped "shapes_seg" segmentation model and write ``saliency_kit/data/shapes_seg.keras``.

    .venv/bin/python scripts/train_shapes_seg.py        # a few minutes on 2 CPU cores

Data: scenes of 1-3 shapes (``saliency_kit.data.scenes``). Seeds: 11 training, 12 validation
(monitoring only), 13 the held-out test set reported below; the package's tests use seed 14.
Deterministic (fixed seeds, TensorFlow op determinism) on one machine and library versions.

Prints the held-out pixel accuracy, the mean IoU over the six classes, each class's IoU, the file
size and the training time.
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
from saliency_kit.data.shapes import preprocess  # noqa: E402

TRAIN_SEED, VAL_SEED, TEST_SEED = 11, 12, 13
WEIGHT_SEED = 0


def segmentation_scores(predicted: np.ndarray, truth: np.ndarray) -> tuple[float, np.ndarray]:
    """``(pixel accuracy, IoU of each class [6])`` of label maps ``predicted`` against ``truth``."""
    accuracy = float(np.mean(predicted == truth))
    ious = []
    for k in range(len(scenes.SEGMENTATION_CLASSES)):
        p, t = predicted == k, truth == k
        ious.append(np.sum(p & t) / max(np.sum(p | t), 1))
    return accuracy, np.asarray(ious)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train-size", type=int, default=12_000)
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--test-size", type=int, default=1_000)
    parser.add_argument("--out", type=Path, default=ROOT / "saliency_kit" / "data" / "shapes_seg.keras")
    args = parser.parse_args(argv)

    keras.utils.set_random_seed(WEIGHT_SEED)
    tf.config.experimental.enable_op_determinism()
    start = time.perf_counter()
    train = scenes.make_scenes(args.train_size, seed=TRAIN_SEED)
    val = scenes.make_scenes(500, seed=VAL_SEED)
    print(f"generated {len(train.images)} training scenes in {time.perf_counter() - start:.1f} s", flush=True)

    model = scene_models.build_segmenter()
    steps = args.epochs * int(np.ceil(args.train_size / args.batch_size))
    schedule = keras.optimizers.schedules.CosineDecay(3e-3, decay_steps=steps, alpha=0.02)
    model.compile(
        optimizer=keras.optimizers.Adam(schedule),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    model.fit(
        preprocess(train.images),
        train.label_maps,
        batch_size=args.batch_size,
        epochs=args.epochs,
        validation_data=(preprocess(val.images), val.label_maps),
        shuffle=True,
        verbose=2,
    )
    train_time = time.perf_counter() - start

    shipped = scene_models.build_segmenter()  # architecture and weights only, no optimizer state
    shipped.set_weights(model.get_weights())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    shipped.save(args.out)

    reloaded = keras.saving.load_model(args.out, compile=False)
    test = scenes.make_scenes(args.test_size, seed=TEST_SEED)
    predicted = reloaded.predict(preprocess(test.images), batch_size=100, verbose=0).argmax(-1)
    accuracy, ious = segmentation_scores(predicted, test.label_maps)
    print(
        f"held-out pixel accuracy: {accuracy:.4f}, mean IoU {ious.mean():.4f} on {args.test_size} "
        f"scenes (seed {TEST_SEED})"
    )
    print("IoU per class: " + ", ".join(f"{n} {v:.3f}" for n, v in zip(scenes.SEGMENTATION_CLASSES, ious)))
    print(f"file: {args.out} ({args.out.stat().st_size / 1e6:.3f} MB, {reloaded.count_params()} parameters)")
    print(f"training time: {train_time:.0f} s (data generation included; {os.cpu_count()} CPUs visible)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
