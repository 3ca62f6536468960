#!/usr/bin/env python
"""Benchmark Grad-CAM on a vision transformer against Grad-CAM on a CNN of about the same FLOPs.

    python scripts/bench_vit.py                               # the backend KERAS_BACKEND names
    KERAS_BACKEND=jax python scripts/bench_vit.py --repeats 7

The vision transformer is KerasHub's ``ViTImageClassifier`` (random weights, nothing downloaded;
``--blocks`` blocks of width ``--width``, patches of 8 on ``--size``² images), explained with no
option (the CAM layer is the last block's first layer norm, inside KerasHub's custom block). The
CNN is three 3×3 convolutions with 2×2 max pooling between them, global average pooling and a
dense head, its widths chosen so that its forward pass costs about as many FLOPs as the ViT's;
Grad-CAM explains its last convolution. FLOPs are counted from the layers' shapes: 2 per
multiply-add of every convolution, dense layer and attention product (normalisation, activations
and softmax left out), one image's forward pass.

Each model's ``sk.explain(model, x, method="gradcam", targets=classes)`` is timed against a
hand-written compiled Grad-CAM of the same backend computing the same maps: the model split by
hand at the CAM layer into what runs before it and a head after it, the head's gradient with
respect to the layer's activations (a tape in a ``tf.function``; ``jax.grad`` inside ``jax.jit``,
the variables passed as arguments through ``keras.StatelessScope``), weights averaged over the
grid (the ViT's patch tokens, class token dropped), ``relu(Σ_c w_c A_c)``, bilinear resizing to the
image. The maps are checked equal first. Timed after a quiet warm-up (compilation excluded), in
round-robin rounds so that a change of load affects all alike, the median of ``--repeats``.
Printed: a markdown table with each model's FLOPs, both times and the ratio library / hand. The
machine is shared: repeat before trusting one figure.
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

PATCH, CLASSES = 8, 10


def build_vit(size: int, width: int, blocks: int):
    """KerasHub's ``ViTImageClassifier`` with random weights, and its forward FLOPs per image."""
    import keras_hub

    backbone = keras_hub.models.ViTBackbone(
        image_shape=(size, size, 3), patch_size=PATCH, num_layers=blocks, num_heads=4, hidden_dim=width,
        mlp_dim=2 * width, dropout_rate=0.0, attention_dropout=0.0,
    )  # fmt: skip
    model = keras_hub.models.ViTImageClassifier(backbone=backbone, num_classes=CLASSES, preprocessor=None)
    patches = (size // PATCH) ** 2
    tokens = patches + 1
    embedding = 2 * patches * PATCH * PATCH * 3 * width
    block = 2 * tokens * width * width * 4 + 2 * 2 * tokens * tokens * width + 2 * 2 * tokens * width * 2 * width
    return model, embedding + blocks * block + 2 * width * CLASSES


def build_cnn(size: int, widths: tuple[int, int, int]):
    """Three 3×3 convolutions (ReLU, 2×2 max pooling between them), global average pooling and a
    dense head; its forward FLOPs per image."""
    import keras

    inputs = keras.Input((size, size, 3))
    x, flops, channels, side = inputs, 0, 3, size
    for index, width in enumerate(widths):
        if index:
            x = keras.layers.MaxPooling2D(2)(x)
            side //= 2
        x = keras.layers.Conv2D(width, 3, padding="same", activation="relu", name=f"conv{index + 1}")(x)
        flops += 2 * side * side * 9 * channels * width
        channels = width
    outputs = keras.layers.Dense(CLASSES, name="logits")(keras.layers.GlobalAveragePooling2D()(x))
    return keras.Model(inputs, outputs), flops + 2 * channels * CLASSES


def cnn_widths(size: int, target: int) -> tuple[int, int, int]:
    """Widths ``(w, 2w, 2w)`` whose forward FLOPs come closest to ``target``."""

    def flops(w: int) -> int:
        return 2 * (size**2 * 27 * w + (size // 2) ** 2 * 9 * w * 2 * w + (size // 4) ** 2 * 9 * 4 * w * w)

    best = min(range(4, 257), key=lambda w: abs(flops(w) - target))
    return best, 2 * best, 2 * best


def vit_split(model):
    """``(before, head)``: ``before(x) -> (tokens at the last block's first layer norm, the
    block's input)``, ``head(tokens, residual) -> logits``, written from KerasHub's layers."""
    import keras

    backbone = model.backbone
    patching = backbone.get_layer("vit_patching_and_embedding")
    encoder = backbone.get_layer("vit_encoder")
    *first, last = encoder.encoder_layers
    predictions = model.get_layer("predictions")

    def before(x):
        residual = patching(x)
        for block in first:
            residual = block(residual)
        return last.layer_norm_1(residual), residual

    def head(tokens, residual):
        mid = last.mha(tokens, tokens) + residual
        return predictions(encoder.layer_norm(mid + last.mlp(last.layer_norm_2(mid)))[:, 0])

    def grid(tokens):
        side = int(round((tokens.shape[1] - 1) ** 0.5))
        return keras.ops.reshape(tokens[:, 1:], (-1, side, side, tokens.shape[-1]))

    return before, head, grid


def cnn_split(model):
    """``(before, head, grid)`` of the CNN at its last convolution."""
    import keras

    features = keras.Model(model.inputs, model.get_layer("conv3").output)
    pool = model.layers[-2]
    logits = model.get_layer("logits")
    return (lambda x: (features(x), None)), (lambda a, _: logits(pool(a))), (lambda a: a)


def hand_gradcam(model, split, size: int):
    """A compiled ``(x [B, size, size, 3], classes [B]) -> maps [B, size, size]``, by hand."""
    import keras
    from keras import ops

    before, head, grid = split(model)

    def maps_from(a, g):
        a, g = grid(a), grid(g)
        cam = ops.relu(ops.sum(a * ops.mean(g, axis=(1, 2), keepdims=True), axis=-1))
        return ops.image.resize(cam[..., None], (size, size), interpolation="bilinear")[..., 0]

    def score_of(classes):
        return lambda a, extra: ops.sum(ops.take_along_axis(head(a, extra), classes[:, None], axis=1))

    if keras.backend.backend() == "jax":
        import jax

        variables = model.variables

        def run(values, x, classes):
            with keras.StatelessScope(state_mapping=list(zip(variables, values))):
                a, extra = before(x)
                return maps_from(a, jax.grad(score_of(classes))(a, extra))

        compiled = jax.jit(run)
        values = [v.value for v in variables]
        return lambda x, classes: compiled(values, x, classes)
    import tensorflow as tf

    @tf.function
    def run(x, classes):
        a, extra = before(x)
        with tf.GradientTape() as tape:
            tape.watch(a)
            score = score_of(classes)(a, extra)
        return maps_from(a, tape.gradient(score, a))

    return run


def median_times(runs: dict, repeats: int) -> dict:
    """Median seconds of each function over ``repeats`` round-robin rounds, after a warm-up."""
    for fn in runs.values():
        fn()
    times: dict = {name: [] for name in runs}
    for _ in range(repeats):
        for name, fn in runs.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=96, help="image side (default: 96)")
    parser.add_argument("--width", type=int, default=96, help="the ViT's hidden width (default: 96)")
    parser.add_argument("--blocks", type=int, default=4, help="the ViT's blocks (default: 4)")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    import warnings

    import keras
    import numpy as np

    import saliency_kit as sk

    warnings.filterwarnings("ignore")
    keras.utils.set_random_seed(0)
    vit, vit_flops = build_vit(args.size, args.width, args.blocks)
    cnn, cnn_flops = build_cnn(args.size, cnn_widths(args.size, vit_flops))
    rng = np.random.default_rng(0)
    x = rng.normal(size=(args.batch, args.size, args.size, 3)).astype("float32")
    classes = rng.integers(0, CLASSES, size=args.batch).astype("int32")
    xs, ks = keras.ops.convert_to_tensor(x), keras.ops.convert_to_tensor(classes)

    rows, runs = [], {}
    for name, model, flops, split in (
        (f"ViT (KerasHub, {args.blocks} blocks × {args.width})", vit, vit_flops, vit_split),
        ("CNN (3 convolutions)", cnn, cnn_flops, cnn_split),
    ):
        hand = hand_gradcam(model, split, args.size)
        ours = sk.explain(model, x, method="gradcam", targets=classes).attributions[:, 0]
        np.testing.assert_allclose(ours, np.asarray(hand(xs, ks)), rtol=1e-3, atol=1e-5)
        runs[f"{name}: hand"] = lambda hand=hand: np.asarray(hand(xs, ks))
        runs[f"{name}: sk"] = lambda model=model: sk.explain(model, x, method="gradcam", targets=classes)
        rows.append((name, flops))
    times = median_times(runs, args.repeats)

    print(
        f"Grad-CAM, {keras.backend.backend()}, batch {args.batch} of {args.size}×{args.size}, "
        f"median of {args.repeats} after a warm-up"
    )
    print("| model | forward MFLOPs / image | hand-written, compiled | sk.explain | ratio |")
    print("|---|---|---|---|---|")
    for name, flops in rows:
        hand, ours = times[f"{name}: hand"], times[f"{name}: sk"]
        print(f"| {name} | {flops / 1e6:.0f} | {hand * 1e3:.1f} ms | {ours * 1e3:.1f} ms | {ours / hand:.2f} |")


if __name__ == "__main__":
    main()
