"""Robustness: does the map stay put when the input barely moves? (Quantus 0.6.0 definitions.)

- :func:`max_sensitivity` — Yeh et al. (2019): the largest relative change of the explanation over
  ``nr_samples`` inputs with uniform noise in ``[-lower_bound, lower_bound]``.
- :func:`avg_sensitivity` — Yeh et al. (2019): its mean.
- :func:`relative_input_stability` — Agarwal et al. (2022): the largest ratio of the explanation's
  relative change to the input's relative change.

Lower is better for all three. The explainer is re-run on every perturbed copy of every input in
one batched :func:`saliency_kit.explain` call (per group of inputs that fits in memory), never
one call per sample; copies are seeded per input, and the noise of a noisy method (SmoothGrad) is
keyed per copy, so results do not depend on ``batch_size``.

Caveat: these metrics do not flag a useless explanation by themselves: a constant map is perfectly
stable. Read them next to a faithfulness metric, and against the ``"random"`` row of
:func:`saliency_kit.evaluate.compare`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

from ._common import check_float, check_int, preprocess
from .draws import perturbed_keys, rng
from .explained import Scored
from .registry import metric
from .scoring import input_groups, predicted
from .shared import Shared

if TYPE_CHECKING:
    import keras

__all__ = ["max_sensitivity", "avg_sensitivity", "relative_input_stability"]

#: The explanations of the perturbed copies are computed together up to about this many bytes.
MAX_EXPLAIN_BYTES = 1024 * 2**20
#: The shared options of :func:`max_sensitivity` and :func:`avg_sensitivity`, with their defaults (Quantus').
_SENSITIVITY_DEFAULTS = MappingProxyType(
    {"normalise": False, "abs": False, "score": "logits", "return_nan_when_prediction_changes": False}
)


def _perturbed_runs(
    scored: Scored,
    nr_samples: int,
    low: float,
    high: float,
    salt: str,
    shared: Shared,
) -> Iterator[tuple[int, np.ndarray, np.ndarray, np.ndarray]]:
    """Yields ``(b, copies [S, *input], attributions [S, K, *input], changed bool [S, K])`` per input:
    the copies ``x + U(low, high)`` of the explained values (every explained part; the other model
    inputs held at the input's own) and their re-run explanations (preprocessed as ``shared`` says),
    one explain call per group of inputs; ``changed``: the copy changes the model's prediction for
    that target (all False unless ``shared.nan_when_prediction_changes``)."""
    x = scored.x
    keys = perturbed_keys(scored.seed, len(x), nr_samples)
    per_copy = x[0].nbytes * (1 + scored.targets.shape[1] * 2)
    asked = f"{salt} with return_nan_when_prediction_changes=True"
    clean = predicted(scored, x, np.arange(len(x)), metric=asked) if shared.nan_when_prediction_changes else None
    for group in input_groups(len(x), nr_samples, per_copy, MAX_EXPLAIN_BYTES):
        copies = np.concatenate(
            [
                x[b][None].astype(np.float64) + rng(scored.seed, salt, b).uniform(low, high, (nr_samples, *x.shape[1:]))
                for b in group
            ]
        ).astype(x.dtype)
        sources = np.repeat(list(group), nr_samples)
        rows = [b * nr_samples + s for b in group for s in range(nr_samples)]
        attributions = preprocess(
            scored.explain(copies, sources, keys[rows]), normalise=shared.normalise, absolute=shared.absolute
        )
        changed = (
            predicted(scored, copies, sources, metric=asked) != clean[sources]
            if clean is not None
            else np.zeros((len(copies), scored.targets.shape[1]), dtype=bool)
        )
        for i, b in enumerate(group):
            part = slice(i * nr_samples, (i + 1) * nr_samples)
            yield b, copies[part], attributions[part], changed[part]


def _sensitivities(
    name: str,
    model: keras.Model,
    inputs: Any,
    explanation_or_method: Any,
    targets: Any,
    nr_samples: int,
    lower_bound: float,
    upper_bound: float | None,
    shared: Shared,
) -> np.ndarray:
    """``[B, K, S]``: ``‖a − a_s‖ / ‖a‖`` (Frobenius) per copy, NaN where the prediction changed and
    ``shared.nan_when_prediction_changes``."""
    nr_samples = check_int("nr_samples", nr_samples)
    lower_bound = check_float("lower_bound", lower_bound)
    low, high = (
        (-lower_bound, lower_bound) if upper_bound is None else (lower_bound, check_float("upper_bound", upper_bound))
    )
    if high <= low:
        raise ValueError(f"upper_bound must be greater than lower_bound; received {lower_bound} and {upper_bound}.")
    scored = shared.prepare(model, inputs, explanation_or_method, targets)
    a = shared.flat(scored.elements)
    result = np.zeros((*a.shape[:2], nr_samples))
    for b, _, perturbed, changed in _perturbed_runs(scored, nr_samples, low, high, name, shared):
        difference = np.linalg.norm(a[b][None] - perturbed.reshape(nr_samples, a.shape[1], -1), axis=-1)  # [S, K]
        with np.errstate(invalid="ignore", divide="ignore"):
            result[b] = (difference / np.linalg.norm(a[b], axis=-1)[None]).T
        if shared.nan_when_prediction_changes:
            result[b][changed.T] = np.nan
    return result


@metric("max_sensitivity", family="robustness", higher_is_better=False)
def max_sensitivity(
    model: keras.Model,
    inputs: Any,
    explanation_or_method: Any = "gradient",
    targets: Any = "top1",
    *,
    nr_samples: int = 200,
    lower_bound: float = 0.2,
    upper_bound: float | None = None,
    seed: int = 0,
    batch_size: int = 32,
    **options: Any,
) -> np.ndarray:
    """``max_s ‖a(x) − a(x + ε_s)‖ / ‖a(x)‖`` over ``nr_samples`` noise draws ``ε_s ~ U(−lower_bound,
    lower_bound)`` per element (``U(lower_bound, upper_bound)`` when ``upper_bound`` is given): float
    ``[B, K]``; lower is better. Copies that change the predicted class are left out when
    ``return_nan_when_prediction_changes`` (NaN if all do). The explanation must be a method name
    or an Explanation (the method is re-run on the copies).

    Shared options (:class:`~saliency_kit.evaluate.shared.Shared`): ``normalise=False``, ``abs=False``,
    ``score="logits"``, ``return_nan_when_prediction_changes=False``.
    """
    shared = Shared.read(options, seed=seed, batch_size=batch_size, **_SENSITIVITY_DEFAULTS)
    values = _sensitivities(
        "max_sensitivity",
        model,
        inputs,
        explanation_or_method,
        targets,
        nr_samples,
        lower_bound,
        upper_bound,
        shared,
    )
    return _nan_reduce(np.nanmax, values)


@metric("avg_sensitivity", family="robustness", higher_is_better=False)
def avg_sensitivity(
    model: keras.Model,
    inputs: Any,
    explanation_or_method: Any = "gradient",
    targets: Any = "top1",
    *,
    nr_samples: int = 200,
    lower_bound: float = 0.2,
    upper_bound: float | None = None,
    seed: int = 0,
    batch_size: int = 32,
    **options: Any,
) -> np.ndarray:
    """The mean of :func:`max_sensitivity`'s ratios over the copies: float ``[B, K]``; lower is better.

    Shared options (:class:`~saliency_kit.evaluate.shared.Shared`): ``normalise=False``, ``abs=False``,
    ``score="logits"``, ``return_nan_when_prediction_changes=False``.
    """
    shared = Shared.read(options, seed=seed, batch_size=batch_size, **_SENSITIVITY_DEFAULTS)
    values = _sensitivities(
        "avg_sensitivity",
        model,
        inputs,
        explanation_or_method,
        targets,
        nr_samples,
        lower_bound,
        upper_bound,
        shared,
    )
    return _nan_reduce(np.nanmean, values)


def _nan_reduce(reduce: Callable[..., np.ndarray], values: np.ndarray) -> np.ndarray:
    out = np.full(values.shape[:2], np.nan)
    some = ~np.all(np.isnan(values), axis=-1)
    out[some] = reduce(values[some], axis=-1)
    return out


@metric("relative_input_stability", family="robustness", higher_is_better=False)
def relative_input_stability(
    model: keras.Model,
    inputs: Any,
    explanation_or_method: Any = "gradient",
    targets: Any = "top1",
    *,
    nr_samples: int = 200,
    lower_bound: float = 0.02,
    upper_bound: float = 0.2,
    eps_min: float = 1e-6,
    seed: int = 0,
    batch_size: int = 32,
    **options: Any,
) -> np.ndarray:
    """Agarwal et al.'s RIS: ``max_s ‖(a − a_s) / a‖ / max(‖(x − x_s) / x‖, eps_min)`` over copies
    ``x_s = x + U(lower_bound, upper_bound)`` (Quantus' noise), zeros in the divisors replaced by
    ``eps_min``: float ``[B, K]``; lower is better.

    The paper takes the maximum over the copies that keep the prediction; Quantus 0.6.0 sets such a
    copy to NaN and takes a plain maximum, so one changed copy makes the whole score NaN. Here the
    copies that change the prediction are left out (NaN only if all do), as in the paper.

    Shared options (:class:`~saliency_kit.evaluate.shared.Shared`): ``normalise=False``, ``abs=False``,
    ``score="logits"``, ``return_nan_when_prediction_changes=True``.
    """
    nr_samples = check_int("nr_samples", nr_samples)
    low, high = check_float("lower_bound", lower_bound), check_float("upper_bound", upper_bound)
    eps_min = check_float("eps_min", eps_min, positive=True)
    if high <= low:
        raise ValueError(f"upper_bound must be greater than lower_bound; received {lower_bound} and {upper_bound}.")
    shared = Shared.read(
        options,
        seed=seed,
        batch_size=batch_size,
        normalise=False,
        abs=False,
        score="logits",
        return_nan_when_prediction_changes=True,
    )
    scored = shared.prepare(model, inputs, explanation_or_method, targets)
    a = preprocess(scored.elements, normalise=shared.normalise, absolute=shared.absolute)
    x = scored.x.astype(np.float64)
    result = np.zeros((*a.shape[:2], nr_samples))
    for b, copies, perturbed, changed in _perturbed_runs(
        scored, nr_samples, low, high, "relative_input_stability", shared
    ):
        ab = a[b][None]
        numerator = np.linalg.norm(
            ((ab - perturbed) / (ab + (ab == 0) * eps_min)).reshape(nr_samples, a.shape[1], -1), axis=-1
        )  # [S, K]
        xb = x[b][None]
        denominator = np.linalg.norm(((xb - copies) / (xb + (xb == 0) * eps_min)).reshape(nr_samples, -1), axis=-1)
        denominator = denominator + (denominator == 0) * eps_min
        result[b] = (numerator / denominator[:, None]).T
        if shared.nan_when_prediction_changes:
            result[b][changed.T] = np.nan
    return _nan_reduce(np.nanmax, result)
