"""What the attention methods (:mod:`.attention_rollout`, :mod:`.transformer_attribution`) share:
their checks before any work, the recorded attention probabilities stacked, and the class
token's row laid out on the patch grid.

The declarations only at import (no TensorFlow, no Keras), like every method module.
"""

from __future__ import annotations

from typing import Any

from ._common import require_channels_last, token_grid
from .base import Request

__all__ = ["prepare_attention", "stacked", "patch_map"]


def prepare_attention(method: str) -> Any:
    """The ``prepare`` of a method reading attention: image inputs ``[B, H, W, C]`` and a model
    with attention layers, checked before any work (one-line ``ValueError`` otherwise)."""

    def prepare(request: Request, options: dict) -> dict:
        from ..model.attention import attention_layers, no_attention

        if not attention_layers(request.model):
            raise ValueError(no_attention(method))
        require_channels_last(request, method)
        return options

    return prepare


def stacked(ctx: Any, probabilities: list) -> Any:
    """The recorded probabilities as one tensor ``[L, n, heads, N, N]``; ``ValueError`` unless
    every attention call is a self-attention over the same ``N`` tokens."""
    from keras import ops

    shapes = {tuple(p.shape[2:]) for p in probabilities}
    if len(shapes) != 1 or any(len(set(shape)) != 1 for shape in shapes):
        raise ValueError(
            "attention rollout needs self-attention over the same tokens in every attention call; "
            f"received attention probabilities of shapes {sorted(tuple(p.shape) for p in probabilities)}."
        )
    return ops.stack([ops.cast(p, "float32") for p in probabilities])


def patch_map(ctx: Any, rows: Any) -> Any:
    """The class token's rows ``rows [n, K, N]`` over the patch tokens, on the patch grid and
    resized to the input: ``[n, K, H, W]``."""
    from keras import ops

    height, width = (int(size) for size in ctx.spatial_size)
    prefix, h, w = token_grid(int(rows.shape[-1]), height, width)
    grid = ops.reshape(rows[..., prefix:], (-1, int(rows.shape[1]), h, w))
    return ctx.resize(grid, ctx.spatial_size)
