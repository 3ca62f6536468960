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

import dataclasses
import math
from typing import TYPE_CHECKING, Any

import numpy as np

from ..pipeline.request import resolve_request
from ..targets import class_names_of
from ._common import METHOD_BASELINE, baseline_values, check_float, check_int, method_baseline
from .draws import rng
from .registry import metric
from .scoring import Job, forward, padded_replacer, padded_steps, score_jobs
from .shared import Shared
from .views import flat_elements

if TYPE_CHECKING:
    import keras

__all__ = ["completeness", "non_sensitivity", "input_invariance"]


@metric("completeness", family="axiomatic", higher_is_better=False)
def completeness(
    model: keras.Model,
    inputs: Any,
    explanation_or_method: Any = "gradient",
    targets: Any = "top1",
    *,
    seed: int = 0,
    batch_size: int = 32,
    **options: Any,
) -> np.ndarray:
    """``|Σ a − (f(x) − f(x̄))|`` per input and target: float ``[B, K]`` (0 = complete), where ``x̄``
    is the point the attributions are measured from. By default (``perturb_baseline="method"``)
    that is the explaining method's own baseline when it declares one (integrated gradients,
    DeepLIFT, guided IG, conductance: the ``baseline`` given to it, else its default, zeros),
    read from the method's options or from the Explanation; for any other explanation (a method
    without a baseline, a bare array, a callable) it is ``"black"``, the input's minimum. Give
    ``perturb_baseline=`` (``"black"``, ``"white"``, ``"mean"``, a number or an array) to measure
    from another point. A token input explained in embedding space has an embedding as its
    baseline: give ``perturb_baseline=`` there (``ValueError`` otherwise).

    Quantus 0.6.0 returns ``Σ a == f(x) − f(x̄)`` compared for exact float equality (so always
    False in practice) and normalises the attributions by default (which breaks the sum); here
    the gap itself is returned and the attributions are not normalised unless asked.

    Shared options (:class:`~saliency_kit.evaluate.shared.Shared`): ``perturb_baseline="method"``,
    ``normalise=False``, ``abs=False``, ``score="logits"``, ``softmax=False``.
    """
    shared = Shared.read(
        options,
        seed=seed,
        batch_size=batch_size,
        perturb_baseline=METHOD_BASELINE,
        normalise=False,
        abs=False,
        score="logits",
        softmax=False,
    )
    scored = shared.prepare(model, inputs, explanation_or_method, targets)
    a, flat = flat_elements(scored, normalise=shared.normalise, absolute=shared.absolute)
    chosen, own = _baseline_of(shared.perturb_baseline, scored)
    chosen = chosen if own is None else own
    baseline = np.stack(
        [baseline_values(chosen, row, row.size, rng(seed, "completeness", b)) for b, row in enumerate(flat)]
    ).reshape(scored.x.shape)
    sources = np.arange(len(flat))
    change = forward(scored, scored.x, sources) - forward(scored, baseline, sources)
    return np.abs(a.sum(-1) - change)


def _baseline_of(perturb_baseline: Any, scored: Any) -> tuple[Any, np.ndarray | None]:
    """``(perturb_baseline, own)``: ``own`` the explaining method's baseline, one flat row
    ``[E]`` of what is scored, when ``perturb_baseline`` is ``"method"`` and the method has one;
    else None, and ``"method"`` read as ``"black"``."""
    if not (isinstance(perturb_baseline, str) and perturb_baseline == METHOD_BASELINE):
        return perturb_baseline, None
    own = method_baseline(scored.method, scored.options, scored.x, scored.parts)
    return ("black", None) if own is None else (perturb_baseline, own.ravel())


@metric("non_sensitivity", family="axiomatic", higher_is_better=False)
def non_sensitivity(
    model: keras.Model,
    inputs: Any,
    explanation_or_method: Any = "gradient",
    targets: Any = "top1",
    *,
    eps: float = 1e-5,
    features_in_step: int = 1,
    seed: int = 0,
    batch_size: int = 32,
    **options: Any,
) -> np.ndarray:
    """How many steps of ``features_in_step`` elements violate non-sensitivity: float ``[B, K]``
    (0 is best). A step violates it when "its attribution is below ``eps``" (every element of it)
    differs from "replacing it by the baseline changes the score by less than ``eps``". Each step is
    replaced alone, starting from the input.

    Quantus 0.6.0 compares per element with ``features_in_step=1`` and fails with a shape error
    otherwise; here a step is one unit (the same as Quantus for one element per step).
    ``n_elements / features_in_step`` evaluations per input.

    The baseline is, by default (``perturb_baseline="method"``), the explaining method's own, as
    for :func:`completeness` (a feature at the method's baseline gets no attribution from it);
    ``"black"`` for a method without one, a bare array or a callable.

    Shared options (:class:`~saliency_kit.evaluate.shared.Shared`): ``perturb_baseline="method"``,
    ``normalise=True``, ``abs=True``, ``score="logits"``, ``softmax=True``.
    """
    eps = check_float("eps", eps)
    features_in_step = check_int("features_in_step", features_in_step)
    shared = Shared.read(
        options,
        seed=seed,
        batch_size=batch_size,
        perturb_baseline=METHOD_BASELINE,
        normalise=True,
        abs=True,
        score="logits",
        softmax=True,
    )
    scored = shared.prepare(model, inputs, explanation_or_method, targets)
    a, flat = flat_elements(scored, normalise=shared.normalise, absolute=shared.absolute)
    chosen, own = _baseline_of(shared.perturb_baseline, scored)
    n = flat.shape[1]
    steps = math.ceil(n / features_in_step)
    clean = forward(scored, scored.x, np.arange(len(flat)))
    padded = padded_steps(np.arange(n), features_in_step)
    jobs = []
    for b in range(len(flat)):
        generator = rng(seed, "non_sensitivity", b)
        if own is not None:  # the method's baseline at each step's elements
            values = np.where(padded >= 0, own[np.maximum(padded, 0)], 0.0)
        else:
            values = np.stack([baseline_values(chosen, flat[b], features_in_step, generator) for _ in range(steps)])
        jobs.append(Job(steps, padded_replacer(flat[b], padded, values), b, np.arange(a.shape[1])))
    result = np.empty(a.shape[:2])
    for b, scores in enumerate(score_jobs(scored, jobs)):
        insensitive = np.abs(scores - clean[b][None]) < eps  # [steps, K]
        for k in range(a.shape[1]):
            unattributed = np.all(np.where(padded >= 0, a[b, k][np.maximum(padded, 0)] < eps, True), axis=1)
            result[b, k] = np.sum(unattributed ^ insensitive[:, k])
    return result


@metric("input_invariance", family="axiomatic", higher_is_better=True)
def input_invariance(
    model: keras.Model,
    inputs: Any,
    explanation_or_method: Any = "gradient",
    targets: Any = "top1",
    *,
    input_shift: float = -1.0,
    atol: float = 1e-4,
    seed: int = 0,
    batch_size: int = 32,
    **options: Any,
) -> np.ndarray:
    """Whether the explanation of ``x + input_shift`` on the shifted model ``m'(z) = m(z − input_shift)``
    equals the explanation of ``x`` on ``m`` (every element within ``atol``): float ``[B, K]``, 1.0
    or 0.0. The plain gradient passes; gradient × input does not.

    The shifted model is a new functional model (a ``Rescaling`` layer with offset ``−input_shift``
    before ``model``, on each explained input of a model with several; the others are not
    shifted); ``model`` is not changed. A target object is resolved again on the shifted model.
    Token ids explained in embedding space cannot be shifted (``ValueError``). Quantus 0.6.0 leaves
    the first element of each input unshifted, so even the plain gradient fails there; here every
    element is shifted.

    Shared options (:class:`~saliency_kit.evaluate.shared.Shared`): ``score="logits"``.
    """

    input_shift, atol = check_float("input_shift", input_shift), check_float("atol", atol)
    shared = Shared.read(options, seed=seed, batch_size=batch_size, score="logits")
    scored = shared.prepare(model, inputs, explanation_or_method, targets)
    x_shifted = (scored.x.astype(np.float64) + input_shift).astype(scored.x.dtype)
    parts = scored.parts
    if parts is None:
        shifted_model = _shifted_model(model, {0}, input_shift)
    else:
        tokens = [part.name for part in parts.parts if part.embedding]
        if tokens:
            raise ValueError(
                "input_invariance shifts the explained inputs, and token ids explained in embedding space "
                f"cannot be shifted; explain a float input (attribute_to=); received token input {tokens[0]!r}."
            )
        shifted_model = _shifted_model(model, {part.input for part in parts.parts}, input_shift)
        held = list(parts.held)
        for part, value in zip(parts.parts, scored.space.unpack(x_shifted, lead=1)):
            held[part.input] = value
        parts = dataclasses.replace(parts, held=held, points=scored.space.unpack(x_shifted, lead=1))
    options = dict(scored.options)
    if isinstance(options.get("layer"), str):
        options["layer"] = f"{model.name}/{options['layer']}"
    selection = scored.selection
    if (
        scored.target is not None
    ):  # a target object, bound again to the shifted model (a unit's layer path, a head's key)
        selection = resolve_request(
            shifted_model,
            x_shifted,
            scored.target,
            scored.score,
            scored.batch_size,
            class_names_of(scored.class_names),
            at=None if parts is None else parts.held,
        )
    shifted = dataclasses.replace(scored, model=shifted_model, options=options, parts=parts, selection=selection)
    every = np.arange(len(scored.x))
    moved = shifted.explain(x_shifted, every, every)
    close = np.isclose(scored.elements, moved, atol=atol, rtol=1e-5)
    return np.all(close.reshape(*close.shape[:2], -1), axis=-1).astype(np.float64)


def _shifted_model(model: keras.Model, shifted: set, input_shift: float) -> keras.Model:
    """``model`` behind a ``Rescaling`` with offset ``−input_shift`` on the inputs ``shifted``
    (positions in graph order), taking the same inputs (names, structure) as ``model`` and giving
    its outputs under their names (a head target finds its head)."""
    import keras

    from ..model.keras_private import input_structure
    from ..model.model_inputs import model_inputs

    infos = model_inputs(model)
    names = [info.name for info in infos]
    tensors = [keras.Input(shape=info.shape[1:], dtype=info.dtype, name=info.name) for info in infos]
    moved = [keras.layers.Rescaling(1.0, offset=-input_shift)(t) if i in shifted else t for i, t in enumerate(tensors)]
    given: Any
    called: Any
    if isinstance(input_structure(model), dict):
        given, called = dict(zip(names, tensors)), dict(zip(names, moved))
    else:
        given, called = (tensors, moved) if len(tensors) > 1 else (tensors[0], moved[0])
    outputs = model(called)
    heads = list(getattr(model, "output_names", None) or [])
    if isinstance(outputs, (list, tuple)) and len(heads) == len(outputs):
        outputs = [keras.layers.Identity(name=name)(t) for name, t in zip(heads, outputs)]
    return keras.Model(given, outputs, name=f"{model.name}_shifted")
