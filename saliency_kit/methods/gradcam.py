"""Class activation maps on a convolutional layer: Grad-CAM, Grad-CAM++ and guided Grad-CAM.

With ``A`` the layer's activations ``[*s, c]`` (``s`` its spatial axes: ``h, w`` of a ``Conv2D``,
``t`` of a ``Conv1D``, ``d, h, w`` of a ``Conv3D``) and ``g = ∂s/∂A``:

* Grad-CAM (Selvaraju et al. 2017): ``relu(Σ_c w_c A_c)``, ``w_c = mean_s g_c``.
* Grad-CAM++ (Chattopadhay et al. 2018, eq. 19 with the exponential-score closed form):
  ``w_c = Σ_s α · relu(g_c)``, ``α = g² / (2 g² + Σ_s A_c · g³)``.
* Guided Grad-CAM: guided-backprop attributions × the upsampled Grad-CAM map.

Inputs are images ``[B, H, W, C]``, time series ``[B, T, F]`` or volumes ``[B, D, H, W, C]``;
channels-first models (``data_format="channels_first"``) work the same on ``[B, C, ...]``.
``layer=None`` picks the model's configured CAM layer (``ModelSpec.gradcam_layer``) or else the
last layer whose output has the input's rank, looking inside nested models; a layer is named by
its path ``"outer/inner"`` or its bare name, or given as the layer object (recorded as its path).
Maps are resized to the input's length, size or volume by linear interpolation along each axis
(half-pixel centres, as ``tf.image.resize``; see ``Context.resize``); the CAM methods'
attributions are the maps ``[B, K, T]``, ``[B, K, H, W]`` or ``[B, K, D, H, W]`` themselves.
"""

from __future__ import annotations

from typing import Any

from ._common import LAYER_OPTION, RELU_OPTION, TOKEN_OPTIONS, cam_tensors, prepare_cam_layer, spatial_axes
from .base import register

__all__ = ["gradcam", "gradcam_plus_plus", "guided_gradcam", "cam_map"]

OPTIONS = [LAYER_OPTION, RELU_OPTION, *TOKEN_OPTIONS]


def cam_map(ctx: Any, weights: Any, activations: Any, relu: bool) -> Any:
    """``relu(Σ_c weights[n, k, c] · A[n, *s, c])`` resized to the input: ``[n, K, *S]``."""
    from keras import ops

    axes = "xyz"[: len(activations.shape) - 2]
    maps = ops.einsum(f"nkc,n{axes}c->nk{axes}", weights, activations)
    if relu:
        maps = ops.relu(maps)
    return ctx.resize(maps, ctx.spatial_size)


@register(
    "gradcam",
    title="Grad-CAM",
    options=OPTIONS,
    reduce="none",
    cam=True,
    prepare=prepare_cam_layer,
    gradient_channel_weights=True,
    summary="Grad-CAM on a convolutional layer (Selvaraju et al. 2017), upsampled to the input; "
    "the map is the CAM itself",
)
def gradcam(ctx: Any, layer: str, relu: bool, token_grid: Any = None, prefix_tokens: Any = None) -> Any:
    from keras import ops

    activations, g = ctx.layer(layer)
    activations, g = cam_tensors(ctx, activations, g, layer, token_grid, prefix_tokens)  # [n, *s, c], [n, K, *s, c]
    return cam_map(ctx, ops.mean(g, axis=spatial_axes(g, 2)), activations, relu)


@register(
    "gradcam_plus_plus",
    title="Grad-CAM++",
    options=OPTIONS,
    reduce="none",
    cam=True,
    prepare=prepare_cam_layer,
    gradient_channel_weights=True,
    summary="Grad-CAM++ (Chattopadhay et al. 2018), upsampled to the input; the map is the CAM itself",
)
def gradcam_plus_plus(ctx: Any, layer: str, relu: bool, token_grid: Any = None, prefix_tokens: Any = None) -> Any:
    from keras import ops

    activations, g = ctx.layer(layer)
    activations, g = cam_tensors(ctx, activations, g, layer, token_grid, prefix_tokens)
    g2 = ops.square(g)
    total = ops.sum(activations, axis=spatial_axes(activations), keepdims=True)[:, None]  # Σ_s A_c, [n, 1, 1.., c]
    alpha = ops.divide_no_nan(g2, 2.0 * g2 + total * g2 * g)
    return cam_map(ctx, ops.sum(alpha * ops.relu(g), axis=spatial_axes(g, 2)), activations, relu)


@register(
    "guided_gradcam",
    title="Guided Grad-CAM",
    options=OPTIONS,
    prepare=prepare_cam_layer,
    gradient_channel_weights=True,
    warn_zero=False,
    spatial=True,
    summary="guided backprop × upsampled Grad-CAM (Selvaraju et al. 2017); map: max |attribution| over the last axis",
)
def guided_gradcam(ctx: Any, layer: str, relu: bool, token_grid: Any = None, prefix_tokens: Any = None) -> Any:
    from keras import ops

    cam = gradcam(ctx, layer, relu, token_grid, prefix_tokens)  # [n, K, *S]
    guided = ctx.gradients(ctx.inputs, rule="guided")  # [n, K, *S, C] (or [n, K, C, *S])
    cam = ops.expand_dims(ops.cast(cam, guided.dtype), 2 if ctx.channel_axis == 0 else -1)
    return guided * cam
