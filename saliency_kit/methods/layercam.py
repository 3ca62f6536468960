"""LayerCAM (Jiang et al., IEEE TIP 2021).

Grad-CAM with one weight per *position* rather than per channel: each activation is weighted by
the positive part of its own gradient,

    L^k = up( relu( Σ_c relu(∂s_k/∂A_c) ⊙ A_c ) )

so the map keeps the layer's own resolution of detail, and works on early layers where a
channel-averaged gradient blurs away. ``relu=False`` keeps the map's sign (the outer relu).
``up`` is linear resizing to the input's ``H×W`` (length ``T`` of a sequence, ``D×H×W`` of a
volume), as Grad-CAM here. K classes share one forward pass. Attributions are the maps
``[B, K, H, W]`` (``[B, K, T]``, ``[B, K, D, H, W]``).

Anchor: tf-keras-vis ``Layercam``, which upsamples with ``scipy.ndimage.zoom(order=1)``
(corner-aligned; here half-pixel, as ``tf.image.resize`` and Grad-CAM) and normalises each map
to [0, 1] (here it is left as computed). On a layer of the input's own size the unnormalised
maps agree.
"""

from __future__ import annotations

from typing import Any

from ._common import LAYER_OPTION, RELU_OPTION, TOKEN_OPTIONS, cam_tensors, prepare_cam_layer
from .base import register

__all__ = ["layercam"]


@register(
    "layercam",
    title="LayerCAM",
    summary="LayerCAM (Jiang et al. 2021): activations × their positive gradients, summed over channels; "
    "works on early layers; the map is the CAM itself",
    options=[LAYER_OPTION, RELU_OPTION, *TOKEN_OPTIONS],
    reduce="none",
    cam=True,
    prepare=prepare_cam_layer,
)
def layercam(ctx: Any, layer: str, relu: bool, token_grid: Any = None, prefix_tokens: Any = None) -> Any:
    from keras import ops

    activations, g = ctx.layer(layer)  # [n, *s, c], [n, K, *s, c] (channels first: [n, c, *s], [n, K, c, *s])
    activations, g = cam_tensors(
        ctx, ops.cast(activations, "float32"), ops.cast(g, "float32"), layer, token_grid, prefix_tokens
    )
    maps = ops.sum(ops.relu(g) * activations[:, None], axis=-1)  # [n, K, *s]
    if relu:
        maps = ops.relu(maps)
    return ctx.resize(maps, ctx.spatial_size)
