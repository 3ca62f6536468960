"""Score-CAM (Wang et al., CVPRW 2020) and Faster-ScoreCAM.

Each channel ``A_c`` of a convolutional layer, upsampled to the input's ``H×W`` and normalised to
[0, 1], masks the input; the channel's weight is the class's softmax probability at that
masked input:

    H_c = (up(A_c) − min up(A_c)) / (max up(A_c) − min up(A_c) + 1e-7)
    w_c^k = softmax(f(x ⊙ H_c))_k
    L^k = up( relu( Σ_c w_c^k A_c ) )

with ``f`` the logits (``score="logits"``) and ``up`` bilinear resizing. For target objects
``softmax(f(·))_k`` is the target's probability (``ctx.probabilities``): a region's softmax over
the classes of its reduced logits, a box's D-RISE score, an output's or unit's value as it is to ``H×W`` (as Grad-CAM
here). ``max_channels=N`` is Faster-ScoreCAM: only the ``N`` channels of each input whose
activations vary most over ``h×w`` (standard deviation) take part. Forward passes only:
``C`` (or ``N``) forward passes per input, all K classes sharing them; ``batch_size`` bounds the
masked copies per compiled call.

Anchor: tf-keras-vis ``Scorecam``. It upsamples with ``scipy.ndimage.zoom(order=1)`` (corner-
aligned, where Grad-CAM here and ``tf.image.resize`` are half-pixel), normalises the final map to
[0, 1] (here it is left as computed, like Grad-CAM), and with ``max_N`` keeps the union of the
top channels of *every input in the batch* (so a map depends on its batch); here each input
keeps its own ``max_channels``. On a layer of the input's own size (no resizing) and without
Faster-ScoreCAM the maps agree. Attributions are the maps ``[B, K, H, W]``.
"""
from __future__ import annotations

import numbers

from . import gradcam
from .base import Option, register

EPSILON = 1e-7  # Keras' backend epsilon, as tf-keras-vis
ASSUMED_CHANNELS = 512  # sizes the chunks when every channel is used (the count is known only when traced)


def prepare(request, options: dict) -> dict:
    limit = options["max_channels"]
    if limit is not None and not (isinstance(limit, numbers.Integral) and limit >= 1):
        raise ValueError(f"max_channels must be a positive int or None (every channel); received {limit!r}.")
    return gradcam.prepare(request, options)


@register(
    "scorecam",
    title="Score-CAM",
    summary="Score-CAM (Wang et al. 2020): channels weighted by the class probability of the input masked by "
            "each; max_channels=N for Faster-ScoreCAM; the map is the CAM itself",
    options=[
        gradcam.OPTIONS[0],
        Option("max_channels", None, type=int,
               help="Faster-ScoreCAM: only each input's N channels of largest spread (default: every channel)"),
    ],
    reduce="none",
    cam=True,
    prepare=prepare,
    cost=lambda options: options["max_channels"] or ASSUMED_CHANNELS,
)
def scorecam(ctx, layer, max_channels):
    from keras import ops

    activations, _ = ctx.layer(layer)  # [n, h, w, C]
    gradcam._check_rank(activations, layer)
    activations = ops.cast(activations, "float32")
    if ctx.channel_axis == 0:  # a channels-first layer [n, C, h, w]
        activations = ops.transpose(activations, [0, 2, 3, 1])
    channels = activations.shape[-1]
    count = channels if max_channels is None else min(max_channels, channels)
    if count < channels:  # Faster-ScoreCAM: each input's channels of largest spread
        spread = ops.std(activations, axis=(1, 2))  # [n, C]
        keep = ops.top_k(spread, count)[1]
        activations = ops.take_along_axis(activations, keep[:, None, None, :], axis=3)
    maps = ops.transpose(activations, [0, 3, 1, 2])  # [n, count, h, w]
    x = ctx.inputs
    size = ctx.image_size
    color = 2 if ctx.channel_axis == 0 else -1  # where the input's channels go in [n, m, ...]

    def channel(i):  # channels i [m] -> w_c^k · A_c: [n, m, K, h, w]
        chosen = ops.take(maps, i, axis=1)  # [n, m, h, w]
        up = ctx.resize(chosen, size)  # [n, m, H, W]
        low = ops.min(up, axis=(2, 3), keepdims=True)
        high = ops.max(up, axis=(2, 3), keepdims=True)
        masks = (up - low) / (high - low + EPSILON)
        weights = ctx.probabilities(x[:, None] * ops.expand_dims(ops.cast(masks, x.dtype), color))  # [n, m, K]
        return weights[..., None, None] * chosen[:, :, None]

    return ctx.resize(ops.relu(ctx.sum(count, channel)), size)
