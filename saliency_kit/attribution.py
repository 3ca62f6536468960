"""The public entry points: :func:`explain` and :func:`jacobian`."""
from __future__ import annotations

import warnings

import numpy as np

from . import engine, methods
from .explanation import Explanation
from .methods import Request
from .targets import parse_targets, resolve_targets, score_columns

__all__ = ["explain", "jacobian"]


def _check_score(score):
    if score not in ("logits", "output"):
        raise ValueError(f"score must be 'logits' or 'output'; received {score!r}.")


def _warn_zero_maps(attributions: np.ndarray, targets: np.ndarray, method: str):
    flat = attributions.reshape(*attributions.shape[:2], -1)
    dead = ~np.any(flat != 0, axis=-1)
    if dead.any():
        b, k = map(int, np.argwhere(dead)[0])
        warnings.warn(
            f"{method}: {int(dead.sum())} of {dead.size} attribution maps are all zero (first: input "
            f"{b}, target {int(targets[b, k])}). The score may not depend on the input "
            "(tf.stop_gradient, an unconnected output) or every path to it is inactive.",
            RuntimeWarning,
            stacklevel=3,
        )


def explain(model, inputs, method="gradient", targets="top1", *, score="logits", batch_size=32, **options) -> Explanation:
    """Explain ``model``'s scores for ``inputs`` with ``method``.

    Args:
        model: a single-input Keras model. It is never changed; it runs with ``training=False``.
        inputs: array-like ``[B, ...]`` already in the model's input space (images
            ``[B, H, W, C]``, sequences ``[B, T, F]``, tabular ``[B, F]``), floating point.
        method: one of :func:`saliency_kit.methods.names` (see that module for each formula and
            map reduction).
        targets: an int (every input), a sequence of ``B`` ints, an int array ``[B, K]``,
            ``"topK"`` (the K best classes of each input, best first) or a callable
            ``score_fn(values) -> [B] or [B, K]`` where ``values`` are what ``score`` selects
            (logits by default).
        score: ``"logits"`` — differentiate the values before a final softmax/sigmoid when the
            model has one (fused in a layer or separate) — or ``"output"``.
        batch_size: the most model evaluations (inputs × classes × samples × steps) per
            compiled call. Results do not depend on it.
        **options: the method's options (defaults in ``saliency_kit.methods.get(m).defaults``).

    Returns:
        an :class:`~saliency_kit.Explanation`.

    Raises:
        ValueError: unknown method or option, bad targets, inputs of the wrong shape or dtype —
            before any model evaluation.
    """
    chosen = methods.get(method)
    options = chosen.options(options)
    _check_score(score)
    engine.check_batch_size(batch_size)
    x = engine.check_inputs(model, inputs)
    chosen.validate(Request(model, x, None, score, None, batch_size), options)
    request = _request(model, x, targets, score, batch_size)
    result = chosen.compute(request, **options)
    if chosen.warn_zero:
        _warn_zero_maps(result.attributions, request.targets, method)
    return Explanation(
        attributions=result.attributions,
        maps=result.maps,
        targets=request.targets,
        scores=result.scores,
        method=method,
        options=result.options,
        layer=result.layer,
        completeness_gap=result.completeness_gap,
    )


def _request(model, x, targets, score, batch_size) -> Request:
    """Check and resolve ``targets`` (one forward pass for ``"topK"``) into a :class:`Request`."""
    score_fn = targets if callable(targets) and not isinstance(targets, str) else None
    resolved = resolve_targets(model, x, targets, score=score, batch_size=batch_size)
    return Request(model, x, resolved, score, score_fn, batch_size)


def jacobian(model, inputs, classes=None, *, score="logits", rule=None, batch_size=32) -> np.ndarray:
    """Per-class gradients ``[B, K, *inputs.shape[1:]]`` (float32): row k is ``∂s_k/∂x``.

    Args:
        classes: class indices (a sequence of K ints, the same for every input, or an int array
            ``[B, K]``); default every output class.
        score: ``"logits"`` or ``"output"``, as in :func:`explain`.
        rule: ``None``, ``"guided"``, ``"deconv"`` or a ``ModifiedBackprop``: the jacobian
            through ``sk.rewrite(model, rule)``.
        batch_size: the most (input × class) gradients per compiled call.

    The forward pass of each chunk of inputs is shared by its classes (vectorised backward
    passes), so K classes cost far less than K calls.
    """
    _check_score(score)
    engine.check_batch_size(batch_size)
    x = engine.check_inputs(model, inputs)
    columns = score_columns(model)
    if columns is None:
        raise ValueError("jacobian needs a model whose output is [batch, classes].")
    if classes is None:
        classes = np.arange(columns)
    array = np.asarray(classes)
    if array.ndim == 1:
        array = np.tile(array, (len(x), 1))
    elif array.ndim == 0:
        array = np.full((len(x), 1), array)
    spec = parse_targets(array, len(x), columns)
    return engine.gradients(model, x, spec.classes, score=score, rule=rule, batch_size=batch_size).attributions
