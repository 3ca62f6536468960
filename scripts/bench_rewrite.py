"""Benchmark sk.rewrite on ResNet50 (weights=None): rewrite vs clone_model, and gradient cost.

    python scripts/bench_rewrite.py [--batch 8] [--size 224] [--repeats 10]

Prints the time to rewrite the model against ``keras.models.clone_model`` (rewrite also copies the
weights and checks the copy against the original on a generated input, which clone_model does not;
the check's share is printed on its own row), and the time of one compiled input-gradient call through the
guided and deconv models over the same call through the original (target: <= 1.10x).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import saliency_kit as sk  # noqa: E402


def timed(fn, repeats):
    """Median wall time of ``fn()`` over ``repeats`` runs, after one warm-up run."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def gradient_function(model):
    @tf.function(reduce_retracing=True)
    def gradient(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            score = tf.reduce_sum(model(x, training=False)[:, 0])
        return tape.gradient(score, x)

    return gradient


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()

    model = keras.applications.ResNet50(weights=None, input_shape=(args.size, args.size, 3))
    x = tf.constant(np.random.default_rng(0).uniform(-1, 1, (args.batch, args.size, args.size, 3)), tf.float32)

    clone_s = timed(lambda: keras.models.clone_model(model), 3)
    rewrite_s = timed(lambda: sk.rewrite(model, "guided"), 3)
    guided = sk.rewrite(model, "guided")
    deconv = sk.rewrite(model, "deconv")
    check_s = None
    try:
        from saliency_kit.model.copy import check_copy
    except ImportError:  # a version of saliency_kit without checked copies
        pass
    else:
        check_s = timed(lambda: check_copy(model, guided), 3)

    plain_fn, guided_fn, deconv_fn = (gradient_function(m) for m in (model, guided, deconv))
    # interleave the measurements so that load from elsewhere hits all of them alike
    rounds = {"plain": [], "guided": [], "deconv": []}
    for fn in (plain_fn, guided_fn, deconv_fn):
        fn(x).numpy()
    for _ in range(args.repeats):
        for name, fn in (("plain", plain_fn), ("guided", guided_fn), ("deconv", deconv_fn)):
            start = time.perf_counter()
            fn(x).numpy()
            rounds[name].append(time.perf_counter() - start)
    plain_s = statistics.median(rounds["plain"])

    print(
        f"ResNet50 (weights=None), batch {args.batch}, {args.size}x{args.size}, "
        f"{len(guided.rewritten_layers)} ReLUs rewritten, median of {args.repeats} runs"
    )
    print("| measurement | seconds | ratio |")
    print("|---|---:|---:|")
    print(f"| keras.models.clone_model | {clone_s:.3f} | 1.00 |")
    print(f"| sk.rewrite (clone + copy state + check) | {rewrite_s:.3f} | {rewrite_s / clone_s:.2f} |")
    if check_s is not None:
        print(f"| of which: checking the copy on a generated input | {check_s:.3f} | {check_s / clone_s:.2f} |")
    print(f"| input gradient, original | {plain_s:.3f} | 1.00 |")
    for name in ("guided", "deconv"):
        seconds = statistics.median(rounds[name])
        print(f"| input gradient, {name} | {seconds:.3f} | {seconds / plain_s:.2f} |")


if __name__ == "__main__":
    main()
