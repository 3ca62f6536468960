"""LRP and DeepLIFT time against a plain compiled forward+backward pass (ResNet50, weights=None).

    PYTHONPATH=. python scripts/bench_lrp.py [--size 224] [--batch 8] [--repeats 3]

Every timing is a compiled ``tf.function`` computing the input gradient of one target logit per
input, run once to compile and then in ``--repeats`` interleaved rounds:

* plain: the gradient through the model itself (the baseline);
* lrp <composite>: the gradient through ``rewrite_lrp(model, composite, input_relevance=True)``;
* deeplift: the gradient through ``rewrite_deeplift(model)`` on the ``2B`` rows of inputs and
  baselines;

and ``sk.explain`` (engine caches warm) with ``gradient``, ``lrp`` and ``deeplift``. Ratios are the
median over rounds of each variant's time over the plain pass's in the same round.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras
import numpy as np
import tensorflow as tf

import saliency_kit as sk
from saliency_kit.deeplift import rewrite_deeplift
from saliency_kit.lrp import rewrite_lrp


def logits_model(model):
    last = model.layers[-1]
    if isinstance(last, keras.layers.Activation):
        return keras.Model(model.inputs, last.input)
    return model


def gradient_function(model, pairs=False):
    @tf.function(jit_compile=False)
    def run(x, targets):
        with tf.GradientTape(watch_accessed_variables=False) as tape:
            tape.watch(x)
            out = model(x, training=False)
            if pairs:
                out = tf.reshape(out, [-1, 2, out.shape[-1]])[:, 0]
            score = tf.reduce_sum(tf.gather(out, targets, batch_dims=1))
        return tape.gradient(score, x)
    return run


def compare(variants: dict, repeats: int) -> dict:
    """``{name: (median seconds, median ratio to "plain")}``. Each round runs every variant once,
    in turn, so that load from other processes weighs on all of them alike."""
    for fn in variants.values():
        fn()  # compile
    rounds = []
    for _ in range(repeats):
        times = {}
        for name, fn in variants.items():
            start = time.perf_counter()
            np.asarray(fn())
            times[name] = time.perf_counter() - start
        rounds.append(times)
    return {name: (statistics.median(r[name] for r in rounds),
                   statistics.median(r[name] / r["plain"] for r in rounds)) for name in variants}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--composites", default="epsilon,epsilon_plus_flat,epsilon_gamma_box")
    args = parser.parse_args()

    keras.utils.set_random_seed(0)
    model = keras.applications.ResNet50(weights=None, input_shape=(args.size, args.size, 3))
    x = tf.constant(np.random.default_rng(0).uniform(-1, 1, (args.batch, args.size, args.size, 3)).astype("float32"))
    targets = tf.constant(np.arange(args.batch, dtype=np.int32) % 1000)

    variants = {"plain": lambda f=gradient_function(logits_model(model)): f(x, targets)}
    for name in args.composites.split(","):
        rewritten = logits_model(rewrite_lrp(model, name, input_relevance=True, low=-1.0, high=1.0))
        variants[f"lrp {name}"] = lambda f=gradient_function(rewritten): f(x, targets)
    deeplift = logits_model(rewrite_deeplift(model))
    stacked = tf.reshape(tf.stack([x, tf.zeros_like(x)], 1), [-1, *x.shape[1:]])
    variants["deeplift (2B rows)"] = lambda f=gradient_function(deeplift, pairs=True): f(stacked, targets)
    images, targets_np = x.numpy(), targets.numpy()[:, None]
    for method, options in [("gradient", {}), ("lrp", {"composite": "epsilon_plus_flat"}), ("deeplift", {})]:
        variants[f"sk.explain {method}"] = (
            lambda method=method, options=options:
            sk.explain(model, images, method, targets=targets_np, batch_size=args.batch, **options).attributions)

    print(f"ResNet50 weights=None, batch {args.batch}, {args.size}x{args.size}, median of {args.repeats} interleaved rounds")
    for name, (seconds, ratio) in compare(variants, args.repeats).items():
        print(f"{name:32s} {seconds:8.3f} s   {ratio:.2f}x plain")

if __name__ == "__main__":
    main()
