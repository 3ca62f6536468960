"""Perturbation curves: the model's score (or prediction) as the map's top features are removed in order.

Definitions and defaults are Quantus 0.6.0's (differences are said in each docstring):

- :func:`road` — Rong et al. (2022): the model's accuracy as the top pixels are imputed by noisy
  linear imputation (:func:`noisy_linear_imputation`, so the removed pixels are not out of
  distribution). Lower is better (MoRF).
- :func:`region_perturbation` — Samek et al. (2017): the score lost as the map's regions are removed
  in order; its mean (AOPC) is the score. Higher is better.
- :func:`pixel_flipping` — Bach et al. (2015): the score as features are removed one by one in
  order; its area is the score. Lower is better.

Scores are the softmax of the model's logits by default (Quantus' ``softmax=True`` for these
metrics); pass ``softmax=False`` to score the logits.

The caveat of :mod:`.faithfulness` holds here too (every value depends on what "removed" means),
and so does the way inputs are perturbed and scored (in NumPy, through the engine's compiled,
batched forward pass, draws seeded per input).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
from scipy.sparse import csc_matrix, lil_matrix
from scipy.sparse.linalg import spsolve

from ._common import baseline_values, check_float, check_int, preprocess
from .draws import rng
from .faithfulness import cumulative_rows, image_blocks
from .registry import metric
from .scoring import Job, forward, prebuilt, predicted, score_jobs
from .shared import Shared
from .views import flat_elements, image_channel_axis, spatial_shape, spatial_to_elements

if TYPE_CHECKING:
    import keras

__all__ = ["road", "region_perturbation", "pixel_flipping", "noisy_linear_imputation"]


def noisy_linear_imputation(image: np.ndarray, indices: np.ndarray, noise: np.ndarray) -> np.ndarray:
    """Rong et al.'s imputation of the pixels ``indices`` (flat in ``H·W``) of a channels-first
    ``image [C, H, W]``: each imputed pixel is the weighted mean of its 8 neighbours (1/6 for the 4
    direct ones, 1/12 for the diagonals), solved as one sparse linear system, plus ``noise [C, n]``.
    """
    channels, height, width = image.shape
    flat = image.reshape(channels, -1).astype(np.float64)
    indices = np.asarray(indices, dtype=np.int64)
    n = len(indices)
    if n == 0:
        return image.astype(np.float64)
    known = np.ones(height * width, dtype=bool)
    known[indices] = False
    variable = np.zeros(height * width, dtype=np.int64)
    variable[indices] = np.arange(n)
    system = lil_matrix((n, n))
    rhs = np.zeros((n, channels))
    weight_sum = np.ones(n)
    rows, cols = indices // width, indices % width
    for (dr, dc), weight in _NEIGHBOURS:
        r, c = rows + dr, cols + dc
        valid = (r >= 0) & (c >= 0) & (r < height) & (c < width)
        ids = np.flatnonzero(valid)
        neighbour = r[valid] * width + c[valid]
        outside = known[neighbour]
        rhs[ids[outside]] -= weight * flat[:, neighbour[outside]].T
        system[ids[~outside], variable[neighbour[~outside]]] = weight
        weight_sum[~valid] -= weight
    system[np.arange(n), np.arange(n)] = -weight_sum
    solution = np.asarray(spsolve(csc_matrix(system), rhs)).reshape(n, channels).T
    out = flat.copy()
    out[:, indices] = solution + noise
    return out.reshape(image.shape)


_NEIGHBOURS = (
    ((1, 1), 1 / 12),
    ((0, 1), 1 / 6),
    ((-1, 1), 1 / 12),
    ((1, -1), 1 / 12),
    ((0, -1), 1 / 6),
    ((-1, -1), 1 / 12),
    ((1, 0), 1 / 6),
    ((-1, 0), 1 / 6),
)


@metric("road", family="faithfulness", higher_is_better=False)
def road(
    model: keras.Model,
    inputs: Any,
    explanation_or_method: Any = "gradient",
    targets: Any = "top1",
    *,
    percentages: Any = tuple(range(1, 100, 2)),
    noise: float = 0.01,
    seed: int = 0,
    batch_size: int = 32,
    **options: Any,
) -> dict:
    """ROAD, most relevant first: whether the model still predicts the target after the top ``p`` %
    pixels of the map are imputed (noisy linear imputation, all channels, ``noise`` the standard
    deviation of the added Gaussian noise).

    Returns:
        ``{"percentages": [P], "curve": [B, K, P]`` (1.0 while the arg-max class is still the target),
        ``"score": [B, K]`` the curve's mean; lower is better (the map found what the model needs).

    Quantus 0.6.0 ranks the channels-first elements but imputes pixels, so it fails on inputs with
    more than one channel; here pixels are ranked by the pixel map and imputed in every channel, as
    in Rong et al. The count at ``p`` % is ``int(H·W·p/100)`` (Quantus'). Image inputs only.

    Shared options (:class:`~saliency_kit.evaluate.shared.Shared`): ``normalise=True``,
    ``abs=False``, ``score="logits"``, ``softmax=True``.
    """
    percentages = [check_float("percentages", p) for p in np.atleast_1d(percentages)]
    noise = check_float("noise", noise)
    shared = Shared.read(
        options, seed=seed, batch_size=batch_size, normalise=True, abs=False, score="logits", softmax=True
    )
    scored = shared.prepare(model, inputs, explanation_or_method, targets)
    height, width = spatial_shape(scored, "road")
    pixels = preprocess(scored.pixels, normalise=shared.normalise, absolute=shared.absolute).reshape(
        *scored.pixels.shape[:2], -1
    )
    axis = 1 + image_channel_axis(scored, "road") % 3
    channels_first = np.moveaxis(scored.x.astype(np.float64), axis, 1)
    curve = np.zeros((*pixels.shape[:2], len(percentages)))
    for b in range(len(scored.x)):
        generator = rng(seed, "road", b)
        imputed = []
        for k in range(pixels.shape[1]):
            order = np.argsort(-pixels[b, k], kind="stable")
            for p in percentages:
                chosen = order[: int(height * width * p / 100)]
                draw = noise * generator.standard_normal((channels_first.shape[1], len(chosen)))
                imputed.append(noisy_linear_imputation(channels_first[b], chosen, draw))
        rows = np.moveaxis(np.stack(imputed), 1, axis)
        columns = np.repeat(np.arange(pixels.shape[1]), len(percentages))[:, None]  # row (k, p) reads target k
        still = (
            predicted(scored, rows, np.full(len(rows), b), columns, "road")[:, 0] == scored.targets[b][columns[:, 0]]
        )
        curve[b] = still.reshape(pixels.shape[1], len(percentages))
    return {"percentages": np.asarray(percentages), "curve": curve, "score": curve.mean(axis=-1)}


@metric("region_perturbation", family="faithfulness", higher_is_better=True)
def region_perturbation(
    model: keras.Model,
    inputs: Any,
    explanation_or_method: Any = "gradient",
    targets: Any = "top1",
    *,
    patch_size: int = 8,
    order: str = "morf",
    regions_evaluation: int = 100,
    seed: int = 0,
    batch_size: int = 32,
    **options: Any,
) -> dict:
    """Samek et al.'s region perturbation: the squares of ``patch_size`` (Quantus' padded grid) are
    ranked by their summed map (``order="morf"`` most relevant first, ``"lerf"`` least, ``"random"``)
    and replaced by the baseline one after another, cumulatively, for ``regions_evaluation`` steps.

    Returns:
        ``{"curve": [B, K, R]`` the score lost ``f(x) − f(x_j)`` after ``j`` regions, ``"aopc": [B, K]``
        its mean (the area over the perturbation curve), ``"score"``: the same as ``aopc``} (MoRF:
        higher is better). Image inputs only.

    Shared options (:class:`~saliency_kit.evaluate.shared.Shared`): ``perturb_baseline="black"``,
    ``normalise=True``, ``abs=False``, ``score="logits"``, ``softmax=True``.
    """
    patch_size, regions_evaluation = (
        check_int("patch_size", patch_size),
        check_int("regions_evaluation", regions_evaluation),
    )
    if order not in ("morf", "lerf", "random"):
        raise ValueError(f"order must be 'morf', 'lerf' or 'random'; received {order!r}.")
    shared = Shared.read(
        options,
        seed=seed,
        batch_size=batch_size,
        perturb_baseline="black",
        normalise=True,
        abs=False,
        score="logits",
        softmax=True,
    )
    scored = shared.prepare(model, inputs, explanation_or_method, targets)
    height, width = spatial_shape(scored, "region_perturbation")
    pixels = preprocess(scored.pixels, normalise=shared.normalise, absolute=shared.absolute)
    blocks = image_blocks(height, width, patch_size)
    masks = np.zeros((len(blocks), height, width), dtype=bool)
    for i, (r, c) in enumerate(blocks):
        masks[i, r, c] = True
    element_masks = spatial_to_elements(masks, scored).reshape(len(blocks), -1)
    x = scored.x.astype(np.float64)
    clean = forward(scored, scored.x, np.arange(len(x)))
    steps = min(regions_evaluation, len(blocks))
    jobs, keys = [], []
    for b in range(len(x)):
        generator = rng(seed, "region_perturbation", b)
        for k in range(pixels.shape[1]):
            sums = (masks * pixels[b, k][None]).reshape(len(blocks), -1).sum(-1)
            ranking = (
                np.argsort(-sums, kind="stable")
                if order == "morf"
                else np.argsort(sums, kind="stable")
                if order == "lerf"
                else generator.permutation(len(blocks))
            )[:steps]
            values = np.stack(
                [baseline_values(shared.perturb_baseline, x[b].ravel(), x[b].size, generator) for _ in range(steps)]
            )
            rows = cumulative_rows(x[b].ravel(), element_masks[ranking], values)
            jobs.append(Job(steps, prebuilt(rows), b, np.array([k])))
            keys.append((b, k))
    curve = np.zeros((*pixels.shape[:2], steps))
    for (b, k), lost in zip(keys, score_jobs(scored, jobs)):
        curve[b, k] = clean[b, k] - lost[:, 0]
    aopc = curve.mean(axis=-1)
    return {"curve": curve, "aopc": aopc, "score": aopc}


@metric("pixel_flipping", family="faithfulness", higher_is_better=False)
def pixel_flipping(
    model: keras.Model,
    inputs: Any,
    explanation_or_method: Any = "gradient",
    targets: Any = "top1",
    *,
    features_in_step: int = 1,
    seed: int = 0,
    batch_size: int = 32,
    **options: Any,
) -> dict:
    """Bach et al.'s pixel flipping: input elements replaced by the baseline ``features_in_step`` at a
    time in decreasing order of attribution, cumulatively, scoring the model after each step.

    Returns:
        ``{"curve": [B, K, S]`` the score after each step, ``"auc": [B, K]`` its area (trapezoid rule,
        unit spacing, as Quantus' ``return_auc_per_sample``), ``"score"``: the same as ``auc``} (lower
        is better). ``n_elements / features_in_step`` evaluations per input and target.

    Shared options (:class:`~saliency_kit.evaluate.shared.Shared`): ``perturb_baseline="black"``,
    ``normalise=True``, ``abs=False``, ``score="logits"``, ``softmax=True``.
    """
    features_in_step = check_int("features_in_step", features_in_step)
    shared = Shared.read(
        options,
        seed=seed,
        batch_size=batch_size,
        perturb_baseline="black",
        normalise=True,
        abs=False,
        score="logits",
        softmax=True,
    )
    scored = shared.prepare(model, inputs, explanation_or_method, targets)
    a, flat = flat_elements(scored, normalise=shared.normalise, absolute=shared.absolute)
    n = flat.shape[1]
    steps = math.ceil(n / features_in_step)
    jobs, keys = [], []
    for b in range(len(flat)):
        generator = rng(seed, "pixel_flipping", b)
        for k in range(a.shape[1]):
            order = np.argsort(-a[b, k], kind="stable")
            values = baseline_values(shared.perturb_baseline, flat[b], n, generator)
            jobs.append(Job(steps, _flipper(flat[b], order, values, features_in_step), b, np.array([k])))
            keys.append((b, k))
    curve = np.zeros((*a.shape[:2], steps))
    for (b, k), values in zip(keys, score_jobs(scored, jobs)):
        curve[b, k] = values[:, 0]
    auc = np.trapezoid(curve, dx=1, axis=-1) if steps > 1 else np.zeros(curve.shape[:2])
    return {"curve": curve, "auc": auc, "score": auc}


def _flipper(
    flat_input: np.ndarray, order: np.ndarray, values: np.ndarray, per_step: int
) -> Callable[[int, int], np.ndarray]:
    """``make(start, stop)``: rows ``j`` with the first ``(j + 1)·per_step`` elements of ``order`` flipped."""

    def make(start: int, stop: int) -> np.ndarray:
        counts = np.minimum((np.arange(start, stop) + 1) * per_step, len(order))
        rank = np.empty(len(order), dtype=np.int64)
        rank[order] = np.arange(len(order))
        flipped = rank[None, :] < counts[:, None]
        return np.where(flipped, values[None, :], flat_input[None, :])

    return make
