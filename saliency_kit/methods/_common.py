"""What several methods share: baselines, quadrature rules, the CAM layer option, input checks and
the cost of an extended method. Methods import these from here, never from one another.

NumPy and the declarations only (no TensorFlow, no Keras at import), like every method module.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .base import Request, get
from .option import Option

__all__ = [
    "RULES",
    "quadrature",
    "baseline_array",
    "input_shaped",
    "LAYER_OPTION",
    "RELU_OPTION",
    "start_option",
    "CAM_RANKS",
    "prepare_cam_layer",
    "check_cam_rank",
    "cam_tensors",
    "token_grid",
    "tokens_on_grid",
    "channels_last",
    "spatial_axes",
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


def baseline_array(baseline: Any, inputs: np.ndarray) -> np.ndarray:
    """``baseline`` broadcast to one row of ``inputs [B, ...]`` (what is explained: a model input,
    several packed, or an inner layer's output), in its dtype; finite."""
    return input_shaped(baseline, inputs, "baseline")


def input_shaped(value: Any, inputs: np.ndarray, name: str, *, non_negative: bool = False) -> np.ndarray:
    """Option ``name``'s ``value`` broadcast to one row of ``inputs [B, ...]``, in its dtype;
    finite (and ``≥ 0`` with ``non_negative``), else a ``ValueError`` saying what was expected."""
    shape = inputs.shape[1:]
    try:
        array = np.broadcast_to(np.asarray(value, dtype=np.float64), shape)
    except (ValueError, TypeError):
        raise ValueError(
            f"{name} must be a number or an array broadcastable to one row of what is explained {shape} (an "
            f"input, or the layer's output with attribute_to=LAYER); received {np.shape(value)}."
        ) from None
    if not np.all(np.isfinite(array)) or (non_negative and np.any(array < 0)):
        kind = "finite and non-negative" if non_negative else "finite"
        raise ValueError(f"{name} must be {kind}; received {np.ravel(value)[:4]}...")
    return np.ascontiguousarray(array.astype(inputs.dtype))


# -- class activation maps ---------------------------------------------------------------------
LAYER_OPTION = Option(
    "layer",
    None,
    type=str,
    layer=True,
    help="the layer (default: the model's configured one, else the last layer whose output has the input's rank)",
)
RELU_OPTION = Option("relu", True, help="keep only the positive evidence (the paper's final ReLU)")


def start_option(what: str) -> Option:
    """The ``baseline`` option of a method that starts from a point in the space of what it
    explains (``what``: "the path's start", "the reference"): a number or an array, default 0."""
    return Option(
        "baseline",
        0.0,
        array=True,
        help=f"{what}: a number or an array broadcastable to one row of what is explained (an input; with "
        "attribute_to=LAYER, the layer's output)",
    )


#: Input ranks (batch axis included) CAM methods explain: sequences, images, volumes.
CAM_RANKS = (3, 4, 5)


def prepare_cam_layer(request: Request, options: dict) -> dict:
    """The layer's path, checked to have an output of the input's rank, and inputs that are
    sequences ``[B, T, F]``, images ``[B, H, W, C]`` or volumes ``[B, D, H, W, C]`` (channels
    first for channels-first models) — before any work."""
    from ..model.walker import default_cam_layer, find_layer, layer_at, spatial_output_text

    rank = request.inputs.ndim
    if rank not in CAM_RANKS:
        raise ValueError(
            f"CAM methods need image inputs [B, H, W, C], sequences [B, T, F] or volumes [B, D, H, W, C] "
            f"(channels first for channels-first models); received shape {request.inputs.shape}."
        )
    layer = options["layer"]
    if layer is None:
        layer = request.default_layer
    if layer is None:
        return {**options, "layer": default_cam_layer(request.model, rank)}
    path = find_layer(request.model, layer)
    found = layer_at(request.model, path)
    try:
        shape = tuple(found.output.shape)
    except (AttributeError, ValueError):  # called several times: checked when it runs
        return {**options, "layer": path}
    if len(shape) != rank and not (rank == 4 and len(shape) == 3):  # [B, N, C]: a transformer's tokens
        raise ValueError(
            f"layer {path!r} has output shape {shape}; CAM methods on inputs of shape "
            f"{request.inputs.shape} need a {spatial_output_text(rank)} layer (layer=None picks the last "
            f"one); received {path!r}."
        )
    return {**options, "layer": path}


def check_cam_rank(ctx: Any, activations: Any, layer: str) -> None:
    """``ValueError`` unless a layer's ``activations`` have the rank of the inputs (``[n, t, c]``,
    ``[n, h, w, c]`` or ``[n, d, h, w, c]``)."""
    from ..model.walker import spatial_output_text

    rank = len(ctx.inputs.shape)
    if len(activations.shape) != rank:
        raise ValueError(
            f"layer {layer!r} has a {len(activations.shape)}-D output {tuple(activations.shape)}; "
            f"CAM methods on these inputs need a {spatial_output_text(rank)} layer; received {layer!r}."
        )


def token_grid(tokens: int, height: int, width: int) -> tuple[int, int, int]:
    """``(prefix, h, w)``: how ``tokens`` transformer tokens of an image ``height × width`` split
    into prefix tokens (class, distillation, registers) and an ``h × w`` patch grid of the image's
    aspect ratio, the fewest prefix tokens first. ``ValueError`` when no split fits."""
    for prefix in range(tokens):
        patches = tokens - prefix
        h = round((patches * height / width) ** 0.5)
        if h > 0 and patches % h == 0 and h * width == (patches // h) * height:
            return prefix, h, patches // h
    raise ValueError(
        f"cannot lay {tokens} tokens out on a patch grid of an image {height}×{width}; "
        "CAM methods need a layer whose tokens are the image's patches (and prefix tokens)."
    )


def tokens_on_grid(ctx: Any, tensor: Any, lead: int) -> Any:
    """A transformer layer's tokens ``[*lead axes, N, c]`` as ``[*lead axes, h, w, c]``: its
    prefix tokens dropped, its patch tokens on the patch grid (see :func:`token_grid`)."""
    from keras import ops

    height, width = (int(size) for size in ctx.spatial_size)
    prefix, h, w = token_grid(int(tensor.shape[lead]), height, width)
    shape = tuple(tensor.shape)
    return ops.reshape(tensor[(slice(None),) * lead + (slice(prefix, None),)], (-1, *shape[1:lead], h, w, shape[-1]))


def cam_tensors(ctx: Any, activations: Any, g: Any, layer: str) -> Any:
    """A CAM layer's ``A [n, *s, c]`` (and ``g [n, K, *s, c]`` unless ``g`` is None), checked to
    have the inputs' rank, channels last; a transformer's tokens ``[n, N, c]`` of image inputs
    are laid out on their patch grid ``[n, h, w, c]``."""
    if len(activations.shape) == 3 and len(ctx.inputs.shape) == 4:
        activations = tokens_on_grid(ctx, activations, 1)
        return activations if g is None else (activations, tokens_on_grid(ctx, g, 2))
    check_cam_rank(ctx, activations, layer)
    return channels_last(ctx, activations, g)


def channels_last(ctx: Any, activations: Any, g: Any = None) -> Any:
    """``A [n, *s, c]`` (and ``g [n, K, *s, c]``) whatever the model's channel axis; ``s`` the
    layer's one to three spatial axes."""
    from keras import ops

    if ctx.layer_channel_axis != 0:
        return activations if g is None else (activations, g)
    rank = len(activations.shape)  # channels-first: [n, c, *s] and [n, K, c, *s]
    activations = ops.transpose(activations, [0, *range(2, rank), 1])
    if g is None:
        return activations
    return activations, ops.transpose(g, [0, 1, *range(3, rank + 1), 2])


def spatial_axes(tensor: Any, lead: int = 1) -> tuple:
    """The spatial axes of a channels-last ``tensor`` ``[*lead axes, *s, c]``."""
    return tuple(range(lead, len(tensor.shape) - 1))


# -- inputs ------------------------------------------------------------------------------------
def require_channels_last(
    request: Request, method: str, ranks: tuple[int, ...] | None = (4,), shape_text: str = "image inputs [B, H, W, C]"
) -> None:
    """``ValueError`` unless the inputs are channels-last and of one of ``ranks`` (for methods that
    work on image axes: blurs, masks, regions); ``ranks=None`` checks the channel axis only."""
    if request.channel_axis == 0:
        raise ValueError(
            f"{method} works on channels-last inputs; received a channels-first model "
            "(convert it, or use gradient, integrated_gradients or a CAM method)."
        )
    if ranks is not None and request.inputs.ndim not in ranks:
        raise ValueError(f"{method} needs {shape_text}; received shape {request.inputs.shape}.")


# -- methods built on another ------------------------------------------------------------------
def base_cost(options: dict, option: str = "base") -> int:
    """Model evaluations per input and target of the method named by ``options[option]``."""
    base = get(options[option])
    return base.cost(options) if base.cost else 1
