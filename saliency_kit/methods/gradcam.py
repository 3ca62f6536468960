"""Class activation maps on a convolutional layer: Grad-CAM, Grad-CAM++ and guided Grad-CAM.

With ``A`` the layer's activations ``[h, w, c]`` and ``g = ∂s/∂A``:

* Grad-CAM (Selvaraju et al. 2017): ``relu(Σ_c w_c A_c)``, ``w_c = mean_hw g_c``.
* Grad-CAM++ (Chattopadhay et al. 2018, eq. 19 with the exponential-score closed form):
  ``w_c = Σ_hw α · relu(g_c)``, ``α = g² / (2 g² + Σ_hw A_c · g³)``.
* Guided Grad-CAM: guided-backprop attributions × the upsampled Grad-CAM map.

Channels-first models (``data_format="channels_first"``) work the same on ``[B, C, H, W]``.
``layer=None`` picks the model's configured CAM layer (``ModelSpec.gradcam_layer``) or else the
last layer with a 4-D ``[B, h, w, c]`` output, looking inside nested models; a layer is named by
its path ``"outer/inner"`` or its bare name, or given as the layer object (recorded as its path). Maps are upsampled bilinearly to the input's
``H×W``; the CAM methods' attributions are the maps ``[B, K, H, W]`` themselves.
"""
from __future__ import annotations

from .base import Option, register

OPTIONS = [
    Option("layer", None, type=str, layer=True,
           help="the layer (default: the model's configured one, else the last 4-D layer)"),
    Option("relu", True, help="keep only the positive evidence (the paper's final ReLU)"),
]


def prepare(request, options: dict) -> dict:
    """The layer's path, checked to have a 4-D output, and image inputs — before any work."""
    from ..model.layers import default_cam_layer, find_layer, layer_at

    if request.inputs.ndim != 4:
        raise ValueError(
            f"CAM methods need image inputs [B, H, W, C] (or [B, C, H, W] for channels-first "
            f"models); received shape {request.inputs.shape}."
        )
    layer = options["layer"]
    if layer is None:
        layer = request.default_layer
    if layer is None:
        return {**options, "layer": default_cam_layer(request.model)}
    path = find_layer(request.model, layer)
    found = layer_at(request.model, path)
    try:
        shape = tuple(found.output.shape)
    except (AttributeError, ValueError):  # called several times: checked when it runs
        return {**options, "layer": path}
    if len(shape) != 4:
        raise ValueError(
            f"layer {path!r} has output shape {shape}; CAM methods need a 4-D "
            f"[batch, height, width, channels] layer (layer=None picks the last one); received {path!r}."
        )
    return {**options, "layer": path}


def channels_last(ctx, activations, g):
    """``A [n, h, w, c]`` and ``g [n, K, h, w, c]`` whatever the model's channel axis."""
    from keras import ops

    if ctx.layer_channel_axis == 0:  # channels-first layers: [n, c, h, w] and [n, K, c, h, w]
        return ops.transpose(activations, [0, 2, 3, 1]), ops.transpose(g, [0, 1, 3, 4, 2])
    return activations, g


def cam_map(ctx, weights, activations, relu):
    """``relu(Σ_c weights[n, k, c] · A[n, h, w, c])`` upsampled to the input: ``[n, K, H, W]``."""
    from keras import ops

    maps = ops.einsum("nkc,nhwc->nkhw", weights, activations)
    if relu:
        maps = ops.relu(maps)
    return ctx.resize(maps, ctx.image_size)


def _check_rank(activations, layer):
    if len(activations.shape) != 4:
        raise ValueError(
            f"layer {layer!r} has a {len(activations.shape)}-D output {activations.shape}; "
            f"CAM methods need a 4-D [batch, height, width, channels] layer; received {layer!r}."
        )


@register("gradcam", title="Grad-CAM", options=OPTIONS, reduce="none", cam=True, prepare=prepare,
          summary="Grad-CAM on a convolutional layer (Selvaraju et al. 2017), upsampled to the input; "
                  "the map is the CAM itself")
def gradcam(ctx, layer, relu):
    from keras import ops

    activations, g = ctx.layer(layer)
    _check_rank(activations, layer)
    activations, g = channels_last(ctx, activations, g)  # [n, h, w, c], [n, K, h, w, c]
    return cam_map(ctx, ops.mean(g, axis=(2, 3)), activations, relu)


@register("gradcam_plus_plus", title="Grad-CAM++", options=OPTIONS, reduce="none", cam=True, prepare=prepare,
          summary="Grad-CAM++ (Chattopadhay et al. 2018), upsampled to the input; the map is the CAM itself")
def gradcam_plus_plus(ctx, layer, relu):
    from keras import ops

    activations, g = ctx.layer(layer)
    _check_rank(activations, layer)
    activations, g = channels_last(ctx, activations, g)
    g2 = ops.square(g)
    total = ops.sum(activations, axis=(1, 2), keepdims=True)[:, None]  # Σ_hw A_c, [n, 1, 1, 1, c]
    alpha = ops.divide_no_nan(g2, 2.0 * g2 + total * g2 * g)
    return cam_map(ctx, ops.sum(alpha * ops.relu(g), axis=(2, 3)), activations, relu)


@register("guided_gradcam", title="Guided Grad-CAM", options=OPTIONS, prepare=prepare, warn_zero=False,
          summary="guided backprop × upsampled Grad-CAM (Selvaraju et al. 2017); "
                  "map: max |attribution| over the last axis")
def guided_gradcam(ctx, layer, relu):
    from keras import ops

    cam = gradcam(ctx, layer, relu)  # [n, K, H, W]
    guided = ctx.gradients(ctx.inputs, rule="guided")  # [n, K, H, W, C] (or [n, K, C, H, W])
    cam = ops.expand_dims(ops.cast(cam, guided.dtype), 2 if ctx.channel_axis == 0 else -1)
    return guided * cam
