"""The TensorFlow backend's :class:`Context`: what a method's function sees inside a kernel.

A method's function runs inside one compiled kernel per (model, method, options, shapes, chunk
layout), built by :mod:`saliency_kit.engine.tf`; it sees a :class:`Context` whose primitives it
combines into its formula:

* ``ctx.gradients(points, rule=None)`` — ``∂s_k/∂z`` of the target scores at ``points``;
* ``ctx.scores(points, rule=None)`` — the target scores, forward only;
* ``ctx.values(points, rule=None)`` — the whole score vector, forward only;
* ``ctx.gradients_per_target(points)`` — one point per input and target, each differentiated
  for its own target only;
* ``ctx.layer(path, points=None)`` — a layer's activations and the gradients of the scores with
  respect to them, at the inputs or at other points (a path from a baseline);
* ``ctx.spread(points)`` — each input's ``max − min`` (each part's, when several inputs are
  explained together), the scale of a noisy method's noise;
* ``ctx.sum(count, fn)`` — a running sum over ``count`` items in blocks that fit the chunk, in a
  ``tf.while_loop`` (memory stays one chunk whatever ``samples``/``steps`` are);
* ``ctx.at(points)`` — the same context at other inputs (noisy copies), for methods built on
  another method;
* ``ctx.normal(ids, count)`` — seeded noise keyed by (seed, input key, sample), so results do
  not depend on chunking (nor, with ``explain(..., input_keys=)``, on an input's batch), the
  same numbers on every backend (:mod:`saliency_kit.engine.draws`);
* ``ctx.resize(maps, size)`` — linear resizing of maps ``[n, K, *s]`` with 1, 2 or 3 spatial axes
  (sequences, images, volumes);
* ``ctx.uniform(ids, count, shape)`` — seeded uniform draws keyed like ``ctx.normal`` (or shared
  by every input);
* ``ctx.host(fn, args, dtype)`` — a host-side NumPy step inside the compiled function.

Methods use these and ``keras.ops``, never TensorFlow itself.

Models always run with ``training=False``: Dropout is inactive, BatchNorm uses (and never updates)
its moving statistics, weights are never written.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from ..model.taps import Tap
from . import draws, resize
from .spec import KernelSpec
from .tf_gradients import Selection, accumulator_dtype, differentiate, gradient_at, gradient_by_rule, is_relu_rule

__all__ = ["Context"]


class Context:
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
        index: tf.Tensor,
        keys: tf.Tensor,
        seed: tf.Tensor,
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
    def _rows(self, points: np.ndarray) -> tuple[tf.Tensor, Selection, tuple]:
        """``points [n, *lead, *input]`` -> rows ``[n·copies, *input]``, their selection (each
        copy keeps its input's columns and payload), lead shape."""
        rank = len(self.shape)
        lead = tuple(points.shape[1 : len(points.shape) - rank])
        copies = int(np.prod(lead)) if lead else 1
        n = self.inputs.shape[0]
        rows = tf.reshape(points, [n * copies, *self.shape])
        return rows, self.selection.repeat(copies), lead

    def gradients(self, points: tf.Tensor, rule: Any = None, with_scores: bool = False) -> Any:
        """Gradients of the target scores at ``points``.

        ``points`` ``[n, *lead, *input]`` (``lead`` any extra copy axes, e.g. path points)
        -> ``[n, *lead, K, *input]``. ``rule``: ``"guided"``, ``"deconv"`` or a
        ``ModifiedBackprop`` applies to every ReLU-family activation the model runs (the
        op-level override, no model copy); an LRP composite or DeepLIFT rewrite goes through
        ``sk.rewrite``.
        ``with_scores=True`` returns ``(scores [n, *lead, K] float32, gradients)``: the scores
        at the points come free with their gradients.
        """
        rows, selection, lead = self._rows(points)
        if rule is not None and is_relu_rule(rule):
            scores, grads = gradient_by_rule(self._views(None), rows, selection, rule, self._reports)
        else:
            scores, grads = gradient_at(self._views(rule), rows, selection, vectorise=self._vectorise)
        if self._top and points is self.inputs:
            self.memo.setdefault("scores", scores)  # the clean scores come free
        n, K = self.inputs.shape[0], self.num_targets
        grads = tf.reshape(grads, [n, *lead, K, *self.shape])
        if with_scores:
            return tf.reshape(scores, [n, *lead, K]), grads
        return grads

    def gradients_against(self, reference: Any, rule: Any, shared: Callable[[], Any]) -> tuple:
        """For a rule that reads each input against a reference (DeepLIFT's rewrite):
        ``(scores [n, K], reference scores [n, K], gradients [n, K, *input])`` at the inputs,
        ``reference`` one input's shape (shared by every row).

        ``shared()`` makes the rule's reference context (``record()``, ``replay()``): the
        reference runs through the model alone, one row, within ``record()``; then the inputs,
        differentiated, within ``replay()``, the rule's backward reading them against what the
        reference left. Its outputs are broadcast to every row's target. When other model inputs
        are held at each row's own values, the reference differs per row: each input is paired
        with its own, rows ``[x_0, x₀_0, x_1, x₀_1, ...]`` (:meth:`gradients`).
        """
        x, selection = self.inputs, self.selection
        reference = tf.cast(reference, x.dtype)
        if selection.held:
            pairs = tf.stack([x, reference + tf.zeros_like(x)], axis=1)
            scores, grads = self.gradients(pairs, rule=rule, with_scores=True)
            return scores[:, 0], scores[:, 1], grads[:, 0]
        n, view, context = x.shape[0], self._views(rule), shared()
        with context.record():
            at_reference = selection.outputs(view, tf.reshape(reference, [1, *self.shape]))  # each leaf [1, ...]
        with context.replay(), tf.GradientTape(persistent=self.num_targets > 1, watch_accessed_variables=False) as tape:
            tape.watch(x)
            scores = selection.score_outputs(selection.outputs(view, x))
            if scores.dtype != x.dtype:
                scores = tf.cast(scores, x.dtype)
            grads = differentiate(tape, scores, x, self._vectorise)
        at_reference = tf.nest.map_structure(
            lambda t: tf.broadcast_to(t, tf.concat([[n], tf.shape(t)[1:]], 0)), at_reference
        )
        reference_scores = tf.cast(selection.score_outputs(at_reference), tf.float32)
        scores = tf.cast(scores, tf.float32)
        if self._top:
            self.memo.setdefault("scores", scores)
        return scores, reference_scores, grads

    def scores(self, points: tf.Tensor, rule: Any = None) -> tf.Tensor:
        """Target scores (float32) at ``points`` ``[n, *lead, *input]`` -> ``[n, *lead, K]``."""
        if self._top and points is self.inputs and "scores" in self.memo:
            return self.memo["scores"]
        rows, selection, lead = self._rows(points)
        scores = tf.cast(selection.scores(self._views(rule), rows)[0], tf.float32)
        if self._top and points is self.inputs:
            self.memo["scores"] = scores
        return tf.reshape(scores, [self.inputs.shape[0], *lead, self.num_targets])

    def probabilities(self, points: tf.Tensor, rule: Any = None) -> tf.Tensor:
        """Target probabilities (float32) at ``points`` ``[n, *lead, *input]`` -> ``[n, *lead, K]``,
        forward only: for class targets the softmax over every class taken at the target's class
        (Score-CAM's weights); for target objects their ``probabilities`` (see each kind)."""
        rows, selection, lead = self._rows(points)
        probabilities = tf.cast(selection.probabilities(self._views(rule), rows), tf.float32)
        return tf.reshape(probabilities, [self.inputs.shape[0], *lead, self.num_targets])

    def values(self, points: tf.Tensor, rule: Any = None) -> tf.Tensor:
        """The whole score vector (float32) at ``points`` ``[n, *lead, *input]`` -> ``[n, *lead, C]``,
        forward only; class targets (and a callable's scores) only: a target object's outputs need
        not be a vector (its ``vector`` says so)."""
        rows, selection, lead = self._rows(points)
        values = tf.cast(selection.values(self._views(rule), rows), tf.float32)
        return tf.reshape(values, [self.inputs.shape[0], *lead, values.shape[-1]])

    def gradients_per_target(self, points: tf.Tensor, rule: Any = None) -> tf.Tensor:
        """``points [n, K, *input]``, one point per input and target -> ``[n, K, *input]``: row
        ``(b, k)`` is ``∂s_k/∂z`` at ``z = points[b, k]`` only (paths that differ per class,
        Guided IG), one backward pass per row."""
        n, K = self.inputs.shape[0], self.num_targets
        rows = tf.reshape(points, [n * K, *self.shape])
        _, grads = gradient_at(self._views(rule), rows, self.selection.per_column(), vectorise=self._vectorise)
        return tf.reshape(grads, [n, K, *self.shape])

    def layer(self, path: str, rule: Any = None, points: Any = None) -> tuple[tf.Tensor, tf.Tensor]:
        """``(activations [n, *layer], gradients [n, K, *layer])`` of layer ``path`` at the inputs;
        at ``points [n, *lead, *input]`` when given: ``([n, *lead, *layer], [n, *lead, K, *layer])``.

        When the points are one model input of several (a method run per input), the layer's
        call on that input's path: a layer shared by several inputs (a siamese branch) has one
        call per input, and its activations and gradients are that call's. ``ValueError`` when
        the layer is on no path from the input, or called more than once on it."""
        if points is None:
            rows, selection, lead = self.inputs, self.selection, ()
        else:
            rows, selection, lead = self._rows(points)
        with tf.GradientTape(persistent=self.num_targets > 1, watch_accessed_variables=False) as tape:
            tape.watch(rows)  # records the forward pass, so the activations can be sources
            scores, activations = selection.scores(self._views(rule), rows, tap=self._tap(path))
            if scores.dtype != activations.dtype:
                scores = tf.cast(scores, activations.dtype)
        if self._top and points is None:
            self.memo.setdefault("scores", tf.cast(scores, tf.float32))
        grads = differentiate(tape, scores, activations, self._vectorise)
        if not lead:
            return activations, grads
        n, unit = self.inputs.shape[0], tuple(activations.shape[1:])
        return tf.reshape(activations, [n, *lead, *unit]), tf.reshape(grads, [n, *lead, self.num_targets, *unit])

    def _tap(self, path: str) -> Any:
        """What :meth:`layer` taps: the call of ``path`` on the explained input's path when the
        points are one input of several, else the layer's one call (``path`` itself)."""

        space = self.selection.space
        if space is None or space.packed or space.parts[0].input is None:
            return path
        return Tap(path, space.parts[0].input)

    def spread(self, points: Any) -> tf.Tensor:
        """``max − min`` of each input of ``points [n, *input]``, ``[n, 1, ...]`` (broadcasts
        against one input); when the points pack several parts (several inputs explained
        together), of each part, ``[n, P]`` (each part's range over its own elements)."""
        n = self.inputs.shape[0]
        if self.segments is None:
            axes = tuple(range(1, len(points.shape)))
            ranges = tf.reduce_max(points, axis=axes) - tf.reduce_min(points, axis=axes)
            return tf.reshape(ranges, [n, *([1] * len(self.shape))])
        parts = []
        for offset, size in self.segments:
            segment = points[:, offset : offset + size]
            span = tf.reduce_max(segment, axis=1) - tf.reduce_min(segment, axis=1)
            parts.append(tf.repeat(span[:, None], size, axis=1))
        return tf.concat(parts, axis=1)

    # -- running sums ------------------------------------------------------------------------
    def sum(self, count: int, fn: Callable) -> Any:
        """``Σ_i fn(i)`` over ``i < count``, in blocks of ``m`` items that fit the chunk.

        ``fn(i)`` gets int32 indices ``[m]`` (padding repeats the last index) and returns a
        tensor, or a tuple of tensors, each ``[n, m, ...]``; the result is ``[n, ...]`` each.
        Blocks run one after another in a while loop, adding into running sums (kept in float32
        for 16-bit values), so memory does not grow with ``count``.
        """
        count = int(count)
        m = min(count, self.budget)
        blocks = math.ceil(count / m)
        saved = self.budget
        structure = []

        def block_sums(b: int) -> list:
            ids = b * m + tf.range(m)
            valid = ids < count
            self.budget = max(1, saved // m)  # what nested sums may use per item
            try:
                parts = fn(tf.minimum(ids, count - 1))
            finally:
                self.budget = saved
            structure.append(parts)
            sums = []
            for part in tf.nest.flatten(parts):
                dtype = accumulator_dtype(part.dtype)
                mask = tf.reshape(tf.cast(valid, dtype), [1, m] + [1] * (len(part.shape) - 2))
                sums.append(tf.reduce_sum(tf.cast(part, dtype) * mask, axis=1))
            return sums

        # the first block is traced outside the loop: it fixes the shapes of the running sums
        totals = block_sums(0)
        if blocks > 1:

            def body(b: tf.Tensor, totals: Any) -> tuple[tf.Tensor, list]:
                return b + 1, [t + s for t, s in zip(totals, block_sums(b))]

            totals = tf.while_loop(lambda b, _: b < blocks, body, (1, totals), parallel_iterations=1)[1]
        return tf.nest.pack_sequence_as(structure[0], totals)

    def at(self, points: tf.Tensor) -> Context:
        """This context at other inputs ``points [n, m, *input]`` (rows ``[n·m, ...]``), each
        copy keeping its input's targets (their payload included), index and key; results of a method there are
        ``[n·m, K, ...]`` (reshape to ``[n, m, K, ...]``)."""
        rows, selection, lead = self._rows(points)
        copies = int(np.prod(lead)) if lead else 1
        index = tf.reshape(tf.repeat(self.index[:, None], copies, axis=1), [-1])
        keys = tf.reshape(tf.repeat(self.keys[:, None], copies, axis=1), [-1, 2])
        return Context(self.spec, rows, selection, index, keys, self.seed, max(1, self.budget // copies), top=False)

    # -- helpers ------------------------------------------------------------------------------
    def normal(self, ids: Any, count: int = 0) -> Any:
        """Standard normal noise ``[n, m, *input]`` (the inputs' dtype) for copies ``ids [m]`` of
        each input.

        Copy ``s`` of input ``b`` is keyed by ``(seed, keys[b], ids[s])`` in the backend-neutral
        generator :func:`saliency_kit.engine.draws.normal`: the same numbers whatever the chunking,
        on every backend, and wherever the input sits when its key is its own
        (``explain(..., input_keys=)``). ``count`` (the number of copies) is accepted and unused.
        """
        return draws.normal(self.seed, self.keys, ids, self.shape, self.inputs.dtype.name)

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
        dtype = tf.as_dtype(dtype).name
        if shared:
            return draws.shared_uniform(self.seed, ids, shape, dtype)
        return draws.uniform(self.seed, self.keys, ids, shape, dtype)

    def host(self, fn: Callable, args: Any, dtype: Any, shape: tuple | None = None) -> tf.Tensor:
        """``fn(*args)``, a pure NumPy step no tensor op expresses (a segmentation, a greedy
        ranking), run on the host inside the compiled function: ``args`` arrive as NumPy arrays,
        the one array returned (of ``dtype``) is reshaped to ``shape`` when given."""
        out = tf.numpy_function(fn, list(args), tf.as_dtype(dtype), stateful=False)
        return out if shape is None else tf.reshape(out, shape)
