"""The prepare step of every explanation: one call of :func:`saliency_kit.explain` (an
:class:`~.request.ExplainCall`) checked and laid out as the jobs the engine runs.

:func:`prepare` reads what the call explains (:func:`.parts.read`: the model's one float input
is a space of one part, :meth:`.parts.Parts.single`; several inputs, token ids and inner layers
are parts of a :class:`~saliency_kit.engine.space.Space`), gives each *run* of the method its
prepared options, resolves the targets once for every run, and builds one frozen
:class:`~saliency_kit.engine.job.Job` per run.

A method whose formula is elementwise (the gradient family, integrated gradients, SmoothGrad,
DeepLIFT, LRP, ...) runs once on every explained part together, packed side by side: a path, a
noise draw or a baseline moves all inputs at once, and integrated gradients' completeness holds
over all of them. A method that needs one input's own axes (``spatial``: occlusion, Blur IG, the
CAM methods, ...) runs once per explained input, the others held at their values; among several
inputs, one it does not fit (an image method, a tabular input) is skipped and said.

Every check comes before any model evaluation, but the forward passes that read an inner
layer's values and where its path starts. ``sk.explain``, ``sk.evaluate``'s re-explanations
and the command line's pre-flight check (:func:`check_options`) all prepare here.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import engine
from ..engine.job import Job
from ..engine.space import Space
from ..model.model_inputs import inputs_reaching
from ..model.walker import find_layer
from ..targets.parse import class_names_of
from .layer_start import check_layer_start, layer_baselines
from .parts import Parts, part_options, read, run_rows
from .request import ExplainCall, check_input_keys, method_request, resolve_request

if TYPE_CHECKING:
    import keras

    from ..targets.base import Resolved

__all__ = ["Run", "Prepared", "prepare", "check_options", "resolve_parts"]


@dataclass(frozen=True, eq=False)
class Run:
    """One run of the method (see the module).

    Attributes:
        parts: the :class:`~saliency_kit.engine.space.Part` s it explains (some of
            :attr:`Prepared.parts`').
        space: how they are laid out in the engine's rows.
        rows: the engine's rows ``[B, ...]``: the points, or the token ids its kernel embeds.
        channel_axis: the channel axis of one row (``-1`` for packed parts and layers);
            ``layer_axis`` that of the model's spatial layers (CAM layers).
        options: the method's prepared options; ``recorded`` what the explanation records of
            them (a baseline token embedded in the kernel as that token's id).
        points: an array of the points' shape and dtype (what options and axes are checked
            against; for token ids, zeros).
        job: what the engine runs (``None`` until the targets are resolved).
    """

    parts: tuple
    space: Space
    rows: np.ndarray
    channel_axis: int
    layer_axis: int
    options: dict
    recorded: dict
    points: Any = None
    job: Job | None = None


@dataclass(frozen=True, eq=False)
class Prepared:
    """One call of ``explain``, prepared: its ``call``, the method's options as ``given`` (a
    conductance layer filled in), the ``parts`` it explains (:class:`~.parts.Parts`), the targets
    resolved once on the clean inputs (``selection``), its ``runs`` (each with its job) and the
    inputs the method was not run on, ``skipped`` ``((part name, why), ...)``."""

    call: ExplainCall
    given: dict
    parts: Parts
    selection: Resolved
    runs: tuple
    skipped: tuple


def prepare(call: ExplainCall) -> Prepared:
    """``call`` checked and laid out as one :class:`Job` per run (see the module). Raises
    ``TypeError``/``ValueError`` as :func:`saliency_kit.explain` documents."""
    given, parts = _read(call)
    keys = check_input_keys(call.input_keys, parts.count)
    runs, skipped = _plan(call, parts, given)
    selection = _resolve(call, parts)
    jobs = tuple(dataclasses.replace(run, job=_job(call, parts, run, selection, keys)) for run in runs)
    return Prepared(call, given, parts, selection, jobs, tuple(skipped))


def check_options(call: ExplainCall) -> dict:
    """The method's options as the call's first run would use them (defaults filled in, a seed
    drawn, the method's own ``prepare`` applied), after every check :func:`prepare` makes before
    resolving targets: no work."""
    given, parts = _read(call)
    runs, _ = _plan(call, parts, given)
    return runs[0].options


def _read(call: ExplainCall) -> tuple[dict, Parts]:
    """``(options as given, parts)``: the call's settings checked and its inputs read."""
    model, chosen = call.model, call.chosen
    engine.check_score(call.score)
    batch_size = engine.check_batch_size(call.batch_size)
    check_layer_start(call.layer_start)
    token = call.baseline_token
    if isinstance(token, bool) or not isinstance(token, (int, np.integer)) or token < 0:
        raise ValueError(f"baseline_token must be a non-negative token id; received {token!r}.")
    given = dict(call.options)
    attribute_to = call.attribute_to
    if chosen.layered:  # conductance: a path in input space, attributions in a layer's
        given["layer"] = _conductance_layer(model, attribute_to, given)
        attribute_to = None
    parts = read(model, call.inputs, attribute_to, batch_size=batch_size, embedded=False)
    if call.points is not None:
        parts.points = _given_points(parts, call.points)
    layers = [p.name for p in parts.parts if p.input is None]
    if chosen.spatial and layers:
        raise ValueError(
            f"{chosen.name} runs on a model input's own axes; attribute_to=LAYER takes the gradient family, "
            f"integrated gradients, SmoothGrad, DeepLIFT, LRP and conductance; received attribute_to={layers[0]!r}."
        )
    return given, parts


def _plan(call: ExplainCall, parts: Parts, given: dict) -> tuple[list, list]:
    """``(runs, skipped)``: a spatial method's one run per explained input, another's one run of
    all; among several runs, one whose input the method does not fit is skipped with why."""
    groups = [[p] for p in parts.parts] if call.chosen.spatial else [list(parts.parts)]
    runs, skipped = [], []
    for group in groups:
        laid_out = _laid_out(call, parts, group, given)
        try:
            runs.append(_fitted(call, parts, laid_out, given))
        except ValueError as error:
            if len(groups) == 1:
                raise
            skipped.append((group[0].name, str(error)))  # a method for images, and a tabular input
    if not runs:
        raise ValueError(
            f"{call.chosen.name} explains none of the inputs {[name for name, _ in skipped]}: "
            + "; ".join(f"{name}: {why}" for name, why in skipped)
        )
    return runs, skipped


def _laid_out(call: ExplainCall, parts: Parts, group: list, given: dict) -> Run:
    """One run's layout and its options checked (the method's ``prepare`` not yet applied)."""
    model, chosen = call.model, call.chosen
    batch_size = engine.check_batch_size(call.batch_size)
    space, rows, x = run_rows(model, parts, group)  # x: the points, or their shape alone
    layer_axis = engine.layer_channel_axis(model, x)
    channel_axis = _channel_axis(model, parts, group, x, call.channels_axis, layer_axis)
    token = call.baseline_token
    values, space = part_options(model, parts, group, space, given, baseline_token=token, defaults=chosen.defaults)
    values = layer_baselines(
        model, parts, group, space, values, given=given, defaults=chosen.defaults, baseline_token=token,
        layer_start=call.layer_start, batch_size=batch_size,
    )  # fmt: skip
    return Run(tuple(group), space, rows, channel_axis, layer_axis, chosen.check_options(values), {}, points=x)


def _fitted(call: ExplainCall, parts: Parts, run: Run, given: dict) -> Run:
    """``run`` with the method's own ``prepare`` applied (a layer the model lacks, a baseline of
    the wrong shape: ``ValueError``) and the options it records."""
    model, chosen, values = call.model, call.chosen, run.options
    if chosen.prepare is not None:
        batch_size = engine.check_batch_size(call.batch_size)
        request = method_request(model, run.points, call.score, batch_size, call.class_names, run.channel_axis)
        values = chosen.prepare(request, values)
    _check_reached(model, parts, list(run.parts), values, chosen.layered)
    tokens = {name: token for name, token in run.space.fills if name not in given}
    recorded = {**values, **tokens}  # a baseline token embedded in the kernel: recorded as that id
    return dataclasses.replace(run, options=values, recorded=recorded)


def _resolve(call: ExplainCall, parts: Parts) -> Resolved:
    names = class_names_of(call.class_names)
    return resolve_parts(call.model, parts, call.targets, call.score, call.batch_size, names, method=call.chosen)


def resolve_parts(
    model: keras.Model,
    parts: Parts,
    targets: Any,
    score: str,
    batch_size: int,
    class_names: Any = None,
    method: Any = None,
) -> Resolved:
    """``targets`` (any form) resolved once for what ``parts`` (:func:`.parts.read`) explains, the
    model running on every input as given (one batched forward pass when they need the scores):
    the prepare step's, and every metric's on its clean inputs. ``method``: the declaration of
    the method they are resolved for, if any (a box target's default score depends on it)."""
    first = parts.points[0] if parts.points[0] is not None else parts.held[parts.parts[0].input]  # token ids
    at = None if parts.plain else parts.held
    batch_size = engine.check_batch_size(batch_size)
    return resolve_request(model, first, targets, score, batch_size, class_names, at=at, method=method)


def _job(call: ExplainCall, parts: Parts, run: Run, selection: Resolved, keys: np.ndarray | None) -> Job:
    """The engine's job of one run: a plain request's rows as they are, others in their space."""
    chosen = call.chosen
    return Job(
        call.model,
        run.rows,
        selection,
        run.options,
        score=call.score,
        batch_size=engine.check_batch_size(call.batch_size),
        keys=keys,
        channel_axis=run.channel_axis,
        layer_axis=run.layer_axis,
        space=None if parts.plain else run.space,
        held=None if parts.plain else parts.held,
        cost=chosen.cost(run.options) if chosen.cost else 1,
    )


def _given_points(parts: Parts, points: list) -> list:
    """``points`` checked against the parts: one array ``[B, *part.shape]`` each, in the part's dtype."""
    if len(points) != len(parts.parts):
        raise ValueError(f"points must hold one array per explained part ({len(parts.parts)}); received {len(points)}.")
    out = []
    for part, value in zip(parts.parts, points):
        array = np.asarray(value)
        if array.shape != (parts.count, *part.shape):
            raise ValueError(
                f"the points of part {part.name!r} must have shape {[parts.count, *part.shape]}; "
                f"received {list(array.shape)}."
            )
        out.append(np.ascontiguousarray(array.astype(part.dtype, copy=False)))
    return out


def _conductance_layer(model: keras.Model, attribute_to: Any, given: dict) -> str:
    layer = given.get("layer") if attribute_to is None else attribute_to
    if layer is None:
        raise ValueError(
            "conductance attributes to an inner layer: give attribute_to=LAYER (a name, a path or the layer); "
            "received none."
        )
    return find_layer(model, layer)


def _channel_axis(
    model: keras.Model, parts: Parts, group: list, x: np.ndarray, given: int | None, layer_axis: int
) -> int:
    """The channel axis of one row of ``x``: the model's one input's (given, or found from the
    model, through transposes); an image, sequence or volume input's among several (given, or
    ``layer_axis``, its spatial layers' data format); ``-1`` for packed parts and layers."""
    if parts.plain:
        return engine.channel_axis(model, x, given)
    if len(group) > 1 or group[0].input is None or x.ndim < 3:
        return -1
    if given is not None:
        return engine.check_channels_axis(given, x.ndim)
    return layer_axis


def _check_reached(model: keras.Model, parts: Parts, group: list, values: dict, conductance: bool) -> None:
    """A layer method's layer must be on a path from this run's input among several (else its
    map is not of that input): ``ValueError`` otherwise."""
    if conductance or parts.plain or "layer" not in values or group[0].input is None:
        return
    if group[0].input not in inputs_reaching(model, values["layer"]):
        raise ValueError(
            f"layer {values['layer']!r} is on no path from input {group[0].name!r}, so its map is not of that "
            "input; choose a layer after that input with layer=."
        )
