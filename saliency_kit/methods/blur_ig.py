"""Blur integrated gradients (Xu, Venugopalan and Sundararajan, CVPR 2020).

Integrated gradients along the path of Gaussian blurs ``x(σ) = G_σ * x`` from the input
(``σ = 0``) to its blur at ``σ_max``; the attribution is the path integral, with the sign that
makes it the contribution of the detail the blur removes:

    a = − ∫_0^{σ_max} ∂x(σ)/∂σ ⊙ ∂s/∂x|_{x(σ)} dσ
      ≈ − Σ_{i < steps} (σ_{i+1} − σ_i) · (x(σ_i + g) − x(σ_i)) / g ⊙ ∂s/∂x|_{x(σ_i)}

with ``σ_i = i σ_max / steps`` (or ``σ_max √(i / steps)`` with ``sqrt=True``) and ``g =
grad_step`` the finite-difference step of the blur's derivative. ``G_σ`` blurs over the spatial
axes only (H and W of images ``[B, H, W, C]``; T of sequences ``[B, T, F]``), with zero padding
and the kernel truncated at 4σ: exactly ``scipy.ndimage.gaussian_filter(x, (σ, σ, 0),
mode="constant")``. Each blur is two small matrix products ``G_H x G_Wᵀ``; the difference of
two blurs is computed from the difference of their matrices (no cancellation in float32).

Anchor: PAIR's ``saliency.core.BlurIG``. It multiplies a whole batch of steps by the σ-increment
of the batch's *last* step, which is only right when increments are equal: with ``sqrt=True``
and ``batch_size > 1`` its result differs from the formula above (this module follows the
formula; tests compare with PAIR at ``batch_size=1`` there). With ``sqrt=True`` PAIR spaces the
widths as ``√(i σ_max / steps)``, so its widest blur is ``√σ_max``, not ``σ_max``; here ``σ_max``
is always the widest blur (PAIR's ``max_sigma=σ²`` gives this module's ``max_sigma=σ``).
Map: signed sum over the last axis.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._common import require_channels_last
from .base import Option, Request, register

__all__ = ["blur_ig", "gaussian_matrix", "gaussian_matrices", "sigmas", "prepare"]

TRUNCATE = 4.0  # scipy.ndimage.gaussian_filter's default: the kernel ends at 4σ


def gaussian_matrix(size: int, sigma: float) -> np.ndarray:
    """``[size, size]`` float64 ``G`` with ``G @ v`` = ``gaussian_filter1d(v, sigma, mode="constant")``."""
    if sigma <= 1e-15:
        return np.eye(size)
    radius = int(TRUNCATE * sigma + 0.5)
    offsets = np.arange(-radius, radius + 1)
    kernel = np.exp(-0.5 * (offsets / sigma) ** 2)
    kernel /= kernel.sum()
    i, j = np.indices((size, size))
    distance = j - i
    return np.where(np.abs(distance) <= radius, kernel[np.clip(distance + radius, 0, 2 * radius)], 0.0)


def sigmas(steps: int, max_sigma: float, sqrt: bool) -> np.ndarray:
    """``[steps + 1]`` blur widths from 0 to ``max_sigma``."""
    fractions = np.arange(steps + 1) / steps
    return max_sigma * np.sqrt(fractions) if sqrt else max_sigma * fractions


def gaussian_matrices(size: int, widths: Any) -> Any:
    """``[m, size, size]`` float64: :func:`gaussian_matrix` for each of ``widths`` ``[m]`` (a
    tensor), built in the compiled function (no large constants in its graph)."""
    from keras import ops

    widths = ops.cast(widths, "float64")
    distance = ops.cast(ops.arange(size)[None, :] - ops.arange(size)[:, None], "float64")  # j − i
    radius = ops.floor(TRUNCATE * widths + 0.5)[:, None, None]  # [m, 1, 1]
    safe = ops.maximum(widths, 1e-15)[:, None, None]
    inside = ops.cast(ops.abs(distance)[None] <= radius, "float64")
    weights = ops.exp(-0.5 * ops.square(distance[None] / safe)) * inside
    # the kernel's own sum over its 2r + 1 taps (not over a row, which the zero padding cuts)
    taps = ops.cast(ops.arange(-(size - 1), size), "float64")  # every offset a row can hold…
    reach = ops.maximum(radius[:, :, 0], 0.0)
    wide = ops.exp(-0.5 * ops.square(taps[None] / safe[:, :, 0])) * ops.cast(ops.abs(taps)[None] <= reach, "float64")
    far = ops.maximum(reach[:, 0] - (size - 1), 0.0)  # …and the taps beyond it, summed in closed form below
    total = ops.sum(wide, axis=1) + _tail(widths, size, far)
    blur = weights / total[:, None, None]
    identity = ops.cast(ops.eye(size), "float64")[None]
    return ops.where((widths <= 1e-15)[:, None, None], identity, blur)


def _tail(widths: Any, size: Any, far: Any) -> Any:
    """Σ of the Gaussian taps at offsets ``|d| ≥ size`` within the radius (they fall outside
    every row but count in the kernel's normalisation): ``2 Σ_{d=size}^{size+far−1} e^{−d²/2σ²}``."""
    from keras import ops

    longest = 4096  # radius ≤ 4·σ_max + 1: enough for σ ≤ 1000 pixels
    offsets = ops.cast(ops.arange(longest), "float64")[None] + float(size)
    safe = ops.maximum(widths, 1e-15)[:, None]
    keep = ops.cast(offsets < float(size) + far[:, None], "float64")
    return 2.0 * ops.sum(ops.exp(-0.5 * ops.square(offsets / safe)) * keep, axis=1)


def prepare(request: Request, options: dict) -> dict:
    require_channels_last(request, "blur_ig", ranks=None)
    if request.inputs.ndim not in (3, 4):
        raise ValueError(
            "blur_ig blurs over spatial axes: it needs images [B, H, W, C] or sequences [B, T, F]; "
            f"received shape {request.inputs.shape}."
        )
    return {**options, "max_sigma": float(options["max_sigma"]), "grad_step": float(options["grad_step"])}


def _apply(x: Any, mats: Any) -> Any:
    """``x [n, *spatial, C]`` blurred by one matrix per spatial axis ``[m, L, L]`` -> ``[n, m, ...]``."""
    from keras import ops

    if len(mats) == 1:
        return ops.einsum("mat,ntc->nmac", mats[0], x)
    rows = ops.einsum("mah,nhwc->nmawc", mats[0], x)
    return ops.einsum("mbw,nmawc->nmabc", mats[1], rows)


@register(
    "blur_ig",
    title="Blur IG",
    summary="integrated gradients along a path of Gaussian blurs (Xu et al. 2020); map: sum over the last axis",
    options=[
        Option("steps", 50, low=1, help="points on the blur path"),
        Option("max_sigma", 50.0, low=0, low_open=True, help="the widest blur, in pixels"),
        Option("grad_step", 0.01, low=0, low_open=True, help="σ step of the blur's finite-difference derivative"),
        Option("sqrt", False, help="space the blur widths evenly in σ² rather than σ"),
    ],
    reduce="sum",
    signed=True,
    prepare=prepare,
    cost=lambda options: options["steps"],
    spatial=True,
)
def blur_ig(ctx: Any, steps: int, max_sigma: float, grad_step: float, sqrt: bool) -> Any:
    from keras import ops

    x = ctx.inputs
    dtype = x.dtype
    spatial = ctx.shape[:-1]
    widths = sigmas(steps, max_sigma, sqrt)
    increments = np.diff(widths)
    ones = [1] * len(ctx.shape)

    def along_path(i: Any) -> Any:  # steps i [m] -> Δσ_i · ∂x/∂σ ⊙ ∂s/∂x at x(σ_i): [n, m, K, *input]
        here = ops.take(widths[:-1], i)
        blur64 = [gaussian_matrices(size, here) for size in spatial]
        ahead64 = [gaussian_matrices(size, here + grad_step) for size in spatial]
        blur = [ops.cast(g, dtype) for g in blur64]
        change = [ops.cast((a - g) / grad_step, dtype) for a, g in zip(ahead64, blur64)]
        points = _apply(x, blur)
        if len(spatial) == 1:
            derivative = _apply(x, change)
        else:  # ((G_H + g D_H) x (G_W + g D_W)ᵀ − G_H x G_Wᵀ) / g, without cancellation
            derivative = (
                _apply(x, [change[0], blur[1]]) + _apply(x, [blur[0], change[1]]) + grad_step * _apply(x, change)
            )
        step = ops.reshape(ops.cast(ops.take(increments, i), dtype), [1, -1, *ones])
        return (step * derivative)[:, :, None] * ctx.gradients(points)

    return -ctx.sum(steps, along_path)
