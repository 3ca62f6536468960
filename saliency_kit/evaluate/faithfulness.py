"""Faithfulness: do the features a map ranks first matter most to the model?

Definitions and defaults are Quantus 0.6.0's (differences are said in each docstring):

- :func:`faithfulness_correlation` — Bhatt et al. (2020): over random feature subsets, the
  correlation between the attribution removed and the score lost. Higher is better.
- :func:`infidelity` — Yeh et al. (2019): the squared error between the score lost and the
  attribution-weighted change of the input. Lower is better.
- :func:`road` — Rong et al. (2022): the model's accuracy as the top pixels are imputed by noisy
  linear imputation (so the removed pixels are not out of distribution). Lower is better (MoRF).
- :func:`monotonicity_correlation` — Nguyen and Martínez (2020): the rank correlation between the
  attribution of each feature and the score change its removal causes. Higher is better.
- :func:`region_perturbation` — Samek et al. (2017): the score lost as the map's regions are removed
  in order; its mean (AOPC) is the score. Higher is better.
- :func:`pixel_flipping` — Bach et al. (2015): the score as features are removed one by one in
  order; its area is the score. Lower is better.
- :func:`deletion_insertion` — Petsiuk et al. (2018), RISE's deletion and insertion curves.

Scores are the model's logits (``score="logits"``), or their softmax where Quantus' metric defaults
to ``softmax=True`` (``road``, ``monotonicity_correlation``, ``region_perturbation``,
``pixel_flipping``); pass ``softmax=`` to choose.

Caveat: every value here depends on what "removed" means (the ``perturb_baseline``: Quantus'
``"black"`` is each input's minimum) and on the perturbation; compare methods on the same settings,
never values across settings or papers.

All perturbed inputs are built in NumPy and scored through the engine's compiled, batched forward
pass; random draws are seeded per input, so results do not depend on ``batch_size``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
from scipy.sparse import csc_matrix, lil_matrix
from scipy.sparse.linalg import spsolve

from ._common import (
    Job,
    baseline_values,
    check_float,
    check_int,
    forward,
    image_channel_axis,
    is_random_baseline,
    predicted_classes,
    prepare,
    preprocess,
    rng,
    score_jobs,
    spatial_shape,
    spatial_to_elements,
)
from .similarity import pearson, spearman_rows

if TYPE_CHECKING:
    import keras

__all__ = [
    "faithfulness_correlation",
    "infidelity",
    "road",
    "monotonicity_correlation",
    "region_perturbation",
    "pixel_flipping",
    "noisy_linear_imputation",
    "image_blocks",
]


def faithfulness_correlation(
    model: keras.Model,
    inputs: Any,
    explanation_or_method: Any = "gradient",
    targets: Any = "top1",
    *,
    nr_runs: int = 100,
    subset_size: int = 224,
    perturb_baseline: Any = "black",
    normalise: bool = True,
    abs: bool = False,
    score: str = "logits",
    softmax: bool = False,
    seed: int = 0,
    batch_size: int = 32,
    **method_options: Any,
) -> np.ndarray:
    """Pearson correlation, over ``nr_runs`` random subsets ``S`` of ``subset_size`` input elements,
    between ``Σ_{i∈S} a_i`` and ``f(x) − f(x with S replaced by the baseline)``: float ``[B, K]``.

    Subsets are drawn per input (seeded) and shared by its targets. Quantus draws from the
    channels-first flattening of the input; here from the input's own layout (the same
    distribution: subsets of elements).
    """
    nr_runs, subset_size = check_int("nr_runs", nr_runs, 2), check_int("subset_size", subset_size)
    scored = prepare(
        model,
        inputs,
        explanation_or_method,
        targets,
        seed=seed,
        batch_size=batch_size,
        score=score,
        softmax=softmax,
        method_options=method_options,
    )
    a = preprocess(scored.elements, normalise=normalise, absolute=abs)
    a = a.reshape(*a.shape[:2], -1)
    flat = scored.x.reshape(len(scored.x), -1).astype(np.float64)
    if subset_size > flat.shape[1]:
        raise ValueError(
            f"subset_size must be at most the number of input elements ({flat.shape[1]}); received {subset_size}."
        )
    clean = forward(scored, scored.x, scored.targets)
    jobs, subsets = [], []
    for b in range(len(flat)):
        generator = rng(seed, "faithfulness_correlation", b)
        chosen = np.stack([generator.choice(flat.shape[1], subset_size, replace=False) for _ in range(nr_runs)])
        values = np.stack([baseline_values(perturb_baseline, flat[b], subset_size, generator) for _ in range(nr_runs)])
        subsets.append(chosen)
        jobs.append(Job(nr_runs, _replacer(flat[b], chosen, values), scored.targets[b]))
    lost = score_jobs(scored, jobs)
    result = np.empty(a.shape[:2])
    for b, chosen in enumerate(subsets):
        for k in range(a.shape[1]):
            result[b, k] = pearson(a[b, k][chosen].sum(-1), clean[b, k] - lost[b][:, k])
    return result


def _made(rows: np.ndarray) -> Callable[[int, int], np.ndarray]:
    """A job's ``make`` for rows made already."""
    return lambda start, stop: rows[start:stop]


def _replacer(flat_input: np.ndarray, indices: np.ndarray, values: np.ndarray) -> Callable[[int, int], np.ndarray]:
    """``make(start, stop)``: copies of one input with ``indices[r]`` set to ``values[r]`` (row r)."""

    def make(start: int, stop: int) -> np.ndarray:
        rows = np.repeat(flat_input[None], stop - start, axis=0)
        np.put_along_axis(rows, indices[start:stop], values[start:stop], axis=1)
        return rows

    return make


def image_blocks(height: int, width: int, patch_size: int) -> list[tuple[slice, slice]]:
    """The ``patch_size`` squares tiling an image, row by row, as Quantus' padded grid: the image is
    centred in a grid padded up to a multiple of ``patch_size`` (``floor`` of the padding on top and
    left), and each square is cut to the image."""

    def edges(size: int) -> list[slice]:
        pad = (patch_size - size % patch_size) % patch_size
        start = -(pad // 2)
        return [slice(max(s, 0), min(s + patch_size, size)) for s in range(start, size, patch_size)]

    return [(r, c) for r in edges(height) for c in edges(width)]


def infidelity(
    model: keras.Model,
    inputs: Any,
    explanation_or_method: Any = "gradient",
    targets: Any = "top1",
    *,
    perturb_patch_sizes: Any = (4,),
    n_perturb_samples: int = 10,
    perturb_baseline: Any = "black",
    normalise: bool = False,
    abs: bool = False,
    score: str = "logits",
    softmax: bool = False,
    seed: int = 0,
    batch_size: int = 32,
    **method_options: Any,
) -> np.ndarray:
    """Mean over patch sizes of ``mean_j (Δf_j − Σ a·(x − x_j))²``: float ``[B, K]``; lower is better.

    As Quantus 0.6.0: ``x_j`` is the input with its first ``j`` squares of ``patch_size`` (row by
    row, all channels) replaced by the baseline, cumulatively; ``Δf_j = f(x) − f(x_j)``. With a
    deterministic baseline (``"black"``) every one of the ``n_perturb_samples`` repeats is the same,
    so it is computed once; with ``"uniform"`` each repeat draws its values. Yeh et al. draw random
    perturbations ``I`` instead: this is Quantus' deterministic variant. Where the image side is not
    a multiple of the patch, Quantus indexes the padded image in the unpadded one (wrong squares);
    here the squares of its padded grid are cut to the image. Image inputs only.
    """
    n_perturb_samples = check_int("n_perturb_samples", n_perturb_samples)
    sizes = [check_int("perturb_patch_sizes", int(p)) for p in np.atleast_1d(perturb_patch_sizes)]
    scored = prepare(
        model,
        inputs,
        explanation_or_method,
        targets,
        seed=seed,
        batch_size=batch_size,
        score=score,
        softmax=softmax,
        method_options=method_options,
    )
    height, width = spatial_shape(scored)
    a = preprocess(scored.elements, normalise=normalise, absolute=abs)
    x = scored.x.astype(np.float64)
    clean = forward(scored, scored.x, scored.targets)
    repeats = n_perturb_samples if is_random_baseline(perturb_baseline) else 1
    jobs, layouts = [], []
    for b in range(len(x)):
        generator = rng(seed, "infidelity", b)
        for size in sizes:
            masks = []
            for r, c in image_blocks(height, width, size):
                block = np.zeros((height, width), dtype=bool)
                block[r, c] = True
                masks.append(spatial_to_elements(block, scored).reshape(-1))
            for _ in range(repeats):
                values = np.stack(
                    [baseline_values(perturb_baseline, x[b].ravel(), x[b].size, generator) for _ in masks]
                )
                rows = _cumulative(x[b].ravel(), np.stack(masks), values)
                layouts.append((b, size))
                jobs.append(Job(len(rows), _made(rows), scored.targets[b]))
    scores = score_jobs(scored, jobs)
    per: dict[int, dict[int, list[np.ndarray]]] = {}
    for (b, size), job, lost in zip(layouts, jobs, scores):
        rows = job.make(0, job.rows)
        changed = x[b].ravel()[None] - rows  # [J, n]
        a_sums = changed @ a[b].reshape(a.shape[1], -1).T  # [J, K]
        error = np.mean(((clean[b][None] - lost) - a_sums) ** 2, axis=0)
        per.setdefault(b, {}).setdefault(size, []).append(error)
    return np.stack([np.mean([np.mean(per[b][s], axis=0) for s in sizes], axis=0) for b in range(len(x))])


def _cumulative(flat_input: np.ndarray, masks: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``[J, n]``: row ``j`` has the elements of masks ``0..j`` set to their baseline values."""
    rows = np.empty((len(masks), flat_input.size))
    current = flat_input.copy()
    for j, (mask, value) in enumerate(zip(masks, values)):
        current[mask] = value[mask]
        rows[j] = current
    return rows


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


def road(
    model: keras.Model,
    inputs: Any,
    explanation_or_method: Any = "gradient",
    targets: Any = "top1",
    *,
    percentages: Any = tuple(range(1, 100, 2)),
    noise: float = 0.01,
    normalise: bool = True,
    abs: bool = False,
    score: str = "logits",
    softmax: bool = True,
    seed: int = 0,
    batch_size: int = 32,
    **method_options: Any,
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
    """
    percentages = [check_float("percentages", p) for p in np.atleast_1d(percentages)]
    noise = check_float("noise", noise)
    scored = prepare(
        model,
        inputs,
        explanation_or_method,
        targets,
        seed=seed,
        batch_size=batch_size,
        score=score,
        softmax=softmax,
        method_options=method_options,
    )
    height, width = spatial_shape(scored)
    pixels = preprocess(scored.pixels, normalise=normalise, absolute=abs).reshape(*scored.pixels.shape[:2], -1)
    axis = 1 + image_channel_axis(scored) % 3
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
        predicted = predicted_classes(scored, rows).reshape(pixels.shape[1], len(percentages))
        curve[b] = predicted == scored.targets[b][:, None]
    return {"percentages": np.asarray(percentages), "curve": curve, "score": curve.mean(axis=-1)}


def monotonicity_correlation(
    model: keras.Model,
    inputs: Any,
    explanation_or_method: Any = "gradient",
    targets: Any = "top1",
    *,
    nr_samples: int = 100,
    features_in_step: int = 1,
    eps: float = 1e-5,
    perturb_baseline: Any = "uniform",
    normalise: bool = True,
    abs: bool = True,
    score: str = "logits",
    softmax: bool = True,
    seed: int = 0,
    batch_size: int = 32,
    **method_options: Any,
) -> np.ndarray:
    """Spearman correlation between the attribution of each step of ``features_in_step`` elements
    (in increasing order of attribution) and the score variance its removal causes,
    ``mean_s (f(x_s) − f(x))² / f(x)²`` over ``nr_samples`` draws of the baseline (``f(x)²``
    replaced by 1 below ``eps``): float ``[B, K]``; higher is better. Each step is removed alone.

    The cost is ``n_elements / features_in_step × nr_samples`` evaluations per input and target:
    raise ``features_in_step`` for images.
    """
    nr_samples, features_in_step = check_int("nr_samples", nr_samples), check_int("features_in_step", features_in_step)
    eps = check_float("eps", eps)
    scored = prepare(
        model,
        inputs,
        explanation_or_method,
        targets,
        seed=seed,
        batch_size=batch_size,
        score=score,
        softmax=softmax,
        method_options=method_options,
    )
    a = preprocess(scored.elements, normalise=normalise, absolute=abs)
    a = a.reshape(*a.shape[:2], -1)
    flat = scored.x.reshape(len(scored.x), -1).astype(np.float64)
    n = flat.shape[1]
    steps = math.ceil(n / features_in_step)
    clean = forward(scored, scored.x, scored.targets)
    repeats = nr_samples if is_random_baseline(perturb_baseline) else 1
    jobs, orders = [], []
    for b in range(len(flat)):
        generator = rng(seed, "monotonicity_correlation", b)
        for k in range(a.shape[1]):
            order = np.argsort(a[b, k], kind="stable")
            padded = np.concatenate([order, np.full(steps * features_in_step - n, -1)]).reshape(steps, features_in_step)
            orders.append((b, k, padded))
            indices = np.repeat(padded, repeats, axis=0)
            values = np.stack(
                [baseline_values(perturb_baseline, flat[b], features_in_step, generator) for _ in range(len(indices))]
            )
            jobs.append(Job(len(indices), _step_replacer(flat[b], indices, values), scored.targets[b][k : k + 1]))
    scores = score_jobs(scored, jobs)
    result = np.empty(a.shape[:2])
    for (b, k, padded), lost in zip(orders, scores):
        y = clean[b, k]
        inverse = 1.0 / y**2 if np.abs(y) >= eps else 1.0
        variance = np.mean((lost[:, 0].reshape(steps, repeats) - y) ** 2, axis=1) * inverse
        attribution = np.where(padded >= 0, a[b, k][np.maximum(padded, 0)], 0.0).sum(axis=1)
        result[b, k] = spearman_rows(attribution, variance)
    return result


def _step_replacer(flat_input: np.ndarray, indices: np.ndarray, values: np.ndarray) -> Callable[[int, int], np.ndarray]:
    """Copies of one input with the valid (``>= 0``) ``indices[r]`` set to ``values[r]``."""

    def make(start: int, stop: int) -> np.ndarray:
        rows = np.repeat(flat_input[None], stop - start, axis=0)
        idx, val = indices[start:stop], values[start:stop]
        valid = idx >= 0
        rows[np.nonzero(valid)[0], idx[valid]] = val[valid]
        return rows

    return make


def region_perturbation(
    model: keras.Model,
    inputs: Any,
    explanation_or_method: Any = "gradient",
    targets: Any = "top1",
    *,
    patch_size: int = 8,
    order: str = "morf",
    regions_evaluation: int = 100,
    perturb_baseline: Any = "black",
    normalise: bool = True,
    abs: bool = False,
    score: str = "logits",
    softmax: bool = True,
    seed: int = 0,
    batch_size: int = 32,
    **method_options: Any,
) -> dict:
    """Samek et al.'s region perturbation: the squares of ``patch_size`` (Quantus' padded grid) are
    ranked by their summed map (``order="morf"`` most relevant first, ``"lerf"`` least, ``"random"``)
    and replaced by the baseline one after another, cumulatively, for ``regions_evaluation`` steps.

    Returns:
        ``{"curve": [B, K, R]`` the score lost ``f(x) − f(x_j)`` after ``j`` regions, ``"aopc": [B, K]``
        its mean (the area over the perturbation curve), ``"score"``: the same as ``aopc``} (MoRF:
        higher is better). Image inputs only.
    """
    patch_size, regions_evaluation = (
        check_int("patch_size", patch_size),
        check_int("regions_evaluation", regions_evaluation),
    )
    if order not in ("morf", "lerf", "random"):
        raise ValueError(f"order must be 'morf', 'lerf' or 'random'; received {order!r}.")
    scored = prepare(
        model,
        inputs,
        explanation_or_method,
        targets,
        seed=seed,
        batch_size=batch_size,
        score=score,
        softmax=softmax,
        method_options=method_options,
    )
    height, width = spatial_shape(scored)
    pixels = preprocess(scored.pixels, normalise=normalise, absolute=abs)
    blocks = image_blocks(height, width, patch_size)
    masks = np.zeros((len(blocks), height, width), dtype=bool)
    for i, (r, c) in enumerate(blocks):
        masks[i, r, c] = True
    element_masks = spatial_to_elements(masks, scored).reshape(len(blocks), -1)
    x = scored.x.astype(np.float64)
    clean = forward(scored, scored.x, scored.targets)
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
                [baseline_values(perturb_baseline, x[b].ravel(), x[b].size, generator) for _ in range(steps)]
            )
            rows = _cumulative(x[b].ravel(), element_masks[ranking], values)
            jobs.append(Job(steps, _made(rows), scored.targets[b][k : k + 1]))
            keys.append((b, k))
    curve = np.zeros((*pixels.shape[:2], steps))
    for (b, k), lost in zip(keys, score_jobs(scored, jobs)):
        curve[b, k] = clean[b, k] - lost[:, 0]
    aopc = curve.mean(axis=-1)
    return {"curve": curve, "aopc": aopc, "score": aopc}


def pixel_flipping(
    model: keras.Model,
    inputs: Any,
    explanation_or_method: Any = "gradient",
    targets: Any = "top1",
    *,
    features_in_step: int = 1,
    perturb_baseline: Any = "black",
    normalise: bool = True,
    abs: bool = False,
    score: str = "logits",
    softmax: bool = True,
    seed: int = 0,
    batch_size: int = 32,
    **method_options: Any,
) -> dict:
    """Bach et al.'s pixel flipping: input elements replaced by the baseline ``features_in_step`` at a
    time in decreasing order of attribution, cumulatively, scoring the model after each step.

    Returns:
        ``{"curve": [B, K, S]`` the score after each step, ``"auc": [B, K]`` its area (trapezoid rule,
        unit spacing, as Quantus' ``return_auc_per_sample``), ``"score"``: the same as ``auc``} (lower
        is better). ``n_elements / features_in_step`` evaluations per input and target.
    """
    features_in_step = check_int("features_in_step", features_in_step)
    scored = prepare(
        model,
        inputs,
        explanation_or_method,
        targets,
        seed=seed,
        batch_size=batch_size,
        score=score,
        softmax=softmax,
        method_options=method_options,
    )
    a = preprocess(scored.elements, normalise=normalise, absolute=abs)
    a = a.reshape(*a.shape[:2], -1)
    flat = scored.x.reshape(len(scored.x), -1).astype(np.float64)
    n = flat.shape[1]
    steps = math.ceil(n / features_in_step)
    jobs, keys = [], []
    for b in range(len(flat)):
        generator = rng(seed, "pixel_flipping", b)
        for k in range(a.shape[1]):
            order = np.argsort(-a[b, k], kind="stable")
            values = baseline_values(perturb_baseline, flat[b], n, generator)
            jobs.append(Job(steps, _flipper(flat[b], order, values, features_in_step), scored.targets[b][k : k + 1]))
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
