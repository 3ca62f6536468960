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
* ``ctx.attention(gradients=True)`` — the attention probabilities of every attention call the
  model runs, and the gradients of the scores with respect to them;
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
from collections.abc import Callable
from typing import Any

import tensorflow as tf

from ..rules.relu import is_relu_rule
from .context import BaseContext
from .tf_gradients import accumulator_dtype, differentiate, gradient_at, gradient_by_rule

__all__ = ["Context"]


class Context(BaseContext):
    """The TensorFlow context: :class:`~saliency_kit.engine.context.BaseContext` (its attributes,
    scores, spreads, copies at other points) with gradients by tape, layer taps, running sums in
    a ``tf.while_loop``, keyed draws, resizing and host steps."""

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
            return self._paired_with_references(reference, rule)
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

    def attention(self, gradients: bool = True) -> tuple[list, list | None]:
        """The attention probabilities of every attention call the model runs at the inputs, in
        call order, each ``[n, heads, T, S]`` (:func:`saliency_kit.model.attention.attention_recording`),
        and (``gradients=True``) the gradients of the scores with respect to each, ``[n, K, heads,
        T, S]`` (else ``None``): the gradients of zero shifts added to the probabilities, as on JAX."""
        from ..model.attention import attention_recording

        view, rows = self._views(None), self.inputs
        with attention_recording(view.model) as taken:  # unused when shifted: pruned from the graph
            scores = self.selection.scores(view, rows)[0]
        if gradients:
            shifts = [tf.zeros_like(probabilities) for probabilities in taken]
            with tf.GradientTape(persistent=True, watch_accessed_variables=False) as tape:  # one source a call
                tape.watch(shifts)
                with attention_recording(view.model, shifts) as taken:
                    scores = self.selection.scores(view, rows)[0]
                if taken and scores.dtype != taken[0].dtype:
                    scores = tf.cast(scores, taken[0].dtype)
        if self._top:
            self.memo.setdefault("scores", tf.cast(scores, tf.float32))
        if not gradients:
            return taken, None
        return taken, [differentiate(tape, scores, shift, self._vectorise) for shift in shifts]

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

    # -- helpers ------------------------------------------------------------------------------
    def host(self, fn: Callable, args: Any, dtype: Any, shape: tuple | None = None) -> tf.Tensor:
        """``fn(*args)``, a pure NumPy step no tensor op expresses (a segmentation, a greedy
        ranking), run on the host inside the compiled function: ``args`` arrive as NumPy arrays,
        the one array returned (of ``dtype``) is reshaped to ``shape`` when given."""
        out = tf.numpy_function(fn, list(args), tf.as_dtype(dtype), stateful=False)
        return out if shape is None else tf.reshape(out, shape)
