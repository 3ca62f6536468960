"""Train the shapes CNN from scratch for a few epochs with SaliencyCallback watching four images.

    python scripts/callback_demo.py [--out saliency_training] [--epochs 6]
    tensorboard --logdir saliency_training/logs     # IMAGES tab: one grid per epoch

Writes ``OUT/logs`` (TensorBoard event files) and ``OUT/png/guided_backprop-epoch-NNNN.png``.
The guided-backprop maps sharpen onto the shapes as the network learns them. ``--pictures DIR``
(with ``--epochs 8``) copies epochs 1 and 8 to ``DIR/callback_epoch1.png`` and
``DIR/callback_epoch8.png``, the docs' pictures (``scripts/pictures.py`` declares them so).
"""

import argparse
import shutil
import tempfile
from pathlib import Path

import keras

import saliency_kit as sk
from saliency_kit.data import shapes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="default: saliency_training; with --pictures, a temporary folder")
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--pictures", type=Path, help="copy epochs 1 and 8 here as callback_epochN.png")
    args = parser.parse_args()
    if args.pictures is not None and args.epochs < 8:
        parser.error(f"--pictures copies epoch 8: give --epochs 8 or more; received --epochs {args.epochs}")
    with tempfile.TemporaryDirectory() as scratch:
        if args.out is None:
            args.out = scratch if args.pictures is not None else "saliency_training"
        train(args)


def train(args: argparse.Namespace) -> None:
    keras.utils.set_random_seed(0)
    images, _, labels = shapes.make_dataset(3000, seed=11)
    watched, _, _ = shapes.make_dataset(4, seed=99)
    model = shapes.build_model()
    model.compile(
        optimizer="adam", metrics=["accuracy"], loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )
    watch = sk.callbacks.SaliencyCallback(
        shapes.preprocess(watched),
        "guided_backprop",
        "top1",
        originals=watched,
        class_names=shapes.CLASS_NAMES,
        log_dir=f"{args.out}/logs",
        out=f"{args.out}/png",
    )
    model.fit(shapes.preprocess(images), labels, epochs=args.epochs, batch_size=64, callbacks=[watch])
    if args.pictures is not None:
        args.pictures.mkdir(parents=True, exist_ok=True)
        for epoch in (1, 8):
            shutil.copyfile(
                Path(args.out) / "png" / f"guided_backprop-epoch-{epoch:04d}.png",
                args.pictures / f"callback_epoch{epoch}.png",
            )


if __name__ == "__main__":
    main()
