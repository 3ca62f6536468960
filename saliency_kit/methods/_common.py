"""What several methods share: baselines, quadrature rules, the CAM layer option, input checks and
the cost of an extended method. Methods import these from here, never from one another.

NumPy and the declarations only (no TensorFlow, no Keras at import), like every method module.
"""
from __future__ import annotations

import numpy as np

from .base import Request, get
from .option import Option

__all__ = [
    "RULES",
    "quadrature",
    "baseline_array",
    "LAYER_OPTION",
    "RELU_OPTION",
    "prepare_cam_layer",
    "check_cam_rank",
    "channels_last",
    "require_channels_last",
    "base_cost",
]

# -- path integrals ----------------------------------------------------------------------------
RULES = ("riemann_trapezoid", "riemann_left", "riemann_right", "riemann_middle", "gausslegendre")


def quadrature(rule: str, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """``(alphas, weights)``: ``steps`` points on [0, 1] and weights summing to 1.

    Riemann left/right/middle: the left ends, right ends or midpoints of ``steps`` equal
    intervals, weight ``1/steps`` each. Trapezoid: ``steps`` evenly spaced points including both
    ends (``steps ≥ 2``), end weights halved. Gauss–Legendre: the Legendre nodes mapped to [0, 1].
    """
    if rule not in RULES:
        raise ValueError(f"rule must be one of {', '.join(map(repr, RULES))}; received {rule!r}.")
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)):
        raise TypeError(f"steps must be a positive int; received {steps!r}.")
    if steps < 1:
        raise ValueError(f"steps must be a positive int; received {steps!r}.")
    if rule == "riemann_trapezoid":
        if steps < 2:
            raise ValueError("rule='riemann_trapezoid' needs steps >= 2; received steps=1.")
        alphas = np.linspace(0.0, 1.0, steps)
        weights = np.full(steps, 1.0 / (steps - 1))
        weights[[0, -1]] /= 2.0
    elif rule == "gausslegendre":
        nodes, weights = np.polynomial.legendre.leggauss(steps)
        alphas, weights = (nodes + 1.0) / 2.0, weights / 2.0
    else:
        offset = {"riemann_left": 0.0, "riemann_right": 1.0, "riemann_middle": 0.5}[rule]
        alphas = (np.arange(steps) + offset) / steps
        weights = np.full(steps, 1.0 / steps)
    return alphas, weights


def baseline_array(baseline, inputs: np.ndarray) -> np.ndarray:
    """``baseline`` broadcast to one input of ``inputs [B, ...]``, in its dtype; finite."""
    shape = inputs.shape[1:]
    try:
        value = np.broadcast_to(np.asarray(baseline, dtype=np.float64), shape)
    except (ValueError, TypeError):
        raise ValueError(
            f"baseline must be a number or an array broadcastable to one input {shape}; "
            f"received {np.shape(baseline)}."
        ) from None
    if not np.all(np.isfinite(value)):
        raise ValueError(f"baseline must be finite; received one with NaN or infinite values ({np.ravel(baseline)[:4]}...).")
    return np.ascontiguousarray(value.astype(inputs.dtype))


# -- class activation maps ---------------------------------------------------------------------
LAYER_OPTION = Option("layer", None, type=str, layer=True,
                      help="the layer (default: the model's configured one, else the last 4-D layer)")
RELU_OPTION = Option("relu", True, help="keep only the positive evidence (the paper's final ReLU)")


def prepare_cam_layer(request: Request, options: dict) -> dict:
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


def check_cam_rank(activations, layer: str) -> None:
    """``ValueError`` unless a layer's ``activations`` are 4-D ``[n, h, w, c]``."""
    if len(activations.shape) != 4:
        raise ValueError(
            f"layer {layer!r} has a {len(activations.shape)}-D output {activations.shape}; "
            f"CAM methods need a 4-D [batch, height, width, channels] layer; received {layer!r}."
        )


def channels_last(ctx, activations, g):
    """``A [n, h, w, c]`` and ``g [n, K, h, w, c]`` whatever the model's channel axis."""
    from keras import ops

    if ctx.channel_axis == 0:  # channels-first: [n, c, h, w] and [n, K, c, h, w]
        return ops.transpose(activations, [0, 2, 3, 1]), ops.transpose(g, [0, 1, 3, 4, 2])
    return activations, g


# -- inputs ------------------------------------------------------------------------------------
def require_channels_last(request: Request, method: str, ranks=(4,), shape_text="image inputs [B, H, W, C]") -> None:
    """``ValueError`` unless the inputs are channels-last and of one of ``ranks`` (for methods that
    work on image axes: blurs, masks, regions); ``ranks=None`` checks the channel axis only."""
    if request.channel_axis == 0:
        raise ValueError(f"{method} works on channels-last inputs; received a channels-first model "
                         "(convert it, or use gradient, integrated_gradients or a CAM method).")
    if ranks is not None and request.inputs.ndim not in ranks:
        raise ValueError(f"{method} needs {shape_text}; received shape {request.inputs.shape}.")


# -- methods built on another ------------------------------------------------------------------
def base_cost(options: dict, option: str = "base") -> int:
    """Model evaluations per input and target of the method named by ``options[option]``."""
    base = get(options[option])
    return base.cost(options) if base.cost else 1
