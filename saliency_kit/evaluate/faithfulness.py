"""Faithfulness: do the features a map ranks first matter most to the model?

Definitions and defaults are Quantus 0.6.0's (differences are said in each docstring):

- :func:`faithfulness_correlation` — Bhatt et al. (2020): over random feature subsets, the
  correlation between the attribution removed and the score lost. Higher is better.
- :func:`infidelity` — Yeh et al. (2019): the squared error between the score lost and the
  attribution-weighted change of the input. Lower is better.
- :func:`monotonicity_correlation` — Nguyen and Martínez (2020): the rank correlation between the
  attribution of each feature and the score change its removal causes. Higher is better.

The perturbation curves (``road``, ``region_perturbation``, ``pixel_flipping``) are in
:mod:`saliency_kit.evaluate.perturbation`, ``deletion_insertion`` in
:mod:`saliency_kit.evaluate.deletion`; :func:`image_blocks` and :func:`cumulative_rows` build the
perturbed rows both this module and the curves use.

Scores are the model's logits (``score="logits"``), or their softmax where Quantus' metric defaults
to ``softmax=True`` (``monotonicity_correlation``); pass ``softmax=`` to choose.

Caveat: every value here depends on what "removed" means (the ``perturb_baseline``: Quantus'
``"black"`` is each input's minimum) and on the perturbation; compare methods on the same settings,
never values across settings or papers.

All perturbed inputs are built in NumPy and scored through the engine's compiled, batched forward
pass; random draws are seeded per input, so results do not depend on ``batch_size``.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ._common import baseline_values, check_float, check_int, is_random_baseline, preprocess
from .draws import rng
from .registry import metric
from .scoring import Job, forward, padded_replacer, padded_steps, prebuilt, score_jobs
from .shared import Shared
from .similarity import pearson, spearman_rows
from .views import flat_elements, spatial_shape, spatial_to_elements

if TYPE_CHECKING:
    import keras

__all__ = [
    "faithfulness_correlation",
    "infidelity",
    "monotonicity_correlation",
    "monotonicity_passes",
    "WARN_PASSES",
    "image_blocks",
    "cumulative_rows",
]


@metric("faithfulness_correlation", family="faithfulness", higher_is_better=True)
def faithfulness_correlation(
    model: keras.Model,
    inputs: Any,
    explanation_or_method: Any = "gradient",
    targets: Any = "top1",
    *,
    nr_runs: int = 100,
    subset_size: int = 224,
    seed: int = 0,
    batch_size: int = 32,
    **options: Any,
) -> np.ndarray:
    """Pearson correlation, over ``nr_runs`` random subsets ``S`` of ``subset_size`` input elements,
    between ``Σ_{i∈S} a_i`` and ``f(x) − f(x with S replaced by the baseline)``: float ``[B, K]``.

    Subsets are drawn per input (seeded) and shared by its targets. Quantus draws from the
    channels-first flattening of the input; here from the input's own layout (the same
    distribution: subsets of elements).

    Shared options (:class:`~saliency_kit.evaluate.shared.Shared`): ``perturb_baseline="black"``,
    ``normalise=True``, ``abs=False``, ``score="logits"``, ``softmax=False``.
    """
    nr_runs, subset_size = check_int("nr_runs", nr_runs, 2), check_int("subset_size", subset_size)
    shared = Shared.read(
        options,
        seed=seed,
        batch_size=batch_size,
        perturb_baseline="black",
        normalise=True,
        abs=False,
        score="logits",
        softmax=False,
    )
    scored = shared.prepare(model, inputs, explanation_or_method, targets)
    a, flat = flat_elements(scored, normalise=shared.normalise, absolute=shared.absolute)
    if subset_size > flat.shape[1]:
        raise ValueError(
            f"subset_size must be at most the number of input elements ({flat.shape[1]}); received {subset_size}."
        )
    clean = forward(scored, scored.x, np.arange(len(flat)))
    jobs, subsets = [], []
    for b in range(len(flat)):
        generator = rng(seed, "faithfulness_correlation", b)
        chosen = np.stack([generator.choice(flat.shape[1], subset_size, replace=False) for _ in range(nr_runs)])
        values = np.stack(
            [baseline_values(shared.perturb_baseline, flat[b], subset_size, generator) for _ in range(nr_runs)]
        )
        subsets.append(chosen)
        jobs.append(Job(nr_runs, _replacer(flat[b], chosen, values), b, np.arange(a.shape[1])))
    lost = score_jobs(scored, jobs)
    result = np.empty(a.shape[:2])
    for b, chosen in enumerate(subsets):
        for k in range(a.shape[1]):
            result[b, k] = pearson(a[b, k][chosen].sum(-1), clean[b, k] - lost[b][:, k])
    return result


def _replacer(flat_input: np.ndarray, indices: np.ndarray, values: np.ndarray) -> Callable[[int, int], np.ndarray]:
    """``make(start, stop)``: copies of one input with ``indices[r]`` set to ``values[r]`` (row r)."""

    def make(start: int, stop: int) -> np.ndarray:
        rows = np.repeat(flat_input[None], stop - start, axis=0)
        np.put_along_axis(rows, indices[start:stop], values[start:stop], axis=1)
        return rows

    return make


#: Above this many forward passes in all, :func:`monotonicity_correlation` warns before it runs them.
WARN_PASSES = 100_000


def monotonicity_passes(n_elements: int, features_in_step: int, nr_samples: int, random_baseline: bool = True) -> int:
    """The forward passes :func:`monotonicity_correlation` runs per input and target for inputs of
    ``n_elements`` elements: one per step of ``features_in_step`` elements and draw of the baseline
    (``nr_samples`` draws of a random ``perturb_baseline``, one of a deterministic one)."""
    return math.ceil(n_elements / features_in_step) * (nr_samples if random_baseline else 1)


def _warn_cost(n_elements: int, maps: tuple, features_in_step: int, nr_samples: int, repeats: int) -> None:
    """A one-line warning when ``maps = (B, K)`` maps of ``n_elements`` each cost more than
    :data:`WARN_PASSES` forward passes in all."""
    steps = math.ceil(n_elements / features_in_step)
    total = steps * repeats * maps[0] * maps[1]
    if total > WARN_PASSES:
        warnings.warn(
            f"monotonicity_correlation will run {total:,} forward passes ({maps[0]} inputs × {maps[1]} targets × "
            f"{steps:,} steps of {features_in_step} of {n_elements:,} elements × {repeats} draws): give "
            f"features_in_step={max(1, math.ceil(n_elements / 64))} (64 steps) or a smaller nr_samples; received "
            f"features_in_step={features_in_step}, nr_samples={nr_samples}.",
            UserWarning,
            stacklevel=3,
        )


def image_blocks(height: int, width: int, patch_size: int) -> list[tuple[slice, slice]]:
    """The ``patch_size`` squares tiling an image, row by row, as Quantus' padded grid: the image is
    centred in a grid padded up to a multiple of ``patch_size`` (``floor`` of the padding on top and
    left), and each square is cut to the image."""

    def edges(size: int) -> list[slice]:
        pad = (patch_size - size % patch_size) % patch_size
        start = -(pad // 2)
        return [slice(max(s, 0), min(s + patch_size, size)) for s in range(start, size, patch_size)]

    return [(r, c) for r in edges(height) for c in edges(width)]


@metric("infidelity", family="faithfulness", higher_is_better=False)
def infidelity(
    model: keras.Model,
    inputs: Any,
    explanation_or_method: Any = "gradient",
    targets: Any = "top1",
    *,
    perturb_patch_sizes: Any = (4,),
    n_perturb_samples: int = 10,
    seed: int = 0,
    batch_size: int = 32,
    **options: Any,
) -> np.ndarray:
    """Mean over patch sizes of ``mean_j (Δf_j − Σ a·(x − x_j))²``: float ``[B, K]``; lower is better.

    As Quantus 0.6.0: ``x_j`` is the input with its first ``j`` squares of ``patch_size`` (row by
    row, all channels) replaced by the baseline, cumulatively; ``Δf_j = f(x) − f(x_j)``. With a
    deterministic baseline (``"black"``) every one of the ``n_perturb_samples`` repeats is the same,
    so it is computed once; with ``"uniform"`` each repeat draws its values. Yeh et al. draw random
    perturbations ``I`` instead: this is Quantus' deterministic variant. Where the image side is not
    a multiple of the patch, Quantus indexes the padded image in the unpadded one (wrong squares);
    here the squares of its padded grid are cut to the image. Image inputs only.

    Shared options (:class:`~saliency_kit.evaluate.shared.Shared`): ``perturb_baseline="black"``,
    ``normalise=False``, ``abs=False``, ``score="logits"``, ``softmax=False``.
    """
    n_perturb_samples = check_int("n_perturb_samples", n_perturb_samples)
    sizes = [check_int("perturb_patch_sizes", int(p)) for p in np.atleast_1d(perturb_patch_sizes)]
    shared = Shared.read(
        options,
        seed=seed,
        batch_size=batch_size,
        perturb_baseline="black",
        normalise=False,
        abs=False,
        score="logits",
        softmax=False,
    )
    scored = shared.prepare(model, inputs, explanation_or_method, targets)
    height, width = spatial_shape(scored, "infidelity")
    a = preprocess(scored.elements, normalise=shared.normalise, absolute=shared.absolute)
    perturb_baseline = shared.perturb_baseline
    x = scored.x.astype(np.float64)
    clean = forward(scored, scored.x, np.arange(len(x)))
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
                rows = cumulative_rows(x[b].ravel(), np.stack(masks), values)
                layouts.append((b, size))
                jobs.append(Job(len(rows), prebuilt(rows), b, np.arange(a.shape[1])))
    scores = score_jobs(scored, jobs)
    per: dict[int, dict[int, list[np.ndarray]]] = {}
    for (b, size), job, lost in zip(layouts, jobs, scores):
        rows = job.make(0, job.rows)
        changed = x[b].ravel()[None] - rows  # [J, n]
        a_sums = changed @ a[b].reshape(a.shape[1], -1).T  # [J, K]
        error = np.mean(((clean[b][None] - lost) - a_sums) ** 2, axis=0)
        per.setdefault(b, {}).setdefault(size, []).append(error)
    return np.stack([np.mean([np.mean(per[b][s], axis=0) for s in sizes], axis=0) for b in range(len(x))])


def cumulative_rows(flat_input: np.ndarray, masks: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``[J, n]``: row ``j`` has the elements of masks ``0..j`` set to their baseline values."""
    rows = np.empty((len(masks), flat_input.size))
    current = flat_input.copy()
    for j, (mask, value) in enumerate(zip(masks, values)):
        current[mask] = value[mask]
        rows[j] = current
    return rows


@metric("monotonicity_correlation", family="faithfulness", higher_is_better=True)
def monotonicity_correlation(
    model: keras.Model,
    inputs: Any,
    explanation_or_method: Any = "gradient",
    targets: Any = "top1",
    *,
    nr_samples: int = 100,
    features_in_step: int = 1,
    eps: float = 1e-5,
    seed: int = 0,
    batch_size: int = 32,
    **options: Any,
) -> np.ndarray:
    """Spearman correlation between the attribution of each step of ``features_in_step`` elements
    (in increasing order of attribution) and the score variance its removal causes,
    ``mean_s (f(x_s) − f(x))² / f(x)²`` over ``nr_samples`` draws of the baseline (``f(x)²``
    replaced by 1 below ``eps``): float ``[B, K]``; higher is better. Each step is removed alone.

    The cost is ``ceil(n_elements / features_in_step) × nr_samples`` forward passes per input and
    target (``× 1`` for a deterministic ``perturb_baseline``; :func:`monotonicity_passes`): with
    Quantus' defaults a 64×64×3 image takes 1,228,800. Above :data:`WARN_PASSES` in all, a
    one-line ``UserWarning`` says how many passes will run and how to lower them (raise
    ``features_in_step``, e.g. to ``n_elements / 64`` for 64 steps, or lower ``nr_samples``),
    before any is run.

    Shared options (:class:`~saliency_kit.evaluate.shared.Shared`): ``perturb_baseline="uniform"``,
    ``normalise=True``, ``abs=True``, ``score="logits"``, ``softmax=True``.
    """
    nr_samples, features_in_step = check_int("nr_samples", nr_samples), check_int("features_in_step", features_in_step)
    eps = check_float("eps", eps)
    shared = Shared.read(
        options,
        seed=seed,
        batch_size=batch_size,
        perturb_baseline="uniform",
        normalise=True,
        abs=True,
        score="logits",
        softmax=True,
    )
    scored = shared.prepare(model, inputs, explanation_or_method, targets)
    perturb_baseline = shared.perturb_baseline
    a, flat = flat_elements(scored, normalise=shared.normalise, absolute=shared.absolute)
    n = flat.shape[1]
    steps = math.ceil(n / features_in_step)
    repeats = nr_samples if is_random_baseline(perturb_baseline) else 1
    _warn_cost(n, a.shape[:2], features_in_step, nr_samples, repeats)
    clean = forward(scored, scored.x, np.arange(len(flat)))
    jobs, orders = [], []
    for b in range(len(flat)):
        generator = rng(seed, "monotonicity_correlation", b)
        for k in range(a.shape[1]):
            order = np.argsort(a[b, k], kind="stable")
            padded = padded_steps(order, features_in_step)
            orders.append((b, k, padded))
            indices = np.repeat(padded, repeats, axis=0)
            values = np.stack(
                [baseline_values(perturb_baseline, flat[b], features_in_step, generator) for _ in range(len(indices))]
            )
            jobs.append(Job(len(indices), padded_replacer(flat[b], indices, values), b, np.array([k])))
    scores = score_jobs(scored, jobs)
    result = np.empty(a.shape[:2])
    for (b, k, padded), lost in zip(orders, scores):
        y = clean[b, k]
        inverse = 1.0 / y**2 if np.abs(y) >= eps else 1.0
        variance = np.mean((lost[:, 0].reshape(steps, repeats) - y) ** 2, axis=1) * inverse
        attribution = np.where(padded >= 0, a[b, k][np.maximum(padded, 0)], 0.0).sum(axis=1)
        result[b, k] = spearman_rows(attribution, variance)
    return result
