#!/usr/bin/env python
"""Benchmark explaining generated text: T generated tokens cost one forward pass and T backward
passes of the model, not T forward passes.

    python scripts/bench_generation.py                    # 32 generated tokens after a 32-token prompt
    python scripts/bench_generation.py --tokens 64 --repeats 5

The model is a causal language model of token ids ``[1, P + T]`` (an embedding, ``--blocks``
causal self-attention blocks, next-token logits over ``--vocabulary`` tokens). Timed, each after a
warm-up call (compilation excluded), the median of ``--repeats``:

* ``forward``: one compiled forward pass (``tf.function``);
* ``backward``: one compiled forward and backward pass of one token's log-probability, minus the
  forward: the cost of one backward pass;
* ``hand, shared``: a hand-written ``tf.function``, one forward pass of the whole sequence under a
  persistent tape, then one gradient per generated token (1 forward + T backward);
* ``hand, separate``: a hand-written ``tf.function`` running a forward and backward pass for each
  token on its own prefix (T forwards + T backward);
* ``sk.explain``: ``method="gradient"`` with ``sk.targets.generated`` (every column from one
  teacher-forced forward pass).

Reported: the times, ``sk.explain`` against the ``1 forward + T backward`` estimate and against
the shared and separate baselines. The machine is shared: repeat before trusting one figure.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def build(vocabulary: int, dim: int, blocks: int, length: int):
    """``(model on ids [B, length], twin on embeddings [B, length, dim], embedding table)``."""
    import keras

    keras.utils.set_random_seed(0)
    embedding = keras.layers.Embedding(vocabulary, dim)
    layers = [
        (
            keras.layers.MultiHeadAttention(num_heads=4, key_dim=dim // 4),
            keras.layers.LayerNormalization(),
            keras.layers.Dense(2 * dim, activation="gelu"),
            keras.layers.Dense(dim),
            keras.layers.LayerNormalization(),
        )
        for _ in range(blocks)
    ]
    head = keras.layers.Dense(vocabulary)

    def body(x):
        for attention, norm, up, down, norm2 in layers:
            x = norm(x + attention(x, x, use_causal_mask=True))
            x = norm2(x + down(up(x)))
        return head(x)

    ids = keras.Input((length,), dtype="int32")
    model = keras.Model(ids, body(embedding(ids)))
    vectors = keras.Input((length, dim))
    return model, keras.Model(vectors, body(vectors)), embedding


def timed(fn, repeats: int) -> float:
    fn()  # warm-up: compilation
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompt", type=int, default=32, help="prompt tokens (default: 32)")
    parser.add_argument("--tokens", type=int, default=32, help="generated tokens T (default: 32)")
    parser.add_argument("--vocabulary", type=int, default=2000)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--blocks", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    import numpy as np
    import tensorflow as tf

    import saliency_kit as sk

    P, T = args.prompt, args.tokens
    length = P + T
    model, twin, embedding = build(args.vocabulary, args.dim, args.blocks, length)
    ids = np.random.default_rng(0).integers(1, args.vocabulary, size=(1, length)).astype("int32")
    vectors = tf.constant(embedding(ids))
    tokens = tf.constant(ids[0, P:])

    @tf.function
    def forward():
        return twin(vectors)

    @tf.function
    def one_backward():
        with tf.GradientTape() as tape:
            tape.watch(vectors)
            score = tf.nn.log_softmax(twin(vectors)[0, P - 1])[tokens[0]]
        return tape.gradient(score, vectors)

    @tf.function
    def shared():
        with tf.GradientTape(persistent=True) as tape:
            tape.watch(vectors)
            log_p = tf.nn.log_softmax(twin(vectors)[0])
            scores = [log_p[P + t - 1, tokens[t]] for t in range(T)]
        return tf.stack([tape.gradient(s, vectors) for s in scores])

    @tf.function
    def separate():
        out = []
        for t in range(T):
            with tf.GradientTape() as tape:
                tape.watch(vectors)
                score = tf.nn.log_softmax(twin(vectors)[0, P + t - 1])[tokens[t]]
            out.append(tape.gradient(score, vectors))
        return tf.stack(out)

    target = sk.targets.generated(ids, start=P)

    def library():
        return sk.explain(model, ids, method="gradient", targets=target, batch_size=T)

    reference = shared().numpy()[:, 0]
    got = library().attributions[0]
    hidden = np.arange(length)[None, :, None] >= (P + np.arange(T))[:, None, None]
    np.testing.assert_allclose(got, np.where(hidden, 0.0, reference), rtol=1e-3, atol=1e-6)

    f = timed(forward, args.repeats)
    b = max(timed(one_backward, args.repeats) - f, 0.0)
    rows = {
        "forward": f,
        "backward (one token)": b,
        "estimate: 1 forward + T backward": f + T * b,
        "hand, shared (1 forward + T backward)": timed(shared, args.repeats),
        "hand, separate (T forwards + T backward)": timed(separate, args.repeats),
        "sk.explain, generated target": timed(library, args.repeats),
    }
    print(f"causal LM: {args.blocks} blocks, dim {args.dim}, vocabulary {args.vocabulary}; prompt {P}, T = {T}")
    for name, seconds in rows.items():
        print(f"  {name:<42} {seconds * 1000:9.1f} ms")
    ours = rows["sk.explain, generated target"]
    for name, baseline in (
        ("(1 forward + T backward)", "estimate: 1 forward + T backward"),
        ("hand shared", "hand, shared (1 forward + T backward)"),
        ("hand separate", "hand, separate (T forwards + T backward)"),
    ):
        print(f"  {'sk.explain / ' + name:<42} {ours / rows[baseline]:9.2f}")


if __name__ == "__main__":
    main()
