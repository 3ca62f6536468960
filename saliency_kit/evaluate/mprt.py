"""Quantus' modes of the model-parameter randomisation test: MPRT (Adebayo et al. 2018, as
Quantus' ``MPRT``), SmoothMPRT and EfficientMPRT (Hedström et al. 2024), run by
:func:`~saliency_kit.evaluate.randomisation.randomization_test` with ``mode="mprt"``,
``"smooth_mprt"`` or ``"efficient_mprt"``.

The maps compared are the element attributions of each input and target (:func:`element_attributions`:
of one explained input in its own shape, several explained parts flattened side by side), on copies
of the model re-initialised layer by layer (:mod:`.reinitialise`); the targets are resolved once on
the trained weights and kept for every step.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ._common import check_float, check_int, preprocess, seed_noise
from .draws import perturbed_keys, rng
from .explained import prepare
from .reinitialise import fixed_targets, randomized_copies
from .similarity import spearman_rows

if TYPE_CHECKING:
    import keras

__all__ = ["mprt", "parts_of", "element_attributions", "discrete_entropy"]


def mprt(
    model: keras.Model,
    inputs: Any,
    method: Any,
    targets: Any,
    *,
    mode: str,
    layers: Any,
    seed: int,
    nr_samples: int = 50,
    noise_magnitude: float = 0.1,
    **method_options: Any,
) -> list[dict]:
    """:func:`~.randomisation.randomization_test` in Quantus' modes ``"mprt"``, ``"smooth_mprt"``
    and ``"efficient_mprt"`` (its other arguments and the dicts' other keys as it says): one dict per
    step, or one for ``"efficient_mprt"``.

    - ``"mprt"``: cascading from the output down; each step also has ``similarity``, the mean
      of ``per_input [B, K]``: the Spearman correlation of the magnitudes of the element
      attributions (Quantus' ``MPRT`` defaults);
    - ``"smooth_mprt"``: the same from the input up, each explanation the mean over
      ``nr_samples`` (50) copies of the input: ``nr_samples - 1`` with Gaussian noise of
      standard deviation ``noise_magnitude`` (0.1) × the input's range, and the input
      itself (Quantus' ``SmoothMPRT``; one sample is the plain explanation). The noisy
      copies are drawn once and explained at every step, so the steps differ only by
      their weights (Quantus draws new noise for every explanation). With several inputs
      or token ids the noise is added to what is explained (token ids' embeddings at the
      step's weights; several parts side by side, the range theirs together), the other
      inputs held at the input's own values;
    - ``"efficient_mprt"``: one step, every chosen layer random; ``per_input`` is the ratio
      ``H(randomised) / H(original)`` of the discrete entropies (100-bin histograms) of the
      explanations, ``similarity`` its mean — above 1 is what a model-sensitive method
      shows. Quantus' ``EfficientMPRT`` returns the relative rise, this ratio minus 1 (the
      ratio is its ``scores_fraction_explanation``).

    These three compare element attributions (several explained parts flattened side by
    side ``[B, K, E]``: :func:`element_attributions`).

    ``nr_samples`` and ``noise_magnitude`` are options of ``"smooth_mprt"`` only. Given the
    same randomised weights, the numbers are Quantus 0.6.0's; the randomisation differs:
    each layer is re-drawn from its own initialisers here, where Quantus permutes a
    TensorFlow layer's weights and calls a PyTorch layer's ``reset_parameters``.
    """
    from ..pipeline.api import explain

    smooth = mode == "smooth_mprt"
    if smooth:
        nr_samples = check_int("nr_samples", nr_samples)
        noise_magnitude = check_float("noise_magnitude", noise_magnitude)
    seed_noise(method, method_options, seed)
    steps = randomized_copies(model, "cascading", layers, seed, "top_down" if mode == "mprt" else "bottom_up")
    _, clone, _ = next(steps)  # the copy every step changes in place
    fixed = fixed_targets(clone, inputs, targets, method_options)

    def plain() -> np.ndarray:
        return element_attributions(explain(clone, inputs, method, fixed, with_scores=False, **method_options))

    attributions = (
        _smoothed(clone, inputs, method, fixed, seed, nr_samples, noise_magnitude, method_options) if smooth else plain
    )
    original = attributions()
    if mode == "efficient_mprt":
        last = collections.deque(steps, maxlen=1)  # the last step: every layer randomised
        _, _, randomized = last[0]
        random_maps = attributions()
        before, after = discrete_entropy(original), discrete_entropy(random_maps)
        with np.errstate(invalid="ignore", divide="ignore"):
            ratio = after / before
        return [
            {
                "layer": "all",
                "step": 1,
                "randomized": randomized,
                "similarity": float(np.nanmean(ratio)),
                "per_input": ratio,
                "complexity_original": before,
                "complexity_randomized": after,
            }
        ]
    results = []
    reference = preprocess(original, normalise=True, absolute=True)
    for step, (path, _, randomized) in enumerate(steps, start=1):
        current = attributions()
        per_input = _spearman_per_map(reference, preprocess(current, normalise=True, absolute=True))
        results.append(
            {
                "layer": path,
                "step": step,
                "randomized": randomized,
                "similarity": float(np.nanmean(per_input)),
                "per_input": per_input,
            }
        )
    return results


def _smoothed(
    clone: keras.Model,
    inputs: Any,
    method: Any,
    fixed: Any,
    seed: int,
    nr_samples: int,
    noise_magnitude: float,
    method_options: dict,
) -> Callable[[], np.ndarray]:
    """SmoothMPRT's explanation at the copy's current weights: a function giving the element
    attributions ``[B, K, *x]`` averaged over ``nr_samples`` copies of each input's explained values
    ``x`` (:class:`~.explained.Scored`: an image, token ids' embeddings ``[T, D]``, several parts
    flattened side by side ``[E]``, the other model inputs held at the input's own): ``x`` plus
    Gaussian noise of standard deviation ``noise_magnitude`` × the range of ``x``, then ``x`` itself
    (Quantus' last sample). The standard normal draws are made once per input (seeded); an
    embedding's or an inner layer's values are read again at each step's weights."""
    from ..pipeline.parts import read

    options = dict(method_options)
    score, batch_size = options.pop("score", "logits"), options.pop("batch_size", 32)
    scored = prepare(
        clone, inputs, method, fixed, seed=seed, batch_size=batch_size, score=score, method_options=options
    )
    inner = scored.parts is not None and any(part.layer is not None for part in scored.parts.parts)
    count = len(scored.x)
    sources, keys = np.repeat(np.arange(count), nr_samples), perturbed_keys(seed, count, nr_samples)

    def attributions() -> np.ndarray:
        now = scored
        if inner:
            parts = read(clone, inputs, scored.names, batch_size=scored.batch_size)
            now = dataclasses.replace(scored, parts=parts, x=scored.space.pack(parts.points))
        noisy = np.concatenate(
            [
                np.concatenate(
                    [
                        xb[None]
                        + rng(seed, "smooth_mprt", b).normal(
                            0.0, noise_magnitude * float(np.ptp(xb)), (nr_samples - 1, *xb.shape)
                        ),
                        xb[None],
                    ]
                )
                for b, xb in enumerate(now.x)
            ]
        ).astype(now.x.dtype)
        values = now.explain(noisy, sources, keys)
        return values.reshape(count, nr_samples, *values.shape[1:]).mean(axis=1)

    return attributions


def _spearman_per_map(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Spearman correlation of each pair of maps ``[B, K, ...]`` -> ``[B, K]``."""

    flat_a, flat_b = a.reshape(*a.shape[:2], -1), b.reshape(*b.shape[:2], -1)
    return np.array([[spearman_rows(p, q) for p, q in zip(ra, rb)] for ra, rb in zip(flat_a, flat_b)])


def discrete_entropy(maps: np.ndarray, n_bins: int = 100) -> np.ndarray:
    """Entropy (nats) of the ``n_bins``-bin histogram of each map ``[B, K, ...]`` -> ``[B, K]``
    (Quantus' ``discrete_entropy``)."""
    from scipy import stats

    flat = np.asarray(maps, dtype=np.float64).reshape(*np.shape(maps)[:2], -1)
    return np.array([[stats.entropy(np.histogram(m, bins=n_bins)[0]) for m in row] for row in flat])


def parts_of(expl: Any) -> list[tuple[Any, Any]]:
    """``(attributions, maps)`` of each part an explanation holds, in its structure's order: a dict by
    name, a list or tuple by model input (``None`` for an input not explained), or one array."""
    attributions, maps = expl.attributions, expl.maps
    if not expl.parts:
        return [(attributions, maps)]
    if isinstance(attributions, dict):
        return [(attributions[name], maps[name]) for name in attributions]
    if isinstance(attributions, (list, tuple)):
        return [(a, m) for a, m in zip(attributions, maps) if a is not None]
    return [(attributions, maps)]


def element_attributions(expl: Any) -> np.ndarray:
    """Float64 attributions ``[B, K, ...]`` of an explanation: of its one input (or one explained
    part) as they are, of several explained parts flattened side by side ``[B, K, E]``."""
    parts = [np.asarray(a, dtype=np.float64) for a, _ in parts_of(expl)]
    if len(parts) == 1:
        return parts[0]
    return np.concatenate([a.reshape(*a.shape[:2], -1) for a in parts], axis=-1)
