"""Benchmark explanations of several inputs and of token ids against plain compiled TensorFlow.

    python scripts/bench_inputs.py [--batch B] [--steps S] [--repeats R] [--image N] [--length T] [--quick]

1. Two inputs: a model of an image ``[32, 32, 3]`` (a small convolution stack) and metadata
   ``[16]`` (a Dense layer), concatenated, then ``Dense(10)``. ``sk.explain`` with the gradient
   and with integrated gradients (``S`` steps, baseline 0, trapezoid rule) explains both inputs
   at once; each is divided by a plain compiled ``tf.function`` (a ``GradientTape``) computing the
   same gradients of both inputs, batched as the library batches them (integrated gradients: all
   ``B × S`` path points in one call): target ratio ≤ 1.05. A second row divides the two-input
   time by ``sk.explain`` on the image-only twin (the same convolution layers; the metadata
   branch's contribution folded into the last layer's bias as a constant): a two-input model
   should cost what its single-input version costs, ratio ≤ 1.05. ``--image N`` sets the image
   side (default 32: a small workload, where the library's fixed cost per call shows most).
2. Token ids: a classifier ``Embedding(1000, 64)`` on int ids ``[B, T]`` (``--length T``, default
   64) → Dense → mean pool → ``Dense(5)``. Integrated gradients of the ids (explained at the
   embedding's output, baseline the embedding of token 0) against integrated gradients of its
   twin, a model taking the embeddings ``[B, T, 64]`` through the same layers, with that
   baseline: target ratio ≤ 1.05; both also divided by a plain compiled integrated gradients of
   the twin.

Every pair of runs compared is checked to give the same attributions on the warm-up calls'
results (``np.allclose``, ``atol=1e-4``, on the attributions and on them divided by the largest
one, since a small model's attributions can lie below 1e-4), so no ratio is of two different
computations; "rel. diff" is the largest difference over the largest attribution.

Times are the median of ``--repeats`` rounds after one warm-up call of each (tracing and
compilation excluded); each round times every measurement of a table's group once, in turn, so
a change of load affects all alike, starting one measurement later each round (no row always
follows the same neighbour), and the gradient rows are timed apart from the integrated-gradients
rows (a call just after one 30× larger runs slower). On a shared machine they are still noisy;
say so when quoting them. Nothing is downloaded. Prints markdown tables.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

TARGET = 1.05
ATOL = 1e-4
IMAGE, META, CLASSES = (32, 32, 3), 16, 10
VOCAB, LENGTH, WIDTH, LABELS = 1000, 64, 64, 5


def _median_times(runs: dict, repeats: int) -> tuple[dict, dict]:
    """``(median seconds of each function over repeats round-robin rounds, its warm-up result)``.

    Each round starts one measurement later than the last (a rotation), so no measurement always
    runs right after the same neighbour: the call after a large one pays for the caches and
    memory it disturbed, and a fixed order would charge that to one row every time."""
    results = {name: fn() for name, fn in runs.items()}  # tracing and compilation are not measured
    names = list(runs)
    times: dict = {name: [] for name in runs}
    for round_ in range(repeats):
        for i in range(len(names)):
            name = names[(round_ + i) % len(names)]
            start = time.perf_counter()
            runs[name]()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}, results


def _same(a: list, b: list) -> str:
    """Whether every array of ``a`` matches its counterpart in ``b``: ``np.allclose`` with
    ``atol=1e-4``, both as they are and divided by the largest ``|b|`` (attributions of a small
    model can be far below 1e-4, where the first test alone says nothing). With the largest
    difference relative to the largest attribution."""
    import numpy as np

    if len(a) != len(b) or any(np.shape(x) != np.shape(y) for x, y in zip(a, b)):
        return "NO (shapes differ)"
    same, worst = True, 0.0
    for x, y in zip(a, b):
        x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
        scale = float(np.abs(y).max())
        if scale == 0.0:
            return "NO (all zero)"
        same &= bool(np.allclose(x, y, atol=ATOL) and np.allclose(x / scale, y / scale, atol=ATOL))
        worst = max(worst, float(np.abs(x - y).max()) / scale)
    return f"{'yes' if same else 'NO'} (rel. diff {worst:.1e})"


def _print_table(title: str, rows: list) -> None:
    """``rows``: ``(measurement, seconds, ratio, target or None, the attribution check's text or None)``."""
    print(f"\n{title}\n")
    print("| measurement | seconds | ratio | target | result | same attributions |")
    print("|---|---:|---:|---|---|---|")
    for name, seconds, ratio, target, same in rows:
        ratio_text = "" if ratio is None else f"{ratio:.3f}"
        target_text = "–" if target is None else f"≤ {target:.2f}"
        if target is None:
            result = "–" if same is None else "info"
        else:
            result = "PASS" if ratio <= target else "MISS"
        print(f"| {name} | {seconds:.4f} | {ratio_text} | {target_text} | {result} | {same or '–'} |")


def trapezoid(steps: int):
    """The points on [0, 1] and weights of integrated gradients' default rule (``riemann_trapezoid``)."""
    import numpy as np

    alphas = np.linspace(0.0, 1.0, steps)
    weights = np.full(steps, 1.0 / (steps - 1))
    weights[[0, -1]] /= 2.0
    return alphas.astype("float32"), weights.astype("float32")


def plain_gradient(model, specs: list, batch: int):
    """A compiled ``(inputs, classes [B, 1]) -> gradients of each input`` of the chosen logit."""
    import tensorflow as tf

    @tf.function(input_signature=[[tf.TensorSpec(s, tf.float32) for s in specs], tf.TensorSpec([batch, 1], tf.int32)])
    def gradient(inputs, classes):
        with tf.GradientTape() as tape:
            tape.watch(inputs)
            score = tf.reduce_sum(tf.gather(model(inputs, training=False), classes, batch_dims=1))
        return tape.gradient(score, inputs)

    return gradient


def plain_integrated_gradients(model, specs: list, batch: int, steps: int):
    """A compiled ``(inputs, baselines, classes [B, 1]) -> integrated gradients of each input``:
    the ``B × steps`` path points of every input in one batch, one forward and one backward pass."""
    import tensorflow as tf

    alphas, weights = trapezoid(steps)

    @tf.function(
        input_signature=[
            [tf.TensorSpec(s, tf.float32) for s in specs],
            [tf.TensorSpec(s[1:], tf.float32) for s in specs],
            tf.TensorSpec([batch, 1], tf.int32),
        ]
    )
    def integrated(inputs, baselines, classes):
        points = []
        for x, base in zip(inputs, baselines):
            a = tf.reshape(alphas, [1, steps] + [1] * (len(x.shape) - 1))
            path = base + a * (x - base)[:, None]  # [B, steps, ...]
            points.append(tf.reshape(path, [batch * steps, *x.shape[1:]]))
        rows = tf.repeat(classes, steps, axis=0)
        with tf.GradientTape() as tape:
            tape.watch(points)
            logits = model(points if len(points) > 1 else points[0], training=False)
            score = tf.reduce_sum(tf.gather(logits, rows, batch_dims=1))
        grads = tape.gradient(score, points)
        out = []
        for x, base, g in zip(inputs, baselines, grads):
            g = tf.reshape(g, [batch, steps, *x.shape[1:]])
            w = tf.reshape(weights, [1, steps] + [1] * (len(x.shape) - 1))
            out.append((x - base) * tf.reduce_sum(w * g, axis=1))
        return out

    return integrated


# two inputs ------------------------------------------------------------------------------------
def two_input_models(image_shape: tuple = IMAGE):
    """``(two-input model, image-only twin builder)``: the twin shares the convolution layers and
    folds a metadata row's contribution into its last layer's bias."""
    import keras
    import numpy as np

    keras.utils.set_random_seed(0)
    image = keras.Input(image_shape, name="image")
    meta = keras.Input((META,), name="metadata")
    convs = [
        keras.layers.Conv2D(16, 3, padding="same", activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
        keras.layers.GlobalAveragePooling2D(),
    ]
    h = image
    for layer in convs:
        h = layer(h)
    meta_dense = keras.layers.Dense(16, activation="relu")
    head = keras.layers.Dense(CLASSES)
    model = keras.Model([image, meta], head(keras.layers.Concatenate()([h, meta_dense(meta)])), name="two_inputs")
    features = int(h.shape[-1])

    def image_only(meta_row: np.ndarray):
        kernel, bias = (np.asarray(w) for w in head.get_weights())
        constant = np.asarray(meta_dense(meta_row[None]))[0] @ kernel[features:]
        folded = keras.layers.Dense(CLASSES)
        single_input = keras.Input(image_shape, name="image")
        z = single_input
        for layer in convs:
            z = layer(z)
        single = keras.Model(single_input, folded(z), name="image_only")
        folded.set_weights([kernel[:features], bias + constant])
        return single

    return model, image_only


def bench_two_inputs(batch: int, steps: int, repeats: int, image_shape: tuple = IMAGE) -> None:
    import numpy as np
    import tensorflow as tf

    import saliency_kit as sk

    model, image_only = two_input_models(image_shape)
    rng = np.random.default_rng(0)
    image = rng.uniform(size=(batch, *image_shape)).astype("float32")
    meta = rng.normal(size=(batch, META)).astype("float32")
    single = image_only(meta[0])
    targets = (np.arange(batch) % CLASSES)[:, None]
    classes = tf.constant(targets, tf.int32)
    specs = [[batch, *image_shape], [batch, META]]
    gradient = plain_gradient(model, specs, batch)
    integrated = plain_integrated_gradients(model, specs, batch, steps)
    inputs = [tf.constant(image), tf.constant(meta)]
    zeros = [tf.zeros(image_shape), tf.zeros([META])]
    rows = batch * steps  # every path point of the batch in one compiled call, as the plain function

    def explain(net, x, method, size, **options):
        def run():
            out = sk.explain(net, x, method, targets, batch_size=size, **options).attributions
            out = out if isinstance(out, list) else [out]
            return [a[:, 0] for a in out if a is not None]  # None: an input attribute_to left out

        return run

    ig = {"rule": "riemann_trapezoid", "steps": steps}
    gradients = {
        "plain gradient": lambda: [g.numpy() for g in gradient(inputs, classes)],
        "sk gradient, two inputs": explain(model, [image, meta], "gradient", batch),
        "sk gradient, image only": explain(single, image, "gradient", batch),
        "sk gradient, two inputs, image explained": explain(
            model, [image, meta], "gradient", batch, attribute_to="image"
        ),
    }
    integrated_runs = {
        "plain ig": lambda: [a.numpy() for a in integrated(inputs, zeros, classes)],
        "sk ig, two inputs": explain(model, [image, meta], "integrated_gradients", rows, **ig),
        "sk ig, image only": explain(single, image, "integrated_gradients", rows, **ig),
    }
    t, r = _median_times(gradients, repeats)  # rows compared are timed in the same rounds, apart from
    t_ig, r_ig = _median_times(integrated_runs, repeats)  # the 30× larger integrated-gradients calls
    t.update(t_ig)
    r.update(r_ig)
    same_gradient = _same(r["sk gradient, two inputs"], r["plain gradient"])
    same_ig = _same(r["sk ig, two inputs"], r["plain ig"])
    table = [
        ("plain compiled TF gradient, both inputs", t["plain gradient"], 1.0, None, None),
        (
            "sk gradient, both inputs / plain TF",
            t["sk gradient, two inputs"],
            t["sk gradient, two inputs"] / t["plain gradient"],
            TARGET,
            same_gradient,
        ),
        (
            "sk gradient, image-only twin (ratio: two inputs / twin)",
            t["sk gradient, image only"],
            t["sk gradient, two inputs"] / t["sk gradient, image only"],
            TARGET,
            _same(r["sk gradient, two inputs"][:1], r["sk gradient, image only"]),
        ),
        (
            "sk gradient of the image alone (attribute_to='image', metadata held) / image-only twin",
            t["sk gradient, two inputs, image explained"],
            t["sk gradient, two inputs, image explained"] / t["sk gradient, image only"],
            TARGET,
            _same(r["sk gradient, two inputs, image explained"], r["sk gradient, image only"]),
        ),
        (f"plain compiled TF IG, both inputs, {steps} steps in one batch", t["plain ig"], 1.0, None, None),
        (
            f"sk IG ({steps} steps), both inputs / plain TF",
            t["sk ig, two inputs"],
            t["sk ig, two inputs"] / t["plain ig"],
            TARGET,
            same_ig,
        ),
        (
            f"sk IG ({steps} steps), image-only twin (ratio: two inputs / twin)",
            t["sk ig, image only"],
            t["sk ig, two inputs"] / t["sk ig, image only"],
            TARGET,
            _same(r["sk ig, two inputs"][:1], r["sk ig, image only"]),
        ),
    ]
    _print_table(
        f"1. Two inputs: image {'×'.join(map(str, image_shape))} + metadata [{META}] → Dense({CLASSES}), "
        f"batch {batch}; twin rows: the image's attributions compared",
        table,
    )


# token ids -------------------------------------------------------------------------------------
def token_models(length: int = LENGTH):
    """``(classifier of token ids [length], its twin on the embeddings, the embedding layer)``."""
    import keras

    keras.utils.set_random_seed(1)
    ids = keras.Input((length,), dtype="int32", name="tokens")
    embedding = keras.layers.Embedding(VOCAB, WIDTH)
    dense = keras.layers.Dense(64, activation="relu")
    pool = keras.layers.GlobalAveragePooling1D()
    head = keras.layers.Dense(LABELS)
    model = keras.Model(ids, head(pool(dense(embedding(ids)))), name="token_classifier")
    embedded = keras.Input((length, WIDTH), name="embedded")
    twin = keras.Model(embedded, head(pool(dense(embedded))), name="embedding_twin")
    return model, twin, embedding


def bench_tokens(batch: int, steps: int, repeats: int, length: int = LENGTH) -> None:
    import numpy as np
    import tensorflow as tf

    import saliency_kit as sk

    model, twin, embedding = token_models(length)
    ids = np.random.default_rng(2).integers(1, VOCAB, size=(batch, length)).astype("int32")
    embeddings = np.asarray(embedding(ids))
    pad = np.asarray(embedding.embeddings)[0]  # the embedding of token 0, the default baseline token
    targets = (np.arange(batch) % LABELS)[:, None]
    classes = tf.constant(targets, tf.int32)
    integrated = plain_integrated_gradients(twin, [[batch, length, WIDTH]], batch, steps)
    inputs, baselines = [tf.constant(embeddings)], [tf.broadcast_to(tf.constant(pad), [length, WIDTH])]
    rows = batch * steps
    ig = {"rule": "riemann_trapezoid", "steps": steps}

    runs = {
        "plain ig, twin": lambda: [integrated(inputs, baselines, classes)[0].numpy()],
        "sk ig, twin": lambda: [
            sk.explain(
                twin, embeddings, "integrated_gradients", targets, batch_size=rows, baseline=pad, **ig
            ).attributions[:, 0]
        ],
        "sk ig, token ids": lambda: [
            sk.explain(model, ids, "integrated_gradients", targets, batch_size=rows, **ig).attributions[:, 0]
        ],
    }
    t, r = _median_times(runs, repeats)
    table = [
        (f"plain compiled TF IG on the twin, {steps} steps in one batch", t["plain ig, twin"], 1.0, None, None),
        (
            "sk IG on the twin / plain TF",
            t["sk ig, twin"],
            t["sk ig, twin"] / t["plain ig, twin"],
            TARGET,
            _same(r["sk ig, twin"], r["plain ig, twin"]),
        ),
        (
            "sk IG of token ids (embedding space) / sk IG on the twin",
            t["sk ig, token ids"],
            t["sk ig, token ids"] / t["sk ig, twin"],
            TARGET,
            _same(r["sk ig, token ids"], r["sk ig, twin"]),
        ),
        (
            "sk IG of token ids (embedding space) / plain TF",
            t["sk ig, token ids"],
            t["sk ig, token ids"] / t["plain ig, twin"],
            TARGET,
            _same(r["sk ig, token ids"], r["plain ig, twin"]),
        ),
    ]
    _print_table(
        f"2. Token ids: Embedding({VOCAB}, {WIDTH}) on ids [{batch}, {length}] → Dense → mean pool → "
        f"Dense({LABELS}), IG {steps} steps, baseline: the embedding of token 0",
        table,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=16, help="inputs per explanation (default 16)")
    parser.add_argument("--steps", type=int, default=None, help="integrated-gradients steps (default 32; quick 8)")
    parser.add_argument("--repeats", type=int, default=None, help="timed rounds, median reported (default 15; quick 3)")
    parser.add_argument("--quick", action="store_true", help="fewer steps and rounds, for a fast smoke run")
    parser.add_argument("--image", type=int, default=32, help="side of the two-input model's image (default 32)")
    parser.add_argument("--length", type=int, default=LENGTH, help=f"token sequence length (default {LENGTH})")
    args = parser.parse_args()
    steps = args.steps if args.steps is not None else (8 if args.quick else 32)
    repeats = args.repeats if args.repeats is not None else (3 if args.quick else 15)
    if steps < 2:
        parser.error("--steps must be at least 2 (the trapezoid rule's two ends)")

    import tensorflow as tf

    print(
        f"batch {args.batch}, IG {steps} steps (trapezoid rule); median of {repeats} rounds after a warm-up; "
        f"TensorFlow {tf.__version__}, {os.cpu_count()} CPU cores (shared: timings are noisy)"
    )
    bench_two_inputs(args.batch, steps, repeats, (args.image, args.image, 3))
    bench_tokens(args.batch, steps, repeats, args.length)


if __name__ == "__main__":
    main()
