"""Score-CAM (Wang et al., CVPRW 2020) and Faster-ScoreCAM.

Each channel ``A_c`` of a convolutional layer, upsampled to the input's ``H×W`` (length ``T`` of a
sequence, ``D×H×W`` of a volume) and normalised to [0, 1], masks the input; the channel's weight
is the class's softmax probability at that masked input:

    H_c = (up(A_c) − min up(A_c)) / (max up(A_c) − min up(A_c) + 1e-7)
    w_c^k = softmax(f(x ⊙ H_c))_k
    L^k = up( relu( Σ_c w_c^k A_c ) )

with ``f`` the logits (``score="logits"``) and ``up`` linear resizing to the input (as Grad-CAM
here). For target objects ``softmax(f(·))_k`` is the target's probability (``ctx.probabilities``):
a region's softmax over the classes of its reduced logits, a box's D-RISE score, an output's or
unit's value as it is. ``max_channels=N`` is Faster-ScoreCAM: only the ``N`` channels of each input whose
activations vary most over ``h×w`` (standard deviation) take part. Forward passes only:
``C`` (or ``N``) forward passes per input, all K classes sharing them; ``batch_size`` bounds the
masked copies per compiled call.

Anchor: tf-keras-vis ``Scorecam``. It upsamples with ``scipy.ndimage.zoom(order=1)`` (corner-
aligned, where Grad-CAM here and ``tf.image.resize`` are half-pixel), normalises the final map to
[0, 1] (here it is left as computed, like Grad-CAM), and with ``max_N`` keeps the union of the
top channels of *every input in the batch* (so a map depends on its batch); here each input
keeps its own ``max_channels``. On a layer of the input's own size (no resizing) and without
Faster-ScoreCAM the maps agree. Attributions are the maps ``[B, K, H, W]`` (``[B, K, T]``,
``[B, K, D, H, W]``).
"""

from __future__ import annotations

from typing import Any

from ._common import LAYER_OPTION, TOKEN_OPTIONS, cam_tensors, prepare_cam_layer, spatial_axes
from .base import Option, register

__all__ = ["scorecam"]

EPSILON = 1e-7  # Keras' backend epsilon, as tf-keras-vis
ASSUMED_CHANNELS = 512  # sizes the chunks when every channel is used (the count is known only when traced)


@register(
    "scorecam",
    title="Score-CAM",
    summary="Score-CAM (Wang et al. 2020): channels weighted by the class probability of the input masked by "
    "each; max_channels=N for Faster-ScoreCAM; the map is the CAM itself",
    options=[
        LAYER_OPTION,
        Option(
            "max_channels",
            None,
            type=int,
            low=1,
            help="Faster-ScoreCAM: only each input's N channels of largest spread (default: every channel)",
        ),
        *TOKEN_OPTIONS,
    ],
    reduce="none",
    cam=True,
    prepare=prepare_cam_layer,
    cost=lambda options: options["max_channels"] or ASSUMED_CHANNELS,
)
def scorecam(ctx: Any, layer: str, max_channels: int | None, token_grid: Any = None, prefix_tokens: Any = None) -> Any:
    from keras import ops

    activations, _ = ctx.layer(layer)  # [n, *s, C] (channels first: [n, C, *s])
    activations = cam_tensors(ctx, ops.cast(activations, "float32"), None, layer, token_grid, prefix_tokens)
    axes = spatial_axes(activations)
    channels = activations.shape[-1]
    count = channels if max_channels is None else min(max_channels, channels)
    if count < channels:  # Faster-ScoreCAM: each input's channels of largest spread
        spread = ops.std(activations, axis=axes)  # [n, C]
        keep = ops.top_k(spread, count)[1]
        activations = ops.take_along_axis(activations, ops.reshape(keep, [-1, *[1] * len(axes), count]), axis=-1)
    maps = ops.transpose(activations, [0, len(axes) + 1, *axes])  # [n, count, *s]
    x = ctx.inputs
    size = ctx.spatial_size
    color = 2 if ctx.channel_axis == 0 else -1  # where the input's channels go in [n, m, ...]
    within = tuple(range(2, 2 + len(size)))  # the spatial axes of [n, m, *S]

    def channel(i: Any) -> Any:  # channels i [m] -> w_c^k · A_c: [n, m, K, *s]
        chosen = ops.take(maps, i, axis=1)  # [n, m, *s]
        up = ctx.resize(chosen, size)  # [n, m, *S]
        low = ops.min(up, axis=within, keepdims=True)
        high = ops.max(up, axis=within, keepdims=True)
        masks = (up - low) / (high - low + EPSILON)
        weights = ctx.probabilities(x[:, None] * ops.expand_dims(ops.cast(masks, x.dtype), color))  # [n, m, K]
        return ops.reshape(weights, [*weights.shape, *[1] * len(size)]) * chosen[:, :, None]

    return ctx.resize(ops.relu(ctx.sum(count, channel)), size)
