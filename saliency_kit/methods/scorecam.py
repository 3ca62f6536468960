"""Score-CAM (Wang et al., CVPRW 2020) and Faster-ScoreCAM.

Each channel ``A_c`` of a convolutional layer, upsampled to the input's ``H×W`` and normalised to
[0, 1], masks the input; the channel's weight is the class's softmax probability at that
masked input:

    H_c = (up(A_c) − min up(A_c)) / (max up(A_c) − min up(A_c) + 1e-7)
    w_c^k = softmax(f(x ⊙ H_c))_k
    L^k = up( relu( Σ_c w_c^k A_c ) )

with ``f`` the logits (``score="logits"``) and ``up`` bilinear resizing to ``H×W`` (as Grad-CAM
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

import numpy as np
import tensorflow as tf

from . import cam
from ._base import Method, Request, Result, register
from ._kernels import masked_scores, target_scores

DEFAULTS = {"layer": None, "max_channels": None}
EPSILON = 1e-7  # Keras' backend epsilon, as tf-keras-vis


def _settings(request: Request, options: dict):
    cam.check(request, layer=options["layer"])
    layer = cam._layer(request, options["layer"])
    limit = options["max_channels"]
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, (int, np.integer)) or limit < 1):
        raise ValueError(f"max_channels must be a positive int or None (every channel); received {limit!r}.")
    return layer, None if limit is None else int(limit)


def check(request: Request, **options) -> None:
    _settings(request, options)


def _channels(model, request: Request, layer: str) -> tuple:
    """``(h, w, C)`` of the layer's activations (one forward pass of one input)."""
    from .. import engine

    view = engine.score_view(model, request.score, request.score_fn)
    _, activations = view(tf.constant(request.inputs[:1]), tap=layer)
    if len(activations.shape) != 4:
        raise ValueError(
            f"layer {layer!r} has a {len(activations.shape)}-D output {tuple(activations.shape)}; "
            "Score-CAM needs a 4-D [batch, height, width, channels] layer."
        )
    return tuple(int(d) for d in activations.shape[1:])


def compute(request: Request, **options) -> Result:
    from .. import engine

    layer, limit = _settings(request, options)
    h, w, channels = _channels(request.model, request, layer)
    count = channels if limit is None else min(limit, channels)
    height, width = request.inputs.shape[1:3]
    view = engine.score_view(request.model, request.score, request.score_fn)

    def prepare(x, index):
        _, activations = view(x, tap=layer)
        activations = tf.cast(activations, tf.float32)  # [n, h, w, C]
        if count < channels:  # Faster-ScoreCAM: each input's channels of largest spread
            spread = tf.math.reduce_std(activations, axis=(1, 2))  # [n, C]
            keep = tf.math.top_k(spread, count).indices
            activations = tf.gather(activations, keep, axis=3, batch_dims=1)
        return activations

    def masks(activations, x, t):
        chosen = tf.gather(activations, tf.minimum(t, count - 1), axis=3)  # [n, h, w, m]
        up = tf.image.resize(chosen, (height, width), method="bilinear") if (h, w) != (height, width) else chosen
        low = tf.reduce_min(up, axis=(1, 2), keepdims=True)
        high = tf.reduce_max(up, axis=(1, 2), keepdims=True)
        normalised = (up - low) / (high - low + EPSILON)
        mask = tf.transpose(normalised, [0, 3, 1, 2])[..., None]  # [n, m, H, W, 1]
        return mask, tf.transpose(chosen, [0, 3, 1, 2])  # weighs A_c [n, m, h, w]

    def finish(total, activations):
        maps = tf.nn.relu(total)  # [n, K, h, w]
        if (h, w) == (height, width):
            return maps
        n, k = maps.shape[0], maps.shape[1]
        flat = tf.image.resize(tf.reshape(maps, [n * k, h, w, 1]), (height, width), method="bilinear")
        return tf.reshape(flat, [n, k, height, width])

    key = ("scorecam", layer, count)
    maps = masked_scores(request, key, count, prepare, masks, finish, softmax=True, map_shape=(h, w),
                         out_shape=(height, width))
    resolved = {**options, "layer": layer, "max_channels": limit}
    return Result(maps, maps, target_scores(request), resolved, layer=layer)


register(
    Method(
        "scorecam",
        "Score-CAM (Wang et al. 2020): channels weighted by the class probability of the input masked by "
        "each; max_channels=N for Faster-ScoreCAM; the map is the CAM itself",
        compute,
        defaults=dict(DEFAULTS),
        cam=True,
        warn_zero=False,
        check=check,
    )
)
