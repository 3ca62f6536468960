"""Train the shapes CNN from scratch for a few epochs with SaliencyCallback watching four images.

    python scripts/callback_demo.py [--out saliency_training] [--epochs 6]
    tensorboard --logdir saliency_training/logs     # IMAGES tab: one grid per epoch

Writes ``OUT/logs`` (TensorBoard event files) and ``OUT/png/guided_backprop-epoch-NNNN.png``.
The guided-backprop maps sharpen onto the shapes as the network learns them.
"""

import argparse

import keras

import saliency_kit as sk
from saliency_kit.data import shapes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="saliency_training")
    parser.add_argument("--epochs", type=int, default=6)
    args = parser.parse_args()

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


if __name__ == "__main__":
    main()
