"""What several methods share: baselines, quadrature rules, the CAM layer option, input checks and
the cost of an extended method. Methods import these from here, never from one another.

NumPy and the declarations only (no TensorFlow, no Keras at import), like every method module.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

from ..model.placed import Placed
from .base import Request, get
from .option import Option

__all__ = [
    "RULES",
    "quadrature",
    "baseline_array",
    "input_shaped",
    "LAYER_OPTION",
    "TOKEN_OPTIONS",
    "RELU_OPTION",
    "start_option",
    "CAM_RANKS",
    "prepare_cam_layer",
    "check_cam_rank",
    "cam_tensors",
    "token_grid",
    "tokens_on_grid",
    "reads_patch_tokens",
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
#: How a transformer's token layer ``[B, N, C]`` of image inputs splits into prefix tokens and the patch grid.
TOKEN_OPTIONS = (
    Option(
        "token_grid",
        None,
        type=int,
        array=True,
        help="a token layer's patch grid (h, w), an int for a square one (default: from the model's patch "
        "embedding and the input size)",
    ),
    Option(
        "prefix_tokens",
        None,
        type=int,
        low=0,
        help="a token layer's leading non-patch tokens: class, distillation, registers (default: inferred)",
    ),
)


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
    """The layer's path, checked to have an output of the input's rank (or, on images, to be a
    transformer's token layer ``[B, N, C]``, its ``token_grid`` and ``prefix_tokens`` resolved),
    and inputs that are sequences ``[B, T, F]``, images ``[B, H, W, C]`` or volumes
    ``[B, D, H, W, C]`` (channels first for channels-first models) — before any work."""
    from ..model.walker import default_cam_layer, find_layer, spatial_output_text

    rank = request.inputs.ndim
    if rank not in CAM_RANKS:
        raise ValueError(
            f"CAM methods need image inputs [B, H, W, C], sequences [B, T, F] or volumes [B, D, H, W, C] "
            f"(channels first for channels-first models); received shape {request.inputs.shape}."
        )
    layer = options["layer"]
    if layer is None:
        layer = request.default_layer
    path = default_cam_layer(request.model, rank) if layer is None else find_layer(request.model, layer)
    options = {**options, "layer": path}
    shape = _output_shape(request.model, request.inputs[:1], path)
    if shape is None:  # called several times: checked when it runs
        return {**options, **_token_layout(request, None, options)} if rank == 4 else options
    if rank == 4 and len(shape) == 3:  # [B, N, C]: a transformer's tokens
        layout = _token_layout(request, shape[1], options)
        if not reads_patch_tokens(request.model, request.inputs[:1], path, layout["prefix_tokens"]):
            raise ValueError(_unread_patches_text(request.model, path))
        return {**options, **layout}
    if len(shape) != rank:
        raise ValueError(
            f"layer {path!r} has output shape {shape}; CAM methods on inputs of shape "
            f"{request.inputs.shape} need a {spatial_output_text(rank)} layer (layer=None picks the last "
            f"one); received {path!r}."
        )
    if options.get("token_grid") is not None or options.get("prefix_tokens") is not None:
        raise ValueError(
            f"token_grid and prefix_tokens apply to a transformer's token layer [B, N, C]; layer {path!r} has "
            f"output shape {shape}; received token_grid={options.get('token_grid')!r}, "
            f"prefix_tokens={options.get('prefix_tokens')!r}."
        )
    return options


def _token_layout(request: Request, tokens: Any, options: dict) -> dict:
    """``{"token_grid": (h, w), "prefix_tokens": p}`` of a token layer of ``tokens`` tokens on
    image inputs: the options given, the rest inferred — the grid from the model's patch
    embedding (:func:`~saliency_kit.model.walker.patch_size`) and the input size, else from the
    tokens and the image's aspect ratio (:func:`token_grid`) — checked: ``h · w + p == tokens``."""
    from ..model.walker import patch_size

    grid, prefix = options.get("token_grid"), options.get("prefix_tokens")
    if grid is not None:
        sizes = (grid, grid) if isinstance(grid, (int, np.integer)) else tuple(grid)
        if len(sizes) != 2 or not all(isinstance(v, (int, np.integer)) and v > 0 for v in sizes):
            raise ValueError(f"token_grid must be a positive int or a pair (h, w) of them; received {grid!r}.")
        grid = (int(sizes[0]), int(sizes[1]))
    if tokens is None:  # unknown until it runs
        return {"token_grid": grid, "prefix_tokens": prefix}
    height, width = request.inputs.shape[2:4] if request.channel_axis == 0 else request.inputs.shape[1:3]
    if grid is None:
        patch = patch_size(request.model)
        if patch is not None and (height // patch[0]) * (width // patch[1]) <= tokens - (prefix or 0):
            grid = (height // patch[0], width // patch[1])
    if grid is None:
        prefix, *grid = token_grid(tokens, height, width, prefix)
    if prefix is None:
        prefix = max(tokens - grid[0] * grid[1], 0)
    if prefix < 0 or grid[0] * grid[1] + prefix != tokens:
        raise ValueError(
            f"a token_grid of {grid[0]}×{grid[1]} patches and {prefix} prefix tokens make "
            f"{grid[0] * grid[1] + prefix} tokens, but the layer has {tokens}; received token_grid="
            f"{options.get('token_grid')!r}, prefix_tokens={options.get('prefix_tokens')!r}."
        )
    return {"token_grid": tuple(grid), "prefix_tokens": prefix}


def _output_shape(model: Any, x: np.ndarray, path: str) -> tuple | None:
    """The output shape of the layer at ``path``: its graph node's, or for a layer inside a custom
    layer (no graph node knows it) from a forward pass of ``model`` on one input ``x [1, ...]``;
    ``None`` for a layer called several times or a model that input alone cannot run (settled
    when the method runs)."""
    from keras import ops

    from ..model.scores import ScoreView
    from ..model.walker import layer_at, walk

    try:
        return tuple(layer_at(model, path).output.shape)
    except (AttributeError, ValueError):
        if any(visit.path == path and visit.in_graph for visit in walk(model)):
            return None
    known = _TAPPED_SHAPES.setdefault(model, {})
    if (path, x.shape[1:]) not in known:
        try:
            _, taken = ScoreView(model, "output").raw(ops.convert_to_tensor(x), (path,), strip=False)
        except (ValueError, TypeError):  # not one input, or not one call: the method's own run says why
            return None
        known[(path, x.shape[1:])] = (None, *taken[path].shape[1:])
    return known[(path, x.shape[1:])]


_TAPPED_SHAPES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> {(path, input shape): shape}


_PATCH_READING: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> {(path, prefix): reads}


def reads_patch_tokens(model: Any, x: np.ndarray, path: str, prefix: int) -> bool:
    """Whether ``model``'s outputs depend on the patch tokens of its token layer at ``path``
    (``[1, N, C]`` after ``prefix`` prefix tokens): the model run on one input ``x [1, H, W, C]``
    with noise added to those tokens gives outputs that differ from its own. Where they do not
    (a class-token classifier's last block output: nothing after it reads a patch token), every
    gradient there is exactly zero and so is every CAM map. Forward passes only, once per model
    and layer; ``True`` when the layer cannot be swapped (the method's own run reports why)."""
    from keras import ops

    from ..model.scores import ScoreView

    known = _PATCH_READING.setdefault(model, {})
    if (path, prefix) in known:
        return known[(path, prefix)]
    try:
        view = ScoreView(model, "output")
        values, taken = view.raw(ops.convert_to_tensor(x), (path,), strip=False)
        tokens = np.asarray(ops.convert_to_numpy(taken[path]))
        noise = np.random.default_rng(0).normal(size=tokens.shape).astype(tokens.dtype)
        noise[:, :prefix] = 0.0
        shifted, _ = view.raw(
            Placed([ops.convert_to_tensor(x)], {path: ops.convert_to_tensor(tokens + noise)}), (), False
        )
        before = [np.asarray(ops.convert_to_numpy(v)) for v in _leaves(values)]
        after = [np.asarray(ops.convert_to_numpy(v)) for v in _leaves(shifted)]
        reads = any(not np.array_equal(b, a) for b, a in zip(before, after))
    except (ValueError, TypeError, KeyError):
        return True
    known[(path, prefix)] = reads
    return reads


def _leaves(values: Any) -> list:
    """The tensors of a model's outputs (any structure), flattened."""
    import keras

    return list(keras.tree.flatten(values))


def _unread_patches_text(model: Any, path: str) -> str:
    """Why the token layer at ``path`` is refused, and a layer to use instead."""
    from ..model.walker import attention_input_layer

    works = attention_input_layer(model)
    instead = (
        f"use layer={works!r}, the input of the last block's attention (layer=None picks it)"
        if works and works != path
        else "use a layer before the last attention"
    )
    return (
        f"layer {path!r}: the model's outputs do not depend on its patch tokens (a classifier reading its class "
        f"token reads no patch token after the last attention), so its gradient there is zero and every CAM map "
        f"would be zero; {instead}; received layer={path!r}."
    )


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


def token_grid(tokens: int, height: int, width: int, prefix: int | None = None) -> tuple[int, int, int]:
    """``(prefix, h, w)``: how ``tokens`` transformer tokens of an image ``height × width`` split
    into prefix tokens (class, distillation, registers) and an ``h × w`` patch grid of the image's
    aspect ratio, the fewest prefix tokens first (exactly ``prefix`` when given). ``ValueError``
    when no split fits."""
    for count in range(tokens) if prefix is None else (prefix,):
        patches = tokens - count
        h = round((patches * height / width) ** 0.5) if patches > 0 else 0
        if h > 0 and patches % h == 0 and h * width == (patches // h) * height:
            return count, h, patches // h
    raise ValueError(
        f"cannot lay {tokens} tokens out on a patch grid of an image {height}×{width}"
        f"{'' if prefix is None else f' after {prefix} prefix tokens'}; CAM methods need a layer whose tokens "
        "are the image's patches (and prefix tokens): give token_grid=(h, w) and prefix_tokens."
    )


def tokens_on_grid(ctx: Any, tensor: Any, lead: int, grid: Any = None, prefix: int | None = None) -> Any:
    """A transformer layer's tokens ``[*lead axes, N, c]`` as ``[*lead axes, h, w, c]``: its
    ``prefix`` leading tokens dropped, its patch tokens on the ``grid`` ``(h, w)`` (both inferred
    by :func:`token_grid` when None)."""
    from keras import ops

    height, width = (int(size) for size in ctx.spatial_size)
    if grid is None:
        prefix, *grid = token_grid(int(tensor.shape[lead]), height, width, prefix)
    elif prefix is None:
        prefix = int(tensor.shape[lead]) - grid[0] * grid[1]
    shape = tuple(tensor.shape)
    patches = tensor[(slice(None),) * lead + (slice(prefix, None),)]
    return ops.reshape(patches, (-1, *shape[1:lead], grid[0], grid[1], shape[-1]))


def cam_tensors(
    ctx: Any, activations: Any, g: Any, layer: str, token_grid: Any = None, prefix_tokens: int | None = None
) -> Any:
    """A CAM layer's ``A [n, *s, c]`` (and ``g [n, K, *s, c]`` unless ``g`` is None), checked to
    have the inputs' rank, channels last; a transformer's tokens ``[n, N, c]`` of image inputs
    are laid out on their patch grid ``[n, h, w, c]`` (``token_grid`` ``(h, w)`` after
    ``prefix_tokens`` leading tokens; inferred when None)."""
    if len(activations.shape) == 3 and len(ctx.inputs.shape) == 4:
        activations = tokens_on_grid(ctx, activations, 1, token_grid, prefix_tokens)
        return activations if g is None else (activations, tokens_on_grid(ctx, g, 2, token_grid, prefix_tokens))
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
