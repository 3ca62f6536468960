"""RISE: randomized input sampling for explanation (Petsiuk, Das and Saenko, BMVC 2018).

``N`` random smooth masks ``M_i`` ``[H, W]`` in [0, 1] each keep part of the image; a pixel's
saliency is the score the model gives the masked images, averaged over the masks weighted by how
much of that pixel each kept:

    S_k = 1 / (N · p) · Σ_i s_k(x ⊙ M_i) · M_i

Masks as the paper: a ``cells × cells`` grid of Bernoulli(``p``) cells, upsampled bilinearly to
``(cells + 1) · ⌈H / cells⌉ × (cells + 1) · ⌈W / cells⌉`` and cropped to ``H × W`` at a random
offset below one cell. The masks depend on ``seed`` only (the same set for every input, drawn from a stateless
generator; upsampled inside the compiled function block by block, so memory does not grow with
``masks``): a seed fixes the result whatever ``batch_size`` is. Forward passes only, K classes sharing them.
``s_k`` is the logit with ``score="logits"``; the paper uses the class probability
(``score="output"`` on a softmax model). Xplique's RISE divides by the per-pixel sum of the masks
instead of ``N · p`` (the same in expectation). Images only; attributions are the maps
``[B, K, H, W]``.
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from .base import Option, register, require_channels_last


def prepare(request, options: dict) -> dict:
    require_channels_last(request, "rise")
    for name in ("masks", "cells"):
        if options[name] < 1:
            raise ValueError(f"{name} must be a positive int; received {options[name]!r}.")
    p = options["p"]
    if not (isinstance(p, numbers.Real) and 0 < p <= 1):
        raise ValueError(f"p must be a probability in (0, 1] (the chance a cell is kept); received {p!r}.")
    seed = options["seed"]
    if seed is None:
        seed = int(np.random.default_rng().integers(2**31))
    return {**options, "p": float(p), "seed": int(seed)}


def mask_draws(seed, count: int, cells: int, p: float, cell_size: tuple):
    """``(grids [count, cells, cells] float32 of 0/1, offsets [count, 2] int32)`` for ``seed``
    (stateless: the same for every input, chunk and batch size)."""
    import tensorflow as tf

    seed = tf.cast(seed, tf.int64)
    grids = tf.cast(tf.random.stateless_uniform([count, cells, cells], seed=tf.stack([seed, 0])) < p, tf.float32)
    u = tf.random.stateless_uniform([count, 2], seed=tf.stack([seed, 1]))
    offsets = tf.minimum(tf.cast(tf.floor(u * cell_size), tf.int32), tf.constant(cell_size, tf.int32) - 1)
    return grids, offsets


def smooth_masks(grids, offsets, height: int, width: int, cell_size: tuple):
    """``[m, H, W]``: each grid upsampled bilinearly to ``(cells + 1) · cell_size`` and cropped at its offset."""
    import tensorflow as tf

    cells = grids.shape[-1]
    up = tf.image.resize(grids[..., None], ((cells + 1) * cell_size[0], (cells + 1) * cell_size[1]), method="bilinear")
    rows = offsets[:, 0:1] + tf.range(height)[None]  # [m, H]
    cols = offsets[:, 1:2] + tf.range(width)[None]  # [m, W]
    up = tf.gather(up[..., 0], rows, axis=1, batch_dims=1)  # [m, H, UW]
    return tf.gather(up, cols, axis=2, batch_dims=1)  # [m, H, W]


@register(
    "rise",
    title="RISE",
    summary="RISE (Petsiuk et al. 2018): scores of the input under random smooth masks, weighted by the masks; "
            "the map is the saliency itself",
    options=[
        Option("masks", 2000, help="random masks (forward passes per input)"),
        Option("cells", 7, help="cells per side of each mask's random grid"),
        Option("p", 0.5, help="probability that a cell is kept"),
        Option("seed", None, type=int, help="random seed, for repeatable maps"),
    ],
    reduce="none",
    cam=True,  # attributions are [B, K, H, W] maps, shown like CAMs
    noisy=True,
    warn_zero=False,
    prepare=prepare,
    cost=lambda options: options["masks"],
)
def rise(ctx, masks, cells, p, seed):
    from keras import ops

    x = ctx.inputs
    height, width = ctx.shape[:2]
    cell_size = (math.ceil(height / cells), math.ceil(width / cells))
    grids, offsets = mask_draws(seed, masks, cells, p, cell_size)

    def mask(i):  # masks i [m] -> s_k(x ⊙ M_i) · M_i: [n, m, K, H, W]
        chosen = smooth_masks(ops.take(grids, i, axis=0), ops.take(offsets, i, axis=0), height, width, cell_size)
        scores = ctx.scores(x[:, None] * ops.cast(chosen, x.dtype)[None, ..., None])  # [n, m, K]
        return scores[..., None, None] * chosen[None, :, None]

    return ctx.sum(masks, mask) / (masks * p)


__all__ = ["mask_draws", "smooth_masks"]
