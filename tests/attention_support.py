"""A tiny vision transformer shared by the tests of the attention methods, its twin written from
its weights (which returns the attention probabilities and takes a shift added to them), and the
NumPy references of attention rollout and transformer attribution.

* :func:`tiny_vit`: 32×32 images, 8×8 patches (a 4×4 grid), a class token, two pre-norm blocks
  of ``MultiHeadAttention`` (2 heads, key_dim 8) and a GELU MLP, a classifier on token 0;
* :func:`twin`: the same function in ``keras.ops`` with the attention recomputed from the
  layers' kernels, returning the logits and each block's probabilities ``[B, heads, N, N]``;
* :func:`rollout_reference`, :func:`attribution_reference`: the maps ``[B, H, W]`` in NumPy.
"""

import keras
import numpy as np
import scipy.ndimage
from keras import ops

SIZE, PATCH, DIM, HEADS, KEY_DIM, BLOCKS, CLASSES = 32, 8, 16, 2, 8, 2, 3


class ClassToken(keras.layers.Layer):
    """Prepends a learned class token: ``[B, N, C]`` -> ``[B, 1 + N, C]``."""

    def build(self, input_shape):
        self.token = self.add_weight(shape=(1, 1, input_shape[-1]), initializer="random_normal")

    def call(self, tokens):
        token = ops.broadcast_to(self.token, (ops.shape(tokens)[0], 1, tokens.shape[-1]))
        return ops.concatenate([token, tokens], axis=1)


class FirstToken(keras.layers.Layer):
    def call(self, tokens):
        return tokens[:, 0]


def tiny_vit():
    """The tiny ViT, weights drawn by NumPy (the same on every backend)."""
    inputs = keras.Input((SIZE, SIZE, 3))
    x = keras.layers.Conv2D(DIM, PATCH, strides=PATCH, name="patches")(inputs)
    x = keras.layers.Reshape(((SIZE // PATCH) ** 2, DIM))(x)
    x = ClassToken(name="class_token")(x)
    for b in range(BLOCKS):
        h = keras.layers.LayerNormalization(name=f"norm{b}")(x)
        h = keras.layers.MultiHeadAttention(HEADS, KEY_DIM, name=f"attention{b}")(h, h)
        x = keras.layers.Add()([x, h])
        h = keras.layers.LayerNormalization(name=f"mlp_norm{b}")(x)
        x = keras.layers.Add()([x, keras.layers.Dense(DIM, activation="gelu", name=f"mlp{b}")(h)])
    model = keras.Model(inputs, keras.layers.Dense(CLASSES, name="logits")(FirstToken()(x)))
    rng = np.random.default_rng(7)
    model.set_weights([rng.normal(scale=0.5, size=w.shape).astype("float32") for w in model.get_weights()])
    return model


def images(count=2, seed=0):
    return np.random.default_rng(seed).normal(size=(count, SIZE, SIZE, 3)).astype("float32")


def twin(model, x, shifts=None):
    """``(logits [B, classes], [probabilities [B, heads, N, N] of each block])`` of ``model`` at
    ``x``, the attention recomputed from its kernels; ``shifts[b]`` added to block ``b``'s
    probabilities where they weight the values."""
    t = model.get_layer("class_token")(ops.reshape(model.get_layer("patches")(x), (-1, (SIZE // PATCH) ** 2, DIM)))
    taken = []
    for b in range(BLOCKS):
        wq, bq, wk, bk, wv, bv, wo, bo = model.get_layer(f"attention{b}").weights
        h = model.get_layer(f"norm{b}")(t)
        q = (ops.einsum("btd,dhk->bthk", h, wq) + bq) / np.sqrt(KEY_DIM)
        k = ops.einsum("btd,dhk->bthk", h, wk) + bk
        v = ops.einsum("btd,dhk->bthk", h, wv) + bv
        p = ops.softmax(ops.einsum("bthk,bshk->bhts", q, k), axis=-1)
        taken.append(p)
        if shifts is not None:
            p = p + shifts[b]
        t = t + ops.einsum("bthk,hkd->btd", ops.einsum("bhts,bshk->bthk", p, v), wo) + bo
        t = t + model.get_layer(f"mlp{b}")(model.get_layer(f"mlp_norm{b}")(t))
    return model.get_layer("logits")(t[:, 0]), taken


def on_input(grid):
    """``grid [B, h, w]`` resized to the input as the CAM methods do (linear, half-pixel centres)."""
    zoom = (1, SIZE / grid.shape[1], SIZE / grid.shape[2])
    return scipy.ndimage.zoom(grid, zoom, order=1, grid_mode=True, mode="nearest")


def rollout_reference(probabilities, head_fusion="mean", discard_ratio=0.0):
    """Attention rollout ``[B, H, W]`` from each block's probabilities ``[B, heads, N, N]``
    (NumPy), as jacobgil's vit-explain computes it, rows normalised."""
    fuse = {"mean": np.mean, "max": np.max, "min": np.min}[head_fusion]
    count, tokens = probabilities[0].shape[0], probabilities[0].shape[-1]
    rows = []
    for i in range(count):
        rollout = np.eye(tokens)
        for attention in probabilities:
            flat = fuse(np.asarray(attention[i], np.float64), axis=0).ravel()
            lowest = np.argsort(flat, kind="stable")[: int(flat.size * discard_ratio)]
            flat[lowest[lowest != 0]] = 0
            weights = (flat.reshape(tokens, tokens) + np.eye(tokens)) / 2
            rollout = (weights / weights.sum(axis=-1, keepdims=True)) @ rollout
        rows.append(rollout[0, 1:])
    side = int(round((tokens - 1) ** 0.5))
    return on_input(np.reshape(rows, (count, side, side)))


def attribution_reference(probabilities, gradients):
    """Chefer et al.'s rollout ``[B, H, W]`` from each block's probabilities and the gradients of
    one score with respect to them, both ``[B, heads, N, N]`` (NumPy)."""
    count, tokens = probabilities[0].shape[0], probabilities[0].shape[-1]
    rows = []
    for i in range(count):
        relevance = np.eye(tokens)
        for attention, g in zip(probabilities, gradients):
            cam = np.maximum(np.asarray(g[i], np.float64) * attention[i], 0).mean(axis=0)
            relevance = relevance + cam @ relevance
        rows.append(relevance[0, 1:])
    side = int(round((tokens - 1) ** 0.5))
    return on_input(np.reshape(rows, (count, side, side)))
