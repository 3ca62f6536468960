"""RISE: randomized input sampling for explanation (Petsiuk, Das and Saenko, BMVC 2018).

``N`` random smooth masks ``M_i`` ``[H, W]`` in [0, 1] each keep part of the image; a pixel's
saliency is the score the model gives the masked images, averaged over the masks weighted by how
much of that pixel each kept:

    S_k = 1 / (N · p) · Σ_i s_k(x ⊙ M_i) · M_i

Masks as the paper: a ``cells × cells`` grid of Bernoulli(``p``) cells, upsampled bilinearly to
``(cells + 1) · ⌈H / cells⌉ × (cells + 1) · ⌈W / cells⌉`` and cropped to ``H × W`` at a random
offset below one cell. The masks depend on ``seed`` only: the same set for every input, drawn
from a stateless generator keyed by the seed and the mask's number (``ctx.uniform(...,
shared=True)``), drawn and upsampled inside the compiled function block by block, so memory does
not grow with ``masks``; a seed fixes the result whatever ``batch_size`` is. Forward passes only,
K classes sharing them.
``s_k`` is the logit with ``score="logits"``; the paper uses the class probability
(``score="output"`` on a softmax model). Xplique's RISE divides by the per-pixel sum of the masks
instead of ``N · p`` (the same in expectation). Images only; attributions are the maps
``[B, K, H, W]``.
"""

from __future__ import annotations

import math
from typing import Any

from ._common import require_channels_last
from .base import Option, Request, register

__all__ = ["rise", "smooth_masks", "prepare"]


def prepare(request: Request, options: dict) -> dict:
    require_channels_last(request, "rise")
    return {**options, "p": float(options["p"])}


def smooth_masks(ctx: Any, ids: Any, count: int, cells: int, p: float, size: tuple) -> Any:
    """Masks ``ids [m]`` of ``count`` as ``[m, H, W]`` float32, the same for every input: from
    uniform draws ``u [m, cells² + 2]`` (``ctx.uniform(..., shared=True)``), a grid of cells kept
    where ``u < p`` (the first ``cells²`` draws, row by row), upsampled bilinearly to
    ``(cells + 1) · cell`` and cropped to ``H × W`` at the offset ``⌊u · cell⌋`` (the last two
    draws), with ``cell = (⌈H / cells⌉, ⌈W / cells⌉)``."""
    from keras import ops

    height, width = size
    cell = (math.ceil(height / cells), math.ceil(width / cells))
    m = ids.shape[0]
    u = ctx.uniform(ids, count, [cells * cells + 2], shared=True)  # [m, cells² + 2]
    grids = ops.reshape(ops.cast(u[:, : cells * cells] < p, "float32"), [m, cells, cells])
    offsets = ops.minimum(
        ops.cast(ops.floor(u[:, -2:] * ops.convert_to_tensor(cell, "float32")), "int32"),
        ops.convert_to_tensor([c - 1 for c in cell], "int32"),
    )  # [m, 2]
    up = ctx.resize(grids[None], ((cells + 1) * cell[0], (cells + 1) * cell[1]))[0]  # [m, UH, UW]
    rows = offsets[:, 0:1] + ops.arange(height, dtype="int32")[None]  # [m, H]
    cols = offsets[:, 1:2] + ops.arange(width, dtype="int32")[None]  # [m, W]
    up = ops.take_along_axis(up, ops.broadcast_to(rows[:, :, None], [m, height, up.shape[2]]), axis=1)  # [m, H, UW]
    return ops.take_along_axis(up, ops.broadcast_to(cols[:, None, :], [m, height, width]), axis=2)  # [m, H, W]


@register(
    "rise",
    title="RISE",
    summary="RISE (Petsiuk et al. 2018): scores of the input under random smooth masks, weighted by the masks; "
    "the map is the saliency itself",
    options=[
        Option("masks", 2000, low=1, help="random masks (forward passes per input)"),
        Option("cells", 7, low=1, help="cells per side of each mask's random grid"),
        Option("p", 0.5, low=0, high=1, low_open=True, help="probability that a cell is kept"),
        Option.seed(),
    ],
    reduce="none",
    cam=True,  # attributions are [B, K, H, W] maps, shown like CAMs
    warn_zero=False,
    prepare=prepare,
    cost=lambda options: options["masks"],
)
def rise(ctx: Any, masks: int, cells: int, p: float, seed: int) -> Any:
    from keras import ops

    x = ctx.inputs
    size = ctx.shape[:2]

    def mask(i: Any) -> Any:  # masks i [m] -> s_k(x ⊙ M_i) · M_i: [n, m, K, H, W]
        chosen = smooth_masks(ctx, i, masks, cells, p, size)  # [m, H, W]
        scores = ctx.scores(x[:, None] * ops.cast(chosen, x.dtype)[None, ..., None])  # [n, m, K]
        return scores[..., None, None] * chosen[None, :, None]

    return ctx.sum(masks, mask) / (masks * p)
