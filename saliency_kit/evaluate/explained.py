"""What a metric scores: the explanation prepared, its targets and the parts explained.

A metric is called as ``NAME(model, inputs, explanation_or_method, targets, *, seed, batch_size,
**options)``. :func:`prepare` turns those arguments into a :class:`Scored`:

- an :class:`~saliency_kit.Explanation` is scored as it is (its targets are the targets);
- a method name is run with :func:`saliency_kit.explain` (``targets`` resolved the way ``explain``
  resolves them); ``"random"`` is a seeded random map, the meta-check every table should hold;
- a bare array of attributions ``[B, K, *input]`` (or ``[B, *input]``; with several explained
  inputs, one per input in a list or dict, as ``explain`` gives them) is scored with ``targets``.

The two views of an attribution (``elements``, ``pixels``) are :mod:`._common`'s.

What is explained need not be a model's one input: with several model inputs or token ids
(:mod:`saliency_kit.pipeline.parts`), ``x`` is the explained part's values in its own shape (an image of an
image + metadata model, token ids' embeddings), or several parts flattened side by side
``[B, E]``; every row a metric builds is a copy of one input (its *source*) and carries that
input's values of the model inputs not explained. A target object (``region``, ``box``,
``output``, ``unit``) is resolved once on the clean inputs (:attr:`Scored.selection`); a copy is
scored and re-explained with its source's payload (:class:`Given`).

Every random draw comes from a generator keyed by ``(seed, metric, input position)``
(:mod:`.draws`), and every model evaluation goes through the engine's compiled batched kernels
(:mod:`.scoring`), so results do not depend on ``batch_size`` nor on how the inputs are grouped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import engine, methods
from ..engine.space import Space
from ..explanation import Explanation
from ..methods import get as get_method
from ..pipeline.request import ExplainCall
from ..targets import Resolved, as_target, class_names_of, is_target
from ..targets.base import Target
from ._common import RANDOM, element_view, part_axes, part_elements, part_values, seed_noise, to_pixels
from .draws import random_attributions
from .selected import with_columns

if TYPE_CHECKING:
    import keras

__all__ = ["Scored", "Given", "prepare", "rerun_options"]


@dataclass
class Scored:
    """An explanation ready to be scored (arrays float64 unless said).

    Attributes:
        model: the Keras model (None for the model-free metrics on bare maps).
        x: ``[B, *input]`` the explained values (the model's dtype): the model's one input; with
            :attr:`parts`, the one explained part's values ``[B, *part]`` (an image of an
            image + metadata model, token ids' embeddings ``[B, T, D]``), or several parts
            flattened side by side ``[B, E]`` (``E`` the sum of their sizes).
        elements: ``[B, K, *input]`` attributions per element of ``x``.
        pixels: ``[B, K, H, W]`` for images, else the same as ``elements``; for one explained part
            of a model with several inputs or token ids, the explanation's maps of it (token ids'
            ``[B, K, T]``).
        targets: int64 ``[B, K]`` the column of each attribution (a class, a callable's column, a
            target object's column).
        channel_axis: the channel axis of one input (``-1`` or ``0``) for images, else None.
        score, batch_size: how the model's scores are read (as for ``explain``).
        softmax: score the softmax of the scores (Quantus' ``softmax=True``) rather than the
            scores; for a target object its probability (``Target.probabilities``).
        method, options: what re-runs the explainer on new inputs (None for a bare array).
        seed: the metric's seed.
        selection: the target resolved on the clean inputs (:class:`~saliency_kit.targets.Resolved`,
            its ``target`` the bound target object: a class target's, a callable's, a region's, ...).
        target: the target object as given (None unless a target object was given).
        parts: the model's inputs and the parts explained (:class:`saliency_kit.pipeline.parts.Parts`) when
            the request is not one float input; ``space`` their :class:`~saliency_kit.engine.space.Space`.
        baseline_token: the token whose embedding is a token part's baseline (as ``explain``'s).
        class_names: the names class targets may use (as ``explain``'s ``class_names=``).
    """

    model: object
    x: np.ndarray
    elements: np.ndarray
    pixels: np.ndarray
    targets: np.ndarray
    channel_axis: int | None = None
    score: str = "logits"
    batch_size: int = 32
    method: str | Callable | None = None
    options: dict = field(default_factory=dict)
    seed: int = 0
    softmax: bool = False
    selection: Any = None
    target: Any = None
    parts: Any = None
    space: Any = None
    baseline_token: int = 0
    class_names: Any = None

    @property
    def names(self) -> list:
        """The names of the explained parts (``[]`` for a model's one input)."""
        return [] if self.parts is None else [part.name for part in self.parts.parts]

    @property
    def packed(self) -> bool:
        """Several parts explained, flattened side by side in :attr:`x`."""
        return self.space is not None and self.space.packed

    def explain(
        self, points: np.ndarray, sources: np.ndarray, keys: np.ndarray, columns: np.ndarray | None = None
    ) -> np.ndarray:
        """Element attributions ``[N, K, *input]`` of the same method at ``points`` ``[N, *input]``
        (one batched call), each a copy of the input ``sources[n]`` (whose target payload and
        other model inputs it keeps), for its columns ``columns`` (int ``[N, K]``; default its
        source's), ``keys`` one noise key per point (seeded methods)."""
        if self.method is None:
            raise ValueError(
                "this metric re-runs the explainer on perturbed inputs: give a method name (e.g. "
                "'gradient') or an Explanation, not a bare attribution array; received an array."
            )
        sources = np.asarray(sources, dtype=np.int64)
        columns = self.targets[sources] if columns is None else np.asarray(columns, dtype=np.int64)
        if self.method == RANDOM:
            return random_attributions(points.shape, columns, keys, self.seed)
        if callable(self.method):
            values = np.asarray(self.method(self.model, points, columns), dtype=np.float64)
            return element_view(values, points, self.channel_axis, "the explainer's attributions")
        targets = self._targets_of(sources, columns)
        if self.parts is not None:
            return self._explain_parts(points, sources, keys, targets)
        from ..pipeline.api import explain

        expl = explain(
            self.model,
            points,
            self.method,
            targets,
            score=self.score,
            batch_size=self.batch_size,
            input_keys=keys,
            with_scores=False,
            **self.options,
        )
        return element_view(
            np.asarray(expl.attributions, dtype=np.float64), points, self.channel_axis, "the explanation's attributions"
        )

    def _targets_of(self, sources: np.ndarray, columns: np.ndarray) -> Any:
        """What ``explain`` is given for rows copied from ``sources``: the target resolved on the
        clean inputs, taken at the sources (at ``columns``)."""
        taken = self.selection.take(sources)
        if not np.array_equal(columns, taken.columns):
            taken = with_columns(taken, columns, "this metric")
        return Given(taken)

    def _explain_parts(self, points: np.ndarray, sources: np.ndarray, keys: np.ndarray, targets: Any) -> np.ndarray:
        """:meth:`explain` with parts: every model input at its source's values, the explained
        parts at ``points`` (an embedding's or a layer's swapped in by the engine)."""
        from ..pipeline.prepare import prepare
        from ..pipeline.results import explain_prepared

        parts = self.parts
        values = self.space.unpack(np.asarray(points), lead=1)
        inputs = [held[sources] for held in parts.held]
        for part, value in zip(parts.parts, values):
            if part.layer is None:
                inputs[part.input] = value.astype(inputs[part.input].dtype, copy=False)
        inner = any(part.layer is not None for part in parts.parts)
        given = inputs if len(inputs) > 1 else inputs[0]
        call = ExplainCall(
            self.model,
            given,
            str(self.method),
            methods.get(str(self.method)),
            targets,
            score=self.score,
            batch_size=self.batch_size,
            input_keys=keys,
            attribute_to=self.names,
            baseline_token=self.baseline_token,
            with_scores=False,
            options=dict(self.options),
            points=values if inner else None,
        )
        with engine.one_call(self.model):
            expl = explain_prepared(prepare(call))
        axes = part_axes(self.model, parts.parts, values)
        return part_elements(expl.attributions, parts, values, axes, "the explanation's attributions")


class Given(Target):
    """A target resolved already (a :class:`~saliency_kit.targets.Resolved`), given to ``explain`` as
    it is: the perturbed copies of inputs are explained with their source's columns and payload (a
    ``"predicted"`` region keeps the clean input's mask)."""

    kind = "given"

    def __init__(self, resolved: Any):
        self.resolved = resolved

    def resolve(self, request: Any) -> Any:
        columns = np.asarray(self.resolved.columns)
        if len(columns) != request.num_inputs:
            raise ValueError(
                f"a resolved target must have one row per input ({request.num_inputs}); received {len(columns)}."
            )
        return Resolved(columns, self.resolved.payload, list(self.resolved.info), self.resolved.target)


def _image_channel_axis(model: keras.Model, x: np.ndarray) -> int | None:
    if x.ndim != 4:
        return None

    return engine.channel_axis(model, x)


def prepare(
    model: keras.Model,
    inputs: Any,
    explanation_or_method: Any,
    targets: Any = "top1",
    *,
    seed: int = 0,
    batch_size: int = 32,
    score: str = "logits",
    softmax: bool = False,
    method_options: dict | None = None,
    perturbs: bool = False,
) -> Scored:
    """Resolve a metric's arguments into a :class:`Scored` (see the module docstring). ``attribute_to``,
    ``baseline_token`` and ``class_names`` among ``method_options`` are ``explain``'s; ``perturbs``: the metric
    evaluates the model at perturbed values of what was explained (no inner layer, then)."""
    from ..pipeline.api import explain
    from ..pipeline.parts import read
    from ..pipeline.prepare import resolve_parts

    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be an int; received {seed!r}.")
    method_options = dict(method_options or {})
    attribute_to = method_options.pop("attribute_to", None)
    baseline_token = method_options.pop("baseline_token", 0)
    class_names = method_options.pop("class_names", None)
    engine.check_score(score)
    batch_size = engine.check_batch_size(batch_size)
    expl = explanation_or_method if isinstance(explanation_or_method, Explanation) else None
    if expl is not None and expl.parts:
        named = list(expl.parts)
        if attribute_to is not None and _listed(attribute_to) != named:
            raise ValueError(
                f"attribute_to must be what the explanation explains ({named}) or left out; received {attribute_to!r}."
            )
        attribute_to = named
    read_parts = read(model, inputs, attribute_to, batch_size=batch_size)
    if perturbs:
        _refuse_layers(read_parts)
    first = read_parts.points[0]
    parts = None if read_parts.plain else read_parts  # the model's one input: x itself
    target = as_target(targets)
    if expl is not None and target.score_vector:  # an explanation of classes is scored at its own classes
        _refuse_classes_for_objects(expl, targets)
        target = as_target(np.asarray(expl.targets, dtype=np.int64))
    method_name = expl.method if expl is not None else explanation_or_method
    declared = get_method(method_name) if isinstance(method_name, str) and method_name in methods.names() else None
    selection = resolve_parts(model, read_parts, target, score, batch_size, class_names_of(class_names), declared)
    if softmax and target.kind == "callable":
        raise ValueError(
            "softmax=True scores the softmax of the model's classes: give class targets or "
            "softmax=False; received a score function as targets."
        )
    method: Any = None
    options: dict = {}
    if expl is not None:
        method, options = expl.method, rerun_options(expl)
        score = expl.options.get("score", score)
        _check_explained_targets(expl, selection, targets)
    elif isinstance(explanation_or_method, str) and explanation_or_method != RANDOM:
        seed_noise(explanation_or_method, method_options, seed)
        given = inputs if parts is not None else first
        settings: dict[str, Any] = dict(score=score, batch_size=batch_size, with_scores=False)
        settings.update(attribute_to=attribute_to, baseline_token=baseline_token, class_names=class_names)
        expl = explain(model, given, explanation_or_method, Given(selection), **settings, **method_options)
        method, options = explanation_or_method, method_options
        explained = list(expl.parts or [])
        if parts is not None and explained != [part.name for part in parts.parts]:
            parts = read(model, inputs, explained, batch_size=batch_size)  # a method for images skipped one
    elif callable(explanation_or_method) and not isinstance(explanation_or_method, str):
        if parts is not None or is_target(targets):
            raise ValueError(
                "a callable explainer takes one model input and class targets; for several inputs, token "
                "ids or target objects give a method name or an Explanation; received a callable."
            )
        method = explanation_or_method

    x, space, axes, channel_axis = _explained_points(model, parts, first)
    common: dict = dict(
        model=model,
        x=x,
        channel_axis=channel_axis,
        score=score,
        batch_size=batch_size,
        seed=int(seed),
        softmax=bool(softmax),
        selection=selection,
        target=targets if is_target(targets) else None,
        parts=parts,
        space=space,
        baseline_token=baseline_token,
        class_names=class_names,
        method=method,
        options=options,
    )

    return _attributed(common, explanation_or_method, expl, targets, axes)


def _explained_points(model: keras.Model, parts: Any, first: np.ndarray) -> tuple:
    """``(x, space, axes, channel_axis)``: what a metric perturbs (the model's one input ``first``,
    or the parts packed in their space), the parts' channel axes and the channel axis of ``x``."""
    if parts is None:
        return first, None, [], _image_channel_axis(model, first)

    space = Space(tuple(parts.parts), len(parts.names))
    axes = part_axes(model, parts.parts, parts.points)
    return space.pack(parts.points), space, axes, axes[0] if len(axes) == 1 else None


def _attributed(common: dict, explanation_or_method: Any, expl: Any, targets: Any, axes: list) -> Scored:
    """The :class:`Scored` of an Explanation ``expl``, ``"random"``, a callable explainer or an
    attribution array, with the fields :func:`prepare` found (``common``; ``axes``: the parts'
    channel axes)."""
    model, x, channel_axis, parts, seed = (common[k] for k in ("model", "x", "channel_axis", "parts", "seed"))
    method, selection = common["method"], common["selection"]

    def elements_of(value: Any, what: str) -> np.ndarray:
        if parts is None:
            return element_view(np.asarray(value, dtype=np.float64), x, channel_axis, what)
        return part_elements(value, parts, parts.points, axes, what)

    if expl is not None:
        if len(expl) != len(x):
            raise ValueError(f"the explanation must be of the {len(x)} inputs given; received one of {len(expl)}.")
        elements = elements_of(expl.attributions, "explanation.attributions")
        if parts is None:
            pixels = elements if channel_axis is None else np.asarray(expl.maps, dtype=np.float64)
        elif len(parts.parts) == 1:  # the part's own maps (an image's, token ids' [B, K, T])
            pixels = np.asarray(part_values(expl.maps, parts, "explanation.maps")[0], dtype=np.float64)
        else:
            pixels = elements
        return Scored(elements=elements, pixels=pixels, targets=np.asarray(expl.targets, dtype=np.int64), **common)

    resolved = np.asarray(selection.columns, dtype=np.int64)
    if isinstance(explanation_or_method, str):  # RANDOM
        elements = random_attributions(x.shape, resolved, np.arange(len(x)), seed)
        common["method"] = RANDOM
        return Scored(elements=elements, pixels=to_pixels(elements, channel_axis), targets=resolved, **common)
    if method is not None:  # a callable explainer
        elements = elements_of(explanation_or_method(model, x, resolved), "the explainer's attributions")
        return Scored(elements=elements, pixels=to_pixels(elements, channel_axis), targets=resolved, **common)
    if not isinstance(explanation_or_method, (dict, list, tuple)):
        try:
            explanation_or_method = np.asarray(explanation_or_method, dtype=np.float64)
        except (TypeError, ValueError):
            raise TypeError(
                "explanation_or_method must be an Explanation, a method name, 'random', a callable "
                "explainer or an attribution array; received "
                f"{type(explanation_or_method).__name__}."
            ) from None
    elements = elements_of(explanation_or_method, "the attribution array")
    if elements.shape[1] != resolved.shape[1]:
        raise ValueError(
            f"the attribution array has {elements.shape[1]} maps per input but targets give "
            f"{resolved.shape[1]}; received targets {targets!r}."
        )
    return Scored(elements=elements, pixels=to_pixels(elements, channel_axis), targets=resolved, **common)


def rerun_options(expl: Any) -> dict:
    """The options that run ``expl``'s method again as it was run: what it recorded that the method
    takes (an extended method's included), without ``score`` (given apart) and without what it
    recorded of its own (occlusion's ``windows``, a count of the windows it made). A method not
    registered here (the seeded ``random`` map, a plugin not loaded) keeps what it recorded."""
    given = {key: value for key, value in expl.options.items() if key != "score"}
    try:
        accepted = get_method(expl.method).accepted(expl.options)
    except (TypeError, ValueError):
        return given
    return {key: value for key, value in given.items() if key in accepted}


def _listed(attribute_to: Any) -> list:
    items = list(attribute_to) if isinstance(attribute_to, (list, tuple)) else [attribute_to]
    return [getattr(item, "name", item) for item in items]


def _refuse_layers(parts: Any) -> None:
    """An inner layer's values are not an input the metric can perturb: ``ValueError``."""
    layers = [part.name for part in parts.parts if part.input is None]
    if layers:
        raise ValueError(
            "this metric evaluates the model at perturbed values of what was explained, and an inner layer "
            "(attribute_to=LAYER) is not an input that can be perturbed: explain the model's inputs (attribute_to= "
            f"an input's name, or the default); received attribute_to naming layer {layers[0]!r}."
        )


def _explained_kinds(expl: Any) -> set:
    """The kinds of target the explanation's columns explain (``"class"``, ``"region"``, ...)."""
    info = expl.target_info or []
    return {column.get("kind") for row in info for column in row if isinstance(column, dict)}


def _refuse_classes_for_objects(expl: Any, targets: Any) -> None:
    """Class targets given for an explanation of target objects: ``ValueError`` (the perturbed
    copies must be scored with the target object's payload, not with bare columns)."""
    objects = _explained_kinds(expl) - {"class", "callable", None}
    if objects:
        raise ValueError(
            f"the explanation was made for {', '.join(sorted(map(str, objects)))} targets: pass the same "
            "target object as targets= (the one given to explain), so that the perturbed inputs are "
            f"scored with it; received targets={targets!r}."
        )


def _check_explained_targets(expl: Any, selection: Any, targets: Any) -> None:
    """An explanation of target objects is scored with the same target object (``targets=``)."""
    kinds = _explained_kinds(expl)
    given = {column.get("kind") for row in selection.info for column in row if isinstance(column, dict)}
    if not given - {"class", "callable", None}:
        _refuse_classes_for_objects(expl, targets)
        return
    columns = np.asarray(selection.columns)
    same = columns.shape == np.shape(expl.targets) and np.array_equal(columns, expl.targets)
    if not same or (kinds and kinds != given):
        raise ValueError(
            f"targets must be the target the explanation was made for: it resolves to {sorted(map(str, given))} "
            f"columns {columns.tolist()}, the explanation's are {sorted(map(str, kinds))} "
            f"{np.asarray(expl.targets).tolist()}; received {targets!r}."
        )
