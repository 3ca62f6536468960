"""Grad-CAM on a Conv1D time-series net and a Conv3D volume net: ``sk.explain`` against a plain
compiled TensorFlow Grad-CAM written here (one tape, the channel means, the weighted sum, and the
same per-axis linear resize), as a ratio of times.

    PYTHONPATH=. python scripts/bench_cam_ranks.py [--repeats 5]

The classes are given (the top class, ranked beforehand), so neither side ranks them. Both are timed
after a first (compiling) call; the best of ``--repeats`` runs is kept.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import saliency_kit as sk  # noqa: E402


def series_net():
    return keras.Sequential(
        [
            keras.Input((512, 8)),
            keras.layers.Conv1D(32, 7, padding="same", activation="relu"),
            keras.layers.MaxPooling1D(4),
            keras.layers.Conv1D(64, 5, padding="same", activation="relu", name="cam"),
            keras.layers.GlobalAveragePooling1D(),
            keras.layers.Dense(10),
        ]
    )


def volume_net():
    return keras.Sequential(
        [
            keras.Input((24, 48, 48, 1)),
            keras.layers.Conv3D(8, 3, padding="same", activation="relu"),
            keras.layers.MaxPooling3D(2),
            keras.layers.Conv3D(16, 3, padding="same", activation="relu", name="cam"),
            keras.layers.GlobalAveragePooling3D(),
            keras.layers.Dense(10),
        ]
    )


def baseline(model):
    """A compiled Grad-CAM of given classes written with TensorFlow directly."""
    twin = keras.Model(model.inputs[0], [model.get_layer("cam").output, model.outputs[0]])
    size = tuple(model.inputs[0].shape[1:-1])

    @tf.function
    def gradcam(x, targets):
        with tf.GradientTape() as tape:
            a, logits = twin(x)
            s = tf.gather(logits, targets, batch_dims=1)
        g = tape.gradient(s, a)
        weights = tf.reduce_mean(g, axis=list(range(1, len(g.shape) - 1)))
        cam = tf.nn.relu(tf.einsum("bc,b...c->b...", weights, a))
        if len(size) == 1:
            return tf.image.resize(cam[:, :, None, None], (size[0], 1))[:, :, 0, 0]
        n, d = tf.shape(cam)[0], cam.shape[1]
        planes = tf.image.resize(tf.reshape(cam, [-1, *cam.shape[2:], 1]), size[1:])
        columns = tf.reshape(planes, [n, d, size[1] * size[2], 1])
        return tf.reshape(tf.image.resize(columns, (size[0], size[1] * size[2])), [n, *size])

    return gradcam


def best_of(fn, repeats):
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    keras.utils.set_random_seed(0)
    for name, build, batch in (("Conv1D [32, 512, 8]", series_net, 32), ("Conv3D [8, 24, 48, 48, 1]", volume_net, 8)):
        model = build()
        x = np.random.default_rng(0).normal(size=(batch, *model.inputs[0].shape[1:])).astype("float32")
        plain = baseline(model)
        targets = np.argmax(model.predict(x, verbose=0), axis=-1)  # given, so neither side ranks classes
        ours = best_of(lambda: sk.explain(model, x, "gradcam", targets, layer="cam", batch_size=batch), args.repeats)
        theirs = best_of(lambda: plain(tf.constant(x), tf.constant(targets)).numpy(), args.repeats)
        expected = plain(tf.constant(x), tf.constant(targets)).numpy()
        got = sk.explain(model, x, "gradcam", targets, layer="cam", batch_size=batch).maps[:, 0]
        gap = float(np.abs(got - expected).max() / (np.abs(expected).max() + 1e-12))
        print(
            f"{name}: sk.explain {ours * 1e3:.1f} ms, plain TF {theirs * 1e3:.1f} ms, ratio {ours / theirs:.2f} "
            f"(max relative difference of the maps {gap:.1e})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
