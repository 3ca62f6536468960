"""Train the shipped "shapes" model and write ``saliency_kit/data/shapes.keras`` + ``examples/shapes/``.

    .venv/bin/python scripts/train_shapes.py            # about 10 minutes on 2 CPU cores

Deterministic: fixed data seeds, ``keras.utils.set_random_seed`` and TensorFlow op determinism, so
the same machine and library versions give the same weights. Data seeds: 1 training, 2 validation
(monitoring only), 3 the 2,000-image test set reported below, 5 the example images; the package's
test suite uses seed 4. None of these overlap: image ``i`` of seed ``s`` depends only on ``(s, i)``.

Prints the test accuracy, the file size and the training time.
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
from PIL import Image  # noqa: E402

from saliency_kit.data import shapes  # noqa: E402

TRAIN_SEED, VAL_SEED, TEST_SEED, EXAMPLE_SEED = 1, 2, 3, 5
WEIGHT_SEED = 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train-size", type=int, default=24_000)
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--test-size", type=int, default=2_000)
    parser.add_argument("--out", type=Path, default=ROOT / "saliency_kit" / "data" / "shapes.keras")
    parser.add_argument("--examples", type=Path, default=ROOT / "examples" / "shapes")
    args = parser.parse_args(argv)

    keras.utils.set_random_seed(WEIGHT_SEED)
    tf.config.experimental.enable_op_determinism()
    start = time.perf_counter()

    t0 = time.perf_counter()
    x_train, _, y_train = shapes.make_dataset(args.train_size, seed=TRAIN_SEED)
    x_val, _, y_val = shapes.make_dataset(1_000, seed=VAL_SEED)
    print(f"generated {len(x_train)} training images in {time.perf_counter() - t0:.1f} s", flush=True)
    x_train, x_val = shapes.preprocess(x_train), shapes.preprocess(x_val)

    model = shapes.build_model()
    steps = args.epochs * int(np.ceil(len(x_train) / args.batch_size))
    schedule = keras.optimizers.schedules.CosineDecay(2e-3, decay_steps=steps, alpha=0.02)
    model.compile(
        optimizer=keras.optimizers.Adam(schedule), loss="sparse_categorical_crossentropy", metrics=["accuracy"]
    )
    model.fit(
        x_train,
        y_train,
        batch_size=args.batch_size,
        epochs=args.epochs,
        validation_data=(x_val, y_val),
        shuffle=True,
        verbose=2,
    )
    train_time = time.perf_counter() - start

    # Ship the architecture and weights only: no optimizer state, no compile config.
    shipped = shapes.build_model()
    shipped.set_weights(model.get_weights())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    shipped.save(args.out)
    size = args.out.stat().st_size

    reloaded = keras.saving.load_model(args.out, compile=False)
    x_test, _, y_test = shapes.make_dataset(args.test_size, seed=TEST_SEED)
    predictions = reloaded.predict(shapes.preprocess(x_test), batch_size=256, verbose=0)
    accuracy = float(np.mean(predictions.argmax(-1) == y_test))
    per_class = [float(np.mean(predictions.argmax(-1)[y_test == k] == k)) for k in range(len(shapes.CLASS_NAMES))]

    write_examples(args.examples)
    print(f"test accuracy: {accuracy:.4f} on {len(y_test)} fresh images (seed {TEST_SEED})")
    print("per class: " + ", ".join(f"{n} {a:.3f}" for n, a in zip(shapes.CLASS_NAMES, per_class)))
    print(f"file: {args.out} ({size / 1e6:.3f} MB, {reloaded.count_params()} parameters)")
    print(f"training time: {train_time:.0f} s (data generation included; {os.cpu_count()} CPUs visible)")
    return 0


def write_examples(directory: Path) -> None:
    """The first image of each class from seed ``EXAMPLE_SEED`` as ``<class>.png`` and
    ``<class>_mask.png`` (white = shape)."""
    directory.mkdir(parents=True, exist_ok=True)
    images, masks, labels = shapes.make_dataset(50, seed=EXAMPLE_SEED)
    for k, name in enumerate(shapes.CLASS_NAMES):
        i = int(np.flatnonzero(labels == k)[0])
        Image.fromarray(images[i]).save(directory / f"{name}.png")
        Image.fromarray(masks[i].astype(np.uint8) * 255).save(directory / f"{name}_mask.png")
        print(f"wrote {directory / name}.png and {name}_mask.png")


if __name__ == "__main__":
    raise SystemExit(main())
