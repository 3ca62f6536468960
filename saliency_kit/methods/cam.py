"""Class activation maps on a convolutional layer: Grad-CAM, Grad-CAM++ and guided Grad-CAM.

* Grad-CAM (Selvaraju et al. 2017): ``relu(Σ_c w_c A_c)``, ``w_c`` the spatial mean of ``∂s/∂A_c``.
* Grad-CAM++ (Chattopadhay et al. 2018): ``w_c = Σ_hw α · relu(∂s/∂A_c)``,
  ``α = g² / (2 g² + Σ_hw A_c · g³)``.
* Guided Grad-CAM: guided-backprop attributions × the upsampled Grad-CAM map.

``layer=None`` picks the last layer with a 4-D ``[B, h, w, c]`` output, looking inside nested
models (a backbone inside a classifier); a layer is named by its path ``"outer/inner"`` or its
bare name. The layer used is reported in ``Explanation.layer``. CAM maps are upsampled
bilinearly to the input's ``H×W``; their attributions are the maps ``[B, K, H, W]`` themselves.
"""
from __future__ import annotations


from .. import engine
from ..targets import default_cam_layer, find_layer, layer_paths
from ._base import Method, Request, Result, reduce_map, register

DEFAULTS = {"layer": None, "relu": True}


def _layer(request: Request, layer) -> str:
    """The path of the CAM layer, checked to have a 4-D output before any work."""
    if layer is None:
        return default_cam_layer(request.model)
    if not isinstance(layer, str):
        raise ValueError(f"layer must be a layer name or None; received {layer!r}.")
    path = find_layer(request.model, layer)
    found = dict(layer_paths(request.model))[path]
    try:
        shape = tuple(found.output.shape)
    except (AttributeError, ValueError):  # called several times: checked when it runs
        return path
    if len(shape) != 4:
        raise ValueError(
            f"layer {path!r} has output shape {shape}; CAM methods need a 4-D "
            "[batch, height, width, channels] layer (layer=None picks the last one)."
        )
    return path


def _cam(request: Request, options: dict, plus_plus: bool):
    if request.inputs.ndim != 4:
        raise ValueError(
            f"CAM methods need image inputs [B, H, W, C]; received shape {request.inputs.shape}."
        )
    layer = _layer(request, options["layer"])
    maps, scores = engine.cam(
        request.model, request.inputs, request.targets, layer,
        plus_plus=plus_plus, relu=bool(options["relu"]), **request.view_args,
    )
    return layer, maps, scores


def check(request: Request, **options) -> None:
    if request.inputs.ndim != 4:
        raise ValueError(
            f"CAM methods need image inputs [B, H, W, C]; received shape {request.inputs.shape}."
        )
    _layer(request, options["layer"])


def gradcam(request: Request, **options) -> Result:
    layer, maps, scores = _cam(request, options, plus_plus=False)
    return Result(maps, maps, scores, {**options, "layer": layer}, layer=layer)


def gradcam_plus_plus(request: Request, **options) -> Result:
    layer, maps, scores = _cam(request, options, plus_plus=True)
    return Result(maps, maps, scores, {**options, "layer": layer}, layer=layer)


def guided_gradcam(request: Request, **options) -> Result:
    layer, maps, scores = _cam(request, options, plus_plus=False)
    guided = engine.gradients(
        request.model, request.inputs, request.targets, rule="guided", **request.view_args
    ).attributions
    attributions = guided * maps[..., None]
    return Result(
        attributions, reduce_map(attributions, "abs_max"), scores, {**options, "layer": layer}, layer=layer
    )


register(Method("gradcam", "Grad-CAM on a convolutional layer (Selvaraju et al. 2017), upsampled to the input; "
                "the map is the CAM itself", gradcam, dict(DEFAULTS), cam=True, warn_zero=False, check=check))
register(Method("gradcam_plus_plus", "Grad-CAM++ (Chattopadhay et al. 2018), upsampled to the input; "
                "the map is the CAM itself", gradcam_plus_plus, dict(DEFAULTS), cam=True, warn_zero=False, check=check))
register(Method("guided_gradcam", "guided backprop × upsampled Grad-CAM (Selvaraju et al. 2017); "
                "map: max |attribution| over the last axis", guided_gradcam, dict(DEFAULTS), warn_zero=False, check=check))

__all__ = ["gradcam", "gradcam_plus_plus", "guided_gradcam"]
