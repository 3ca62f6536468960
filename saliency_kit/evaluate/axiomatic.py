"""Axiomatic: does the map have the properties its definition promises? (Quantus 0.6.0 definitions.)

- :func:`completeness` — Sundararajan et al. (2017): the attributions add up to the score's change
  from the baseline to the input (integrated gradients and DeepLIFT promise it).
- :func:`non_sensitivity` — Nguyen and Martínez (2020): features with no attribution should not
  change the score, and features that change it should have attribution.
- :func:`input_invariance` — Kindermans et al. (2017): shifting the input by a constant, with a
  model whose first layer undoes the shift, should not change the map.

Where Quantus 0.6.0 departs from the papers these follow the papers (said in each docstring).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from ._common import Scored, baseline_values, check_float, check_int, flat_elements, prepare
from .draws import rng
from .scoring import Job, forward, padded_replacer, padded_steps, score_jobs

if TYPE_CHECKING:
    import keras

__all__ = ["completeness", "non_sensitivity", "input_invariance"]


def completeness(
    model: keras.Model,
    inputs: Any,
    explanation_or_method: Any = "gradient",
    targets: Any = "top1",
    *,
    perturb_baseline: Any = "black",
    normalise: bool = False,
    abs: bool = False,
    score: str = "logits",
    softmax: bool = False,
    seed: int = 0,
    batch_size: int = 32,
    **method_options: Any,
) -> np.ndarray:
    """``|Σ a − (f(x) − f(x̄))|`` per input and target: float ``[B, K]`` (0 = complete), where ``x̄``
    is the input with every element set to ``perturb_baseline`` (``"black"``: the input's minimum;
    give ``perturb_baseline=0.0`` for a method whose baseline is zeros, e.g. integrated gradients'
    default).

    Quantus 0.6.0 returns ``Σ a == f(x) − f(x̄)`` compared for exact float equality (so always
    False in practice) and normalises the attributions by default (which breaks the sum); here
    the gap itself is returned and the attributions are not normalised unless asked.
    """
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
    a, flat = flat_elements(scored, normalise=normalise, absolute=abs)
    baseline = np.stack(
        [baseline_values(perturb_baseline, row, row.size, rng(seed, "completeness", b)) for b, row in enumerate(flat)]
    ).reshape(scored.x.shape)
    change = forward(scored, scored.x, scored.targets) - forward(scored, baseline, scored.targets)
    return np.abs(a.sum(-1) - change)


def non_sensitivity(
    model: keras.Model,
    inputs: Any,
    explanation_or_method: Any = "gradient",
    targets: Any = "top1",
    *,
    eps: float = 1e-5,
    features_in_step: int = 1,
    perturb_baseline: Any = "black",
    normalise: bool = True,
    abs: bool = True,
    score: str = "logits",
    softmax: bool = True,
    seed: int = 0,
    batch_size: int = 32,
    **method_options: Any,
) -> np.ndarray:
    """How many steps of ``features_in_step`` elements violate non-sensitivity: float ``[B, K]``
    (0 is best). A step violates it when "its attribution is below ``eps``" (every element of it)
    differs from "replacing it by the baseline changes the score by less than ``eps``". Each step is
    replaced alone, starting from the input.

    Quantus 0.6.0 compares per element with ``features_in_step=1`` and fails with a shape error
    otherwise; here a step is one unit (the same as Quantus for one element per step).
    ``n_elements / features_in_step`` evaluations per input.
    """
    eps = check_float("eps", eps)
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
    a, flat = flat_elements(scored, normalise=normalise, absolute=abs)
    n = flat.shape[1]
    steps = math.ceil(n / features_in_step)
    clean = forward(scored, scored.x, scored.targets)
    padded = padded_steps(np.arange(n), features_in_step)
    jobs = []
    for b in range(len(flat)):
        generator = rng(seed, "non_sensitivity", b)
        values = np.stack(
            [baseline_values(perturb_baseline, flat[b], features_in_step, generator) for _ in range(steps)]
        )
        jobs.append(Job(steps, padded_replacer(flat[b], padded, values), scored.targets[b]))
    result = np.empty(a.shape[:2])
    for b, scores in enumerate(score_jobs(scored, jobs)):
        insensitive = np.abs(scores - clean[b][None]) < eps  # [steps, K]
        for k in range(a.shape[1]):
            unattributed = np.all(np.where(padded >= 0, a[b, k][np.maximum(padded, 0)] < eps, True), axis=1)
            result[b, k] = np.sum(unattributed ^ insensitive[:, k])
    return result


def input_invariance(
    model: keras.Model,
    inputs: Any,
    explanation_or_method: Any = "gradient",
    targets: Any = "top1",
    *,
    input_shift: float = -1.0,
    atol: float = 1e-4,
    score: str = "logits",
    seed: int = 0,
    batch_size: int = 32,
    **method_options: Any,
) -> np.ndarray:
    """Whether the explanation of ``x + input_shift`` on the shifted model ``m'(z) = m(z − input_shift)``
    equals the explanation of ``x`` on ``m`` (every element within ``atol``): float ``[B, K]``, 1.0
    or 0.0. The plain gradient passes; gradient × input does not.

    The shifted model is a new functional model (a ``Rescaling`` layer with offset ``−input_shift``
    before ``model``); ``model`` is not changed. Quantus 0.6.0 leaves the first element of each
    input unshifted, so even the plain gradient fails there; here every element is shifted.
    """
    import keras

    input_shift, atol = check_float("input_shift", input_shift), check_float("atol", atol)
    scored = prepare(
        model,
        inputs,
        explanation_or_method,
        targets,
        seed=seed,
        batch_size=batch_size,
        score=score,
        method_options=method_options,
    )
    inner = keras.Input(shape=scored.x.shape[1:], dtype=scored.x.dtype)
    shifted_model = keras.Model(
        inner, model(keras.layers.Rescaling(1.0, offset=-input_shift)(inner)), name=f"{model.name}_shifted"
    )
    options = dict(scored.options)
    if isinstance(options.get("layer"), str):
        options["layer"] = f"{model.name}/{options['layer']}"
    shifted = Scored(**{**scored.__dict__, "model": shifted_model, "options": options})
    x_shifted = (scored.x.astype(np.float64) + input_shift).astype(scored.x.dtype)
    moved = shifted.explain(x_shifted, scored.targets, np.arange(len(scored.x)))
    close = np.isclose(scored.elements, moved, atol=atol, rtol=1e-5)
    return np.all(close.reshape(*close.shape[:2], -1), axis=-1).astype(np.float64)
