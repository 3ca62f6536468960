"""Attention rollout (Abnar & Zuidema 2020): how much each patch flows into the class token
through the attention of every block, whatever the class.

With ``A_l [n, heads, N, N]`` the attention probabilities of the ``l``-th attention call the
model runs (every ``keras.layers.MultiHeadAttention``, KerasHub's included, read while the model
runs: :func:`saliency_kit.model.attention.attention_recording`):

* heads fused: ``F_l = mean|max|min over heads of A_l`` (``head_fusion``), ``[n, N, N]``;
* ``discard_ratio``: the ``⌊N² · discard_ratio⌋`` lowest entries of each flattened ``F_l`` set
  to zero, except the class token's attention to itself (entry ``(0, 0)``), as the reference
  implementation (jacobgil's ``vit-explain``) does;
* ``W_l = (F_l + I) / 2`` with its rows normalised to sum to 1, and ``R = W_L · … · W_1``;
* the map: the class token's row ``R[0]`` over the patch tokens (the leading prefix tokens, class,
  distillation or registers, dropped), on the patch grid ``[n, h, w]``
  (:func:`~saliency_kit.methods._common.token_grid`), resized to the input; the same for every
  target (the rollout is not class-specific): ``[n, K, H, W]``.
"""

from __future__ import annotations

from typing import Any

from .attention_maps import patch_map, prepare_attention, stacked
from .base import register
from .option import Option

__all__ = ["attention_rollout"]

FUSIONS = ("mean", "max", "min")


def _discard(fused: Any, ratio: float) -> Any:
    """``fused [n, N, N]`` with the ``⌊N² · ratio⌋`` lowest entries of each row's flattened
    matrix zeroed, never entry ``(0, 0)``."""
    from keras import ops

    n, tokens = int(fused.shape[0]), int(fused.shape[-1])
    count = int(tokens * tokens * ratio)
    if count == 0:
        return fused
    flat = ops.reshape(fused, (n, tokens * tokens))
    ranks = ops.argsort(ops.argsort(flat, axis=-1), axis=-1)  # 0 for the lowest entry
    dropped = ops.logical_and(ranks < count, ops.arange(tokens * tokens)[None] != 0)
    return ops.reshape(ops.where(dropped, ops.zeros_like(flat), flat), fused.shape)


@register(
    "attention_rollout",
    title="Attention rollout",
    summary="attention rollout (Abnar & Zuidema 2020): the attention of every block, heads fused, multiplied "
    "through; the class token's row on the patch grid; not class-specific",
    options=[
        Option("head_fusion", "mean", choices=FUSIONS, help="how the heads' attention is fused"),
        Option(
            "discard_ratio",
            0.0,
            low=0,
            high=1,
            high_open=True,
            help="the share of each block's lowest fused attention weights set to zero",
        ),
    ],
    reduce="none",
    cam=True,  # attributions are [B, K, H, W] maps, shown like CAMs
    attention=True,
    prepare=prepare_attention("attention_rollout"),
)
def attention_rollout(ctx: Any, head_fusion: str, discard_ratio: float) -> Any:
    from keras import ops

    probabilities, _ = ctx.attention(gradients=False)
    attention = stacked(ctx, probabilities)  # [L, n, heads, N, N]
    fuse = {"mean": ops.mean, "max": ops.max, "min": ops.min}[head_fusion]
    tokens = int(attention.shape[-1])
    identity = ops.eye(tokens, dtype="float32")
    rollout = identity[None]
    for block in range(int(attention.shape[0])):
        fused = _discard(fuse(attention[block], axis=1), discard_ratio)  # [n, N, N]
        weights = (fused + identity) / 2.0
        weights = weights / ops.sum(weights, axis=-1, keepdims=True)
        rollout = ops.matmul(weights, rollout)
    rows = ops.repeat(rollout[:, None, 0, :], ctx.num_targets, axis=1)  # [n, K, N]
    return patch_map(ctx, rows)
