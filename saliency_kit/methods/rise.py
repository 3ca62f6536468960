"""RISE: randomized input sampling for explanation (Petsiuk, Das and Saenko, BMVC 2018).

``N`` random smooth masks ``M_i`` ``[H, W]`` in [0, 1] each keep part of the image; a pixel's
saliency is the score the model gives the masked images, averaged over the masks weighted by how
much of that pixel each kept:

    S_k = 1 / (N · p) · Σ_i s_k(x ⊙ M_i) · M_i

Masks as the paper: a ``cells × cells`` grid of Bernoulli(``p``) cells, upsampled bilinearly to
``(cells + 1) · ⌈H / cells⌉ × (cells + 1) · ⌈W / cells⌉`` and cropped to ``H × W`` at a random
offset below one cell. The masks depend on ``seed`` only (the same set for every input; built
inside the compiled function block by block, so memory does not grow with ``masks``): a seed
fixes the result whatever ``batch_size`` is. Forward passes only, K classes sharing them.
``s_k`` is the logit with ``score="logits"``; the paper uses the class probability
(``score="output"`` on a softmax model). Xplique's RISE divides by the per-pixel sum of the masks
instead of ``N · p`` (the same in expectation). Images only; attributions are the maps
``[B, K, H, W]``.
"""
from __future__ import annotations

import math

import numpy as np
import tensorflow as tf

from ._base import Method, Request, Result, check_positive_int, register
from ._kernels import masked_scores, target_scores

DEFAULTS = {"masks": 2000, "cells": 7, "p": 0.5, "seed": None}


def _settings(request: Request, options: dict):
    if request.inputs.ndim != 4:
        raise ValueError(f"rise needs image inputs [B, H, W, C]; received shape {request.inputs.shape}.")
    count = check_positive_int("masks", options["masks"])
    cells = check_positive_int("cells", options["cells"])
    p = options["p"]
    if isinstance(p, bool) or not isinstance(p, (int, float, np.floating)) or not 0 < p <= 1:
        raise ValueError(f"p must be a probability in (0, 1] (the chance a cell is kept); received {p!r}.")
    seed = options["seed"]
    if seed is None:
        seed = int(np.random.default_rng().integers(2**31))
    elif isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise ValueError(f"seed must be an int or None; received {seed!r}.")
    return count, cells, float(p), int(seed)


def check(request: Request, **options) -> None:
    _settings(request, options)


def mask_draws(seed: int, count: int, cells: int, p: float, cell_size: tuple) -> tuple[np.ndarray, np.ndarray]:
    """``(grids [count, cells, cells] float32 of 0/1, offsets [count, 2] int32)`` for ``seed``."""
    rng = np.random.default_rng(seed)
    grids = (rng.uniform(size=(count, cells, cells)) < p).astype(np.float32)
    offsets = np.stack([rng.integers(size, size=count) for size in cell_size], axis=-1).astype(np.int32)
    return grids, offsets


def smooth_masks(grids, offsets, height: int, width: int, cell_size: tuple):
    """``[m, H, W]``: each grid upsampled bilinearly to ``(cells + 1) · cell_size`` and cropped at its offset."""
    cells = grids.shape[-1]
    up = tf.image.resize(grids[..., None], ((cells + 1) * cell_size[0], (cells + 1) * cell_size[1]), method="bilinear")
    rows = offsets[:, 0:1] + tf.range(height)[None]  # [m, H]
    cols = offsets[:, 1:2] + tf.range(width)[None]  # [m, W]
    up = tf.gather(up[..., 0], rows, axis=1, batch_dims=1)  # [m, H, UW]
    return tf.gather(up, cols, axis=2, batch_dims=1)  # [m, H, W]


def compute(request: Request, **options) -> Result:
    count, cells, p, seed = _settings(request, options)
    height, width = request.inputs.shape[1:3]
    cell_size = (math.ceil(height / cells), math.ceil(width / cells))
    grids, offsets = mask_draws(seed, count, cells, p, cell_size)

    def prepare(x, index, grids, offsets):
        return tf.shape(x)[0]

    def masks(n, x, t, grids, offsets):
        i = tf.minimum(t, count - 1)
        chosen = smooth_masks(tf.gather(grids, i), tf.gather(offsets, i), height, width, cell_size)  # [m, H, W]
        weight = tf.broadcast_to(chosen[None], [x.shape[0], *chosen.shape])
        return chosen[None, ..., None], weight

    def finish(total, state):
        return total / (count * p)

    key = ("rise", cells, p, seed)
    maps = masked_scores(request, key, count, prepare, masks, finish, (grids, offsets), map_shape=(height, width))
    resolved = {**options, "masks": count, "cells": cells, "p": p, "seed": seed}
    return Result(maps, maps, target_scores(request), resolved)


register(
    Method(
        "rise",
        "RISE (Petsiuk et al. 2018): scores of the input under random smooth masks, weighted by the masks; "
        "the map is the saliency itself",
        compute,
        defaults=dict(DEFAULTS),
        warn_zero=False,
        check=check,
    )
)

__all__ = ["mask_draws", "smooth_masks"]
