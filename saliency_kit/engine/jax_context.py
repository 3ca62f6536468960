"""The JAX backend's :class:`Context`: what a method's function sees inside a ``jax.jit`` kernel.

The primitives are those of :mod:`saliency_kit.engine.tf_context` (the list is there), on JAX:
gradients are vector-Jacobian products of the target scores (one forward pass, one backward pass
per target column), a layer's gradient is the gradient of a zero shift added to its output
(:meth:`saliency_kit.model.scores.ScoreView.raw`, so residual graphs and shared layers are
followed as they run), running sums are a ``lax.fori_loop``, host steps a ``jax.pure_callback``.
The backend-neutral part (scores, spreads, copies at other points) is
:class:`~saliency_kit.engine.context.BaseContext`'s.

Models always run with ``training=False`` and with their variables' values passed to the kernel
(``keras.StatelessScope``): weights are never written, and a kernel sees later training.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from keras import ops

from ..model.relu_layers import nothing_to_rewrite
from ..rules.relu import is_relu_rule
from .context import BaseContext
from .selection import SMALL_FLOATS

__all__ = ["Context", "vjp_columns", "differentiable"]


def differentiable(scores: Any, source_dtype: Any) -> Any:
    """``scores`` in a dtype their gradient can be taken in against a source of ``source_dtype``
    (16-bit scores of a mixed precision model are cast to the source's float dtype)."""
    source = jnp.dtype(source_dtype)
    if scores.dtype.name in (*SMALL_FLOATS, "float32") and scores.dtype != source:
        return scores.astype(source if jnp.issubdtype(source, jnp.floating) else jnp.float32)
    return scores


def vjp_columns(pullback: Callable, scores: Any) -> Any:
    """``[rows, K, *source]``: the gradient of each column of ``scores [rows, K]`` through
    ``pullback`` (one backward pass per column over the one forward pass)."""
    width = scores.shape[1]
    columns = []
    for k in range(width):
        cotangent = jnp.zeros_like(scores).at[:, k].set(1)
        columns.append(pullback(cotangent)[0])
    return jnp.stack(columns, axis=1)


class Context(BaseContext):
    """The JAX context: :class:`~saliency_kit.engine.context.BaseContext` with gradients by
    ``jax.vjp``, layer taps by a shifted output, running sums in a ``lax.fori_loop``, keyed
    draws, resizing and host steps."""

    def _scored(self, view: Any, selection: Any, source_dtype: Any) -> Callable:
        def scores(z: Any) -> Any:
            return differentiable(selection.scores(view, z)[0], source_dtype)

        return scores

    def gradients(self, points: Any, rule: Any = None, with_scores: bool = False) -> Any:
        """Gradients of the target scores at ``points`` ``[n, *lead, *input]`` ->
        ``[n, *lead, K, *input]`` (``with_scores=True``: ``(scores [n, *lead, K], gradients)``);
        ``rule`` as on TensorFlow: a ReLU-family rule applies at every ReLU-family operation the
        model runs (:func:`saliency_kit.engine.jax_rules.with_rule` on the traced program)."""
        rows, selection, lead = self._rows(points)
        if rule is not None and is_relu_rule(rule):
            scores, grads = self._by_rule(rows, selection, rule)
        else:
            view = self._views(rule)
            scores, pullback = jax.vjp(self._scored(view, selection, rows.dtype), rows)
            grads = vjp_columns(pullback, scores)
        scores = scores.astype(jnp.float32)
        if self._top and points is self.inputs:
            self.memo.setdefault("scores", scores)
        n, K = self.inputs.shape[0], self.num_targets
        grads = jnp.reshape(grads, [n, *lead, K, *self.shape])
        if with_scores:
            return jnp.reshape(scores, [n, *lead, K]), grads
        return grads

    def _by_rule(self, rows: Any, selection: Any, rule: Any) -> tuple[Any, Any]:
        """Scores and gradients with ``rule`` at every ReLU-family operation; the report goes to
        the kernel's reports, and a model with no such operation is refused."""
        from .jax_rules import with_rule

        view = self._views(None)
        wrapped, report = with_rule(self._scored(view, selection, rows.dtype), rule)
        scores, pullback = jax.vjp(wrapped, rows)
        report.check(f"model {view.model.name!r}")
        if not report.ops:
            raise nothing_to_rewrite(view.model)  # else the map would silently be the plain gradient
        self._reports.append(report)
        return scores, vjp_columns(pullback, scores)

    def gradients_against(self, reference: Any, rule: Any, shared: Callable[[], Any]) -> tuple:
        """For a rule that reads each input against a reference (DeepLIFT's rewrite):
        ``(scores [n, K], reference scores [n, K], gradients [n, K, *input])``, as on TensorFlow:
        the reference runs alone, one row, within ``shared().record()``; the inputs are traced
        once, differentiated, within ``replay()`` (the rule's state lives for this one trace)."""
        x, selection = self.inputs, self.selection
        reference = ops.cast(reference, x.dtype)
        if selection.held:
            return self._paired_with_references(reference, rule)
        n, view, context = x.shape[0], self._views(rule), shared()
        with context.record():
            at_reference = selection.outputs(view, jnp.reshape(reference, [1, *self.shape]))  # each leaf [1, ...]

        def scored(z: Any) -> Any:
            return differentiable(selection.score_outputs(selection.outputs(view, z)), z.dtype)

        with context.replay():
            scores, pullback = jax.vjp(scored, x)
        grads = jnp.reshape(vjp_columns(pullback, scores), [n, self.num_targets, *self.shape])
        at_reference = jax.tree_util.tree_map(lambda t: jnp.broadcast_to(t, (n, *t.shape[1:])), at_reference)
        reference_scores = selection.score_outputs(at_reference).astype(jnp.float32)
        scores = scores.astype(jnp.float32)
        if self._top:
            self.memo.setdefault("scores", scores)
        return scores, reference_scores, grads

    def gradients_per_target(self, points: Any, rule: Any = None) -> Any:
        """``points [n, K, *input]`` -> ``[n, K, *input]``: row ``(b, k)`` is ``∂s_k/∂z`` at
        ``z = points[b, k]`` only."""
        n, K = self.inputs.shape[0], self.num_targets
        rows = jnp.reshape(points, [n * K, *self.shape])
        selection = self.selection.per_column()
        scores, pullback = jax.vjp(self._scored(self._views(rule), selection, rows.dtype), rows)
        grads = vjp_columns(pullback, scores)
        return jnp.reshape(grads, [n, K, *self.shape])

    def layer(self, path: str, rule: Any = None, points: Any = None) -> tuple[Any, Any]:
        """``(activations [n, *layer], gradients [n, K, *layer])`` of layer ``path`` at the inputs
        (at ``points [n, *lead, *input]``: ``[n, *lead, ...]``), as on TensorFlow: the gradient of
        the scores with respect to a zero shift of the layer's output, one forward pass."""
        if points is None:
            rows, selection, lead = self.inputs, self.selection, ()
        else:
            rows, selection, lead = self._rows(points)
        view, tap = self._views(rule), self._tap(path)
        shape = jax.eval_shape(lambda z: selection.scores(view, z, tap=tap)[1], rows)

        def scores_at(shift: Any) -> tuple[Any, Any]:
            scores, activations = selection.scores(view, rows, tap=tap, shift=shift)
            return differentiable(scores, activations.dtype), activations

        scores, pullback, activations = jax.vjp(scores_at, jnp.zeros(shape.shape, shape.dtype), has_aux=True)
        grads = vjp_columns(pullback, scores)
        if self._top and points is None:
            self.memo.setdefault("scores", scores.astype(jnp.float32))
        if not lead:
            return activations, grads
        n, unit = self.inputs.shape[0], tuple(activations.shape[1:])
        return jnp.reshape(activations, [n, *lead, *unit]), jnp.reshape(grads, [n, *lead, self.num_targets, *unit])

    def attention(self, gradients: bool = True) -> tuple[list, list | None]:
        """The attention probabilities ``[n, heads, T, S]`` of every attention call at the inputs
        and (``gradients=True``) the gradients ``[n, K, heads, T, S]`` of the scores with respect
        to them, as on TensorFlow: each the gradient of a zero shift added to the probabilities."""
        from ..model.attention import attention_recording

        view, rows, selection = self._views(None), self.inputs, self.selection

        def scores_at(shifts: Any) -> tuple[Any, list]:
            with attention_recording(view.model, shifts) as taken:
                scores = selection.scores(view, rows)[0]
            return differentiable(scores, taken[0].dtype if taken else rows.dtype), list(taken)

        def probabilities_at(z: Any) -> list:
            with attention_recording(view.model) as taken:
                scores = selection.scores(view, z)[0]
            if self._top and not gradients:
                self.memo.setdefault("scores", scores.astype(jnp.float32))
            return list(taken)

        if not gradients:
            return probabilities_at(rows), None
        shifts = [jnp.zeros(shape.shape, shape.dtype) for shape in jax.eval_shape(probabilities_at, rows)]
        scores, pullback, taken = jax.vjp(scores_at, shifts, has_aux=True)
        if self._top:
            self.memo.setdefault("scores", scores.astype(jnp.float32))
        columns = []
        for k in range(scores.shape[1]):
            columns.append(pullback(jnp.zeros_like(scores).at[:, k].set(1))[0])
        return taken, [jnp.stack([column[i] for column in columns], axis=1) for i in range(len(taken))]

    # -- running sums ------------------------------------------------------------------------
    def sum(self, count: int, fn: Callable) -> Any:
        """``Σ_i fn(i)`` over ``i < count`` in blocks of ``m`` items that fit the chunk, as on
        TensorFlow (``fn(i)`` gets int32 ``[m]``, returns tensors ``[n, m, ...]``; results
        ``[n, ...]``, 16-bit values summed in float32); the blocks run in a ``lax.fori_loop``."""
        count = int(count)
        m = min(count, self.budget)
        blocks = math.ceil(count / m)
        saved = self.budget
        structure: list = []

        def block_sums(b: Any) -> list:
            ids = b * m + jnp.arange(m, dtype=jnp.int32)
            valid = ids < count
            self.budget = max(1, saved // m)  # what nested sums may use per item
            try:
                parts = fn(jnp.minimum(ids, count - 1))
            finally:
                self.budget = saved
            structure.append(parts)
            sums = []
            for part in jax.tree_util.tree_leaves(parts):
                dtype = jnp.float32 if part.dtype.name in SMALL_FLOATS else part.dtype
                mask = jnp.reshape(valid.astype(dtype), [1, m] + [1] * (len(part.shape) - 2))
                sums.append(jnp.sum(part.astype(dtype) * mask, axis=1))
            return sums

        totals = block_sums(0)  # traced outside the loop: it fixes the running sums' shapes
        if blocks > 1:
            totals = jax.lax.fori_loop(
                1, blocks, lambda b, totals: [t + s for t, s in zip(totals, block_sums(b))], totals
            )
        return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(structure[0]), totals)

    # -- helpers ------------------------------------------------------------------------------
    def host(self, fn: Callable, args: Any, dtype: Any, shape: tuple | None = None) -> Any:
        """``fn(*args)``, a pure NumPy step run on the host inside the compiled function
        (``jax.pure_callback``): its result's ``shape`` must be given."""
        if shape is None:
            raise ValueError("a host step on JAX needs the shape of its result (ctx.host(..., shape=))")
        result = jax.ShapeDtypeStruct(tuple(int(d) for d in shape), jnp.dtype(dtype))

        def on_host(*arrays: Any) -> np.ndarray:
            return np.asarray(fn(*arrays), dtype=result.dtype).reshape(result.shape)

        return jax.pure_callback(on_host, result, *[ops.convert_to_tensor(a) for a in args], vmap_method="sequential")
