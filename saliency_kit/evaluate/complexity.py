"""Complexity: how concentrated is a map? (Quantus 0.6.0 definitions and defaults.)

- :func:`sparseness` — Chalasani et al. (2020): the Gini index of the magnitudes, 1 for a single
  non-zero pixel, 0 for a constant map. Higher is sparser.
- :func:`complexity` — Bhatt et al. (2020): the entropy of the magnitudes' distribution
  ``p = |a| / Σ|a|``. Lower is simpler.
- :func:`effective_complexity` — Nguyen and Martínez (2020): how many magnitudes exceed ``eps``.

Each is computed per map (input and target), on the pixel maps of images, after Quantus'
preprocessing: divided by the map's largest magnitude (per map: Quantus divides by the batch's
maximum, which leaves these three unchanged except ``effective_complexity``'s threshold), then
the magnitude taken. They need no model: ``sparseness(maps=maps)`` scores a bare ``[B, K, H, W]``
(or ``[B, H, W]``) array. A method that says nothing (all zeros) scores as simple as can be: these
metrics say nothing about faithfulness.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ._common import check_float
from .registry import metric
from .shared import Shared

if TYPE_CHECKING:
    import keras

__all__ = ["sparseness", "complexity", "effective_complexity"]


def _flat(
    name: str,
    model: keras.Model | None,
    inputs: Any,
    explanation_or_method: Any,
    targets: Any,
    maps: np.ndarray | None,
    shared: Shared,
) -> np.ndarray:
    """The pixel maps ``[B, K, F]`` a complexity metric scores, after Quantus' preprocessing."""
    return shared.flat(shared.pixel_maps(name, model, inputs, explanation_or_method, targets, maps))


@metric("sparseness", family="complexity", higher_is_better=True)
def sparseness(
    model: keras.Model | None = None,
    inputs: Any = None,
    explanation_or_method: Any = "gradient",
    targets: Any = "top1",
    *,
    maps: np.ndarray | None = None,
    seed: int = 0,
    batch_size: int = 32,
    **options: Any,
) -> np.ndarray:
    """Gini index of each map's magnitudes: float ``[B, K]`` in ``[0, 1)``; higher is sparser.

    ``G = Σ_i (2i − n − 1)·a_(i) / (n·Σ_i a_(i))`` over the ``n`` values sorted increasingly, each
    shifted by ``1e-7`` (as Quantus) so that an all-zero map is defined (0). A one-hot map scores
    ``(n − 1)/n`` (the maximum), a constant map 0.

    Args:
        model, inputs, explanation_or_method, targets: what to explain, as for every metric
            (ignored when ``maps`` is given).
        maps: a bare ``[B, K, ...]`` or ``[B, ...]`` array of maps to score instead.
        options: the shared ``normalise=True`` and ``abs=True`` (Quantus' preprocessing and
            defaults, :class:`~saliency_kit.evaluate.shared.Shared`); the rest, the method's.
    """
    a = (
        _flat(
            "sparseness",
            model,
            inputs,
            explanation_or_method,
            targets,
            maps,
            Shared.read(options, seed=seed, batch_size=batch_size, normalise=True, abs=True),
        )
        + 1e-7
    )
    n = a.shape[-1]
    a = np.sort(a, axis=-1)
    weights = 2 * np.arange(1, n + 1) - n - 1
    return (weights * a).sum(axis=-1) / (n * a.sum(axis=-1))


@metric("complexity", family="complexity", higher_is_better=False)
def complexity(
    model: keras.Model | None = None,
    inputs: Any = None,
    explanation_or_method: Any = "gradient",
    targets: Any = "top1",
    *,
    maps: np.ndarray | None = None,
    seed: int = 0,
    batch_size: int = 32,
    **options: Any,
) -> np.ndarray:
    """Entropy of each map's magnitude distribution ``p = a / Σ|a|``: float ``[B, K]``, in nats;
    lower is simpler (``−Σ p log(p + 1e-12)``, as Quantus). An all-zero map gives NaN (no
    distribution). Shared options (:class:`~saliency_kit.evaluate.shared.Shared`): ``normalise=True``,
    ``abs=True``."""
    a = _flat(
        "complexity",
        model,
        inputs,
        explanation_or_method,
        targets,
        maps,
        Shared.read(options, seed=seed, batch_size=batch_size, normalise=True, abs=True),
    )
    with np.errstate(invalid="ignore", divide="ignore"):
        p = a / np.abs(a).sum(axis=-1, keepdims=True)
    return -(p * np.log(p + 1e-12)).sum(axis=-1)


@metric("effective_complexity", family="complexity", higher_is_better=False)
def effective_complexity(
    model: keras.Model | None = None,
    inputs: Any = None,
    explanation_or_method: Any = "gradient",
    targets: Any = "top1",
    *,
    maps: np.ndarray | None = None,
    eps: float = 1e-5,
    seed: int = 0,
    batch_size: int = 32,
    **options: Any,
) -> np.ndarray:
    """How many values of each map exceed ``eps`` after the preprocessing: float ``[B, K]``
    (counts); lower is simpler. Shared options (:class:`~saliency_kit.evaluate.shared.Shared`):
    ``normalise=True``, ``abs=True``."""
    eps = check_float("eps", eps)
    a = _flat(
        "effective_complexity",
        model,
        inputs,
        explanation_or_method,
        targets,
        maps,
        Shared.read(options, seed=seed, batch_size=batch_size, normalise=True, abs=True),
    )
    return (a > eps).sum(axis=-1).astype(np.float64)
