"""Transformer attribution (Chefer et al. 2021, the gradient-weighted rollout of their
``generate_relevance``): the positive, gradient-weighted attention of every block rolled out;
class-specific through each target's gradient.

With ``A_l [n, heads, N, N]`` the attention probabilities of the ``l``-th attention call the
model runs (read as for :mod:`.attention_rollout`) and ``G_l = ∂s_k/∂A_l``:

* ``Ā_l = mean over heads of relu(G_l ⊙ A_l)``, ``[n, K, N, N]``;
* ``R_0 = I``, ``R_l = R_{l-1} + Ā_l · R_{l-1}``;
* the map: the class token's row ``R_L[0]`` over the patch tokens, on the patch grid, resized to
  the input: ``[n, K, H, W]``.
"""

from __future__ import annotations

from typing import Any

from .attention_maps import patch_map, prepare_attention, stacked
from .base import register

__all__ = ["transformer_attribution"]


@register(
    "transformer_attribution",
    title="Transformer attribution",
    summary="transformer attribution (Chefer et al. 2021): each block's gradient-weighted positive attention "
    "rolled out; the class token's row on the patch grid",
    reduce="none",
    cam=True,  # attributions are [B, K, H, W] maps, shown like CAMs
    attention=True,
    prepare=prepare_attention("transformer_attribution"),
)
def transformer_attribution(ctx: Any) -> Any:
    from keras import ops

    probabilities, gradients = ctx.attention()
    attention = stacked(ctx, probabilities)  # [L, n, heads, N, N]
    relevance: Any = None  # R_0 = I: R_1 = I + Ā_1
    for block, g in enumerate(gradients):
        weighted = ops.mean(ops.relu(ops.cast(g, "float32") * attention[block][:, None]), axis=2)  # [n, K, N, N]
        if relevance is None:
            relevance = ops.eye(int(attention.shape[-1]), dtype="float32") + weighted
        else:
            relevance = relevance + ops.matmul(weighted, relevance)
    return patch_map(ctx, relevance[:, :, 0, :])
