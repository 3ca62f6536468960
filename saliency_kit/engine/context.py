"""What a method's function sees inside a kernel, on every backend: the backend-neutral part of
the context (:class:`BaseContext`, in ``keras.ops``); each backend's ``Context`` adds the
gradients, layer taps, running sums, draws and host steps in its framework
(:mod:`saliency_kit.engine.tf_context`, :mod:`saliency_kit.engine.jax_context`). The primitives a
method combines are listed there.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import keras
import numpy as np
from keras import ops

from ..model.model_inputs import embedder
from ..model.placed import Placed
from ..model.taps import Tap
from ..model.walker import layer_at
from . import draws, resize
from .selection import Selection
from .spec import KernelSpec

__all__ = ["BaseContext", "run_method", "run_values"]


class BaseContext:
    """What a method's function sees: one chunk of inputs and targets, and the primitives.

    Attributes:
        spec: the :class:`~saliency_kit.engine.spec.KernelSpec` of the kernel it runs in.
        inputs: ``[n, *input]`` the inputs of this chunk (model input dtype).
        targets: int32 ``[n, K]`` the columns to explain (the classes of class targets; what a
            target object resolved to otherwise).
        selection: the :class:`Selection` of these rows (the columns, the target object and its
            payload sliced to this chunk).
        index: int32 ``[n]`` each input's position in the whole request.
        keys: uint32 ``[n, 2]`` the (hi, lo) words of each input's int64 noise key: the
            ``input_keys`` given to ``explain`` (a hash of an image's path in ``saliency
            batch``), else its position.
        seed: uint32 ``[2]`` the words of the int64 ``seed`` option (0 when the method has none).
        budget: model rows per input and class the method may evaluate at once.
        channel_axis: the channel axis of one input: ``-1`` (channels-last) or ``0``
            (channels-first inputs, see :func:`saliency_kit.model.inspect.channel_axis`).
        layer_channel_axis: the channel axis of the model's spatial layers' outputs (where a CAM
            layer's channels are, see :func:`saliency_kit.model.inspect.layer_channel_axis`): the input's,
            unless the model
            moves its input's axes (a model converted from PyTorch takes ``[B, C, H, W]`` and
            runs channels-last layers).
    """

    def __init__(
        self,
        spec: KernelSpec,
        inputs: Any,
        selection: Any,
        index: Any,
        keys: Any,
        seed: Any,
        budget: int,
        top: bool = True,
    ):
        """The context of kernel ``spec`` at ``inputs``; ``top``: the kernel's own inputs, not
        copies (:meth:`at`), so gradients and scores taken at them are kept in :attr:`memo`."""
        self.spec = spec  # what every context of the kernel shares
        self._views = spec.views  # views(rule) -> ScoreView
        self._reports = spec.reports  # what the op-level rules changed
        self.inputs = inputs
        self.selection = selection
        self.targets = self.selection.columns
        self.index = index
        self.keys = keys
        self.seed = seed
        self.budget = max(1, int(budget))
        self.channel_axis = spec.channel_axis
        self.layer_channel_axis = spec.channel_axis if spec.layer_axis is None else spec.layer_axis
        self._vectorise = spec.vectorise
        self._top = top
        self.segments = spec.segments  # ((offset, size), ...) of each part of packed points, else None
        self.memo: dict = {}

    @property
    def shape(self) -> tuple:
        """The shape of one input."""
        return tuple(self.inputs.shape[1:])

    @property
    def spatial_size(self) -> tuple:
        """``(T,)``, ``(H, W)`` or ``(D, H, W)``: one input's axes but its channel axis."""
        return tuple(self.shape[1:]) if self.channel_axis == 0 else tuple(self.shape[:-1])

    @property
    def num_targets(self) -> int:
        return int(self.targets.shape[1])

    # -- evaluation -------------------------------------------------------------------------
    def _rows(self, points: Any) -> tuple[Any, Selection, tuple]:
        """``points [n, *lead, *input]`` -> rows ``[n·copies, *input]``, their selection (each
        copy keeps its input's columns and payload), lead shape."""
        rank = len(self.shape)
        lead = tuple(points.shape[1 : len(points.shape) - rank])
        copies = int(np.prod(lead)) if lead else 1
        n = self.inputs.shape[0]
        rows = ops.reshape(points, [n * copies, *self.shape])
        return rows, self.selection.repeat(copies), lead

    def scores(self, points: Any, rule: Any = None) -> Any:
        """Target scores (float32) at ``points`` ``[n, *lead, *input]`` -> ``[n, *lead, K]``."""
        if self._top and points is self.inputs and "scores" in self.memo:
            return self.memo["scores"]
        rows, selection, lead = self._rows(points)
        scores = ops.cast(selection.scores(self._views(rule), rows)[0], "float32")
        if self._top and points is self.inputs:
            self.memo["scores"] = scores
        return ops.reshape(scores, [self.inputs.shape[0], *lead, self.num_targets])

    def probabilities(self, points: Any, rule: Any = None) -> Any:
        """Target probabilities (float32) at ``points`` ``[n, *lead, *input]`` -> ``[n, *lead, K]``,
        forward only: for class targets the softmax over every class taken at the target's class
        (Score-CAM's weights); for target objects their ``probabilities`` (see each kind)."""
        rows, selection, lead = self._rows(points)
        probabilities = ops.cast(selection.probabilities(self._views(rule), rows), "float32")
        return ops.reshape(probabilities, [self.inputs.shape[0], *lead, self.num_targets])

    def values(self, points: Any, rule: Any = None) -> Any:
        """The whole score vector (float32) at ``points`` ``[n, *lead, *input]`` -> ``[n, *lead, C]``,
        forward only; class targets (and a callable's scores) only: a target object's outputs need
        not be a vector (its ``vector`` says so)."""
        rows, selection, lead = self._rows(points)
        values = ops.cast(selection.values(self._views(rule), rows), "float32")
        return ops.reshape(values, [self.inputs.shape[0], *lead, values.shape[-1]])

    def gradients(self, points: Any, rule: Any = None, with_scores: bool = False) -> Any:
        """Gradients of the target scores at ``points`` (each backend's :class:`Context`)."""
        raise NotImplementedError

    def _paired_with_references(self, reference: Any, rule: Any) -> tuple:
        """:meth:`gradients_against` when other model inputs are held at each row's own values:
        each input paired with its own reference, rows ``[x_0, x₀_0, x_1, x₀_1, ...]``;
        ``(scores [n, K], reference scores [n, K], gradients [n, K, *input])``."""
        x = self.inputs
        pairs = ops.stack([x, ops.cast(reference, x.dtype) + ops.zeros_like(x)], axis=1)
        scores, grads = self.gradients(pairs, rule=rule, with_scores=True)
        return scores[:, 0], scores[:, 1], grads[:, 0]

    def _tap(self, path: str) -> Any:
        """What :meth:`layer` taps: the call of ``path`` on the explained input's path when the
        points are one input of several, else the layer's one call (``path`` itself)."""

        space = self.selection.space
        if space is None or space.packed or space.parts[0].input is None:
            return path
        return Tap(path, space.parts[0].input)

    def spread(self, points: Any) -> Any:
        """``max − min`` of each input of ``points [n, *input]``, ``[n, 1, ...]`` (broadcasts
        against one input); when the points pack several parts (several inputs explained
        together), of each part, ``[n, P]`` (each part's range over its own elements)."""
        n = self.inputs.shape[0]
        if self.segments is None:
            axes = tuple(range(1, len(points.shape)))
            ranges = ops.max(points, axis=axes) - ops.min(points, axis=axes)
            return ops.reshape(ranges, [n, *([1] * len(self.shape))])
        parts = []
        for offset, size in self.segments:
            segment = points[:, offset : offset + size]
            span = ops.max(segment, axis=1) - ops.min(segment, axis=1)
            parts.append(ops.repeat(span[:, None], size, axis=1))
        return ops.concatenate(parts, axis=1)

    def at(self, points: Any) -> BaseContext:
        """This context at other inputs ``points [n, m, *input]`` (rows ``[n·m, ...]``), each
        copy keeping its input's targets (their payload included), index and key; results of a method there are
        ``[n·m, K, ...]`` (reshape to ``[n, m, K, ...]``)."""
        rows, selection, lead = self._rows(points)
        copies = int(np.prod(lead)) if lead else 1
        index = ops.reshape(ops.repeat(self.index[:, None], copies, axis=1), [-1])
        keys = ops.reshape(ops.repeat(self.keys[:, None], copies, axis=1), [-1, 2])
        return type(self)(self.spec, rows, selection, index, keys, self.seed, max(1, self.budget // copies), top=False)

    # -- draws and resizing, the same numbers on every backend ------------------------------------
    def normal(self, ids: Any, count: int = 0) -> Any:
        """Standard normal noise ``[n, m, *input]`` (the inputs' dtype) for copies ``ids [m]`` of
        each input.

        Copy ``s`` of input ``b`` is keyed by ``(seed, keys[b], ids[s])`` in the backend-neutral
        generator :func:`saliency_kit.engine.draws.normal`: the same numbers whatever the chunking,
        on every backend, and wherever the input sits when its key is its own
        (``explain(..., input_keys=)``). ``count`` (the number of copies) is accepted and unused.
        """
        return draws.normal(self.seed, self.keys, ids, self.shape, keras.backend.standardize_dtype(self.inputs.dtype))

    def resize(self, maps: Any, size: Sequence[int]) -> Any:
        """``maps [n, K, *s]`` (1 to 3 spatial axes) resized to ``[n, K, *size]``: linear along each
        axis in turn, half-pixel centres, edges held (:func:`saliency_kit.engine.resize.linear`;
        ``tf.image.resize(method="bilinear")`` one axis at a time; ``scipy.ndimage.zoom(order=1,
        grid_mode=True, mode="nearest")``)."""
        return resize.linear(maps, size)

    def uniform(self, ids: Any, count: int = 0, shape: tuple = (), dtype: str = "float32", shared: bool = False) -> Any:
        """Uniform numbers on [0, 1) ``[n, m, *shape]`` for draws ``ids [m]`` of each input, keyed
        like :meth:`normal` in a stream apart from its noise (:func:`saliency_kit.engine.draws.uniform`).
        ``shared=True``: ``[m, *shape]``, the same for every input, keyed by ``(seed, ids[s])`` in
        a third stream (masks every input shares, :func:`saliency_kit.engine.draws.shared_uniform`).
        ``count`` is accepted and unused."""
        dtype = keras.backend.standardize_dtype(dtype)
        if shared:
            return draws.shared_uniform(self.seed, ids, shape, dtype)
        return draws.uniform(self.seed, self.keys, ids, shape, dtype)


def run_method(spec: KernelSpec, context: type, arguments: tuple) -> dict:
    """The body of every backend's method kernel: ``spec.compute(ctx, **options)`` on one chunk,
    with ``ctx`` a ``context`` (the backend's :class:`BaseContext` subclass) and ``arguments``
    the kernel's ``(x, targets, index, keys, seed, payload leaves, arrays)``. Returns
    ``{name: float32 [n, K, ...]}`` (see the backends' ``build_kernel``)."""
    x, targets, index, keys, seed, leaves, arrays = arguments
    structure, per_input, _ = spec.payload
    space = spec.space
    spec.traced()
    del spec.reports[:]  # a retrace reports afresh
    tree = None if structure is None else keras.tree.pack_sequence_as(structure, list(leaves))
    held, flags = (None if space is None else ()), per_input
    if space is not None and tree is not None:  # the held inputs ride beside the target's payload
        held, flags = tree["held"], per_input[len(tree["held"]) :]
        tree = tree.get("target")
    selection = Selection(targets, spec.target[0], tree, flags, held, space)
    values = dict(spec.options)
    values.update(zip(spec.array_names, arrays))
    if space is not None and space.lookup:  # token ids, and token baselines, embedded here
        part = space.parts[0]
        embed = embedder(layer_at(spec.views().model, part.layer), part.dtype)
        x, values = embed(x), space.fill(values, embed)
    ctx = context(spec, x, selection, index, keys, seed, spec.layout.budget)
    if "seed" in values:
        values["seed"] = seed
    out = spec.compute(ctx, **values)
    out = dict(out) if isinstance(out, dict) else {"attributions": out}
    if "scores" not in out and "scores" in ctx.memo:
        out["scores"] = ctx.memo["scores"]
    return {name: ops.cast(value, "float32") for name, value in out.items()}


def run_values(view: Any, x: Any, several: bool, raw: bool | str, taps: tuple) -> Any:
    """The body of every backend's forward-only kernel (``build_values_kernel``): the score vector
    ``[n, C]`` float32 of ``view`` at ``x``; ``raw``: the model's outputs (``"unstripped"``: a final
    squash kept), float32 leaves; ``taps``: ``{path: activations}`` of those layers, in their own
    dtype. ``several``: ``x`` is a tuple, one array per model input."""
    if several:
        x = Placed(list(x))
    if taps:
        return view.raw(x, taps, strip=False)[1]
    if raw:
        outputs = view.raw(x, strip=raw != "unstripped")[0]
        return keras.tree.map_structure(lambda t: ops.cast(t, "float32"), outputs)
    return ops.cast(view(x), "float32")
