"""The PyTorch backend's :class:`Context`: what a method's function sees inside a kernel.

The primitives are those of :mod:`saliency_kit.engine.tf_context` (the list is there), on PyTorch:
gradients are ``torch.autograd.grad`` of the target scores (one forward pass, one backward pass per
target column, the graph kept between them), a layer's gradient is the gradient with respect to its
activations, read as the model runs (:meth:`saliency_kit.model.scores.ScoreView.raw`), running sums
are a Python loop over blocks, host steps run in NumPy directly (PyTorch runs eagerly). The
backend-neutral part (scores, spreads, copies at other points, draws) is
:class:`~saliency_kit.engine.context.BaseContext`'s.

Models always run with ``training=False``; the points a gradient is taken at are detached copies
marked as needing it, so nothing upstream of them is differentiated, and the model's weights are
only read.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import keras
import numpy as np
import torch
from keras import ops

from ..model.relu_layers import nothing_to_rewrite
from ..rules.relu import is_relu_rule
from .context import BaseContext
from .selection import SMALL_FLOATS

__all__ = ["Context", "grad_columns", "differentiable", "source"]


def source(points: Any) -> Any:
    """``points`` as a leaf of a new graph: detached, needing its gradient."""
    return points.detach().requires_grad_(True)


def differentiable(scores: Any, source_dtype: Any) -> Any:
    """``scores`` in a dtype their gradient can be taken in against a source of ``source_dtype``
    (16-bit scores of a mixed precision model are cast to the source's float dtype)."""
    name = str(scores.dtype).removeprefix("torch.")
    if name in (*SMALL_FLOATS, "float32") and scores.dtype != source_dtype:
        return scores.to(source_dtype if source_dtype.is_floating_point else torch.float32)
    return scores


def grad_columns(scores: Any, sources: Any) -> Any:
    """``[rows, K, *source]`` for one source (a list of them for several): the gradient of each
    column of ``scores [rows, K]``, one backward pass per column over the one forward pass."""
    several = isinstance(sources, (list, tuple))
    sources = list(sources) if several else [sources]
    width = scores.shape[1]
    columns: list = [[] for _ in sources]
    for k in range(width):
        cotangent = torch.zeros_like(scores)
        cotangent[:, k] = 1
        grads = torch.autograd.grad(scores, sources, cotangent, retain_graph=k < width - 1, allow_unused=True)
        for column, grad, leaf in zip(columns, grads, sources):
            column.append(torch.zeros_like(leaf) if grad is None else grad)
    stacked = [torch.stack(column, dim=1) for column in columns]
    return stacked if several else stacked[0]


class Context(BaseContext):
    """The PyTorch context: :class:`~saliency_kit.engine.context.BaseContext` with gradients by
    ``torch.autograd.grad``, layer taps, running sums over blocks, keyed draws, resizing and
    host steps."""

    def gradients(self, points: Any, rule: Any = None, with_scores: bool = False) -> Any:
        """Gradients of the target scores at ``points`` ``[n, *lead, *input]`` ->
        ``[n, *lead, K, *input]`` (``with_scores=True``: ``(scores [n, *lead, K], gradients)``);
        ``rule`` as on TensorFlow: a ReLU-family rule applies at every ReLU-family operation the
        model runs (:func:`saliency_kit.engine.torch_rules.with_rule`, a function mode)."""
        rows, selection, lead = self._rows(points)
        rows = source(rows)
        with torch.enable_grad():
            if rule is not None and is_relu_rule(rule):
                scores = self._by_rule(rows, selection, rule)
            else:
                scores = differentiable(selection.scores(self._views(rule), rows)[0], rows.dtype)
            grads = grad_columns(scores, rows)
        scores = scores.detach().to(torch.float32)
        if self._top and points is self.inputs:
            self.memo.setdefault("scores", scores)
        n, K = self.inputs.shape[0], self.num_targets
        grads = torch.reshape(grads, [n, *lead, K, *self.shape])
        if with_scores:
            return torch.reshape(scores, [n, *lead, K]), grads
        return grads

    def _by_rule(self, rows: Any, selection: Any, rule: Any) -> Any:
        """The scores with ``rule`` at every ReLU-family operation; the report goes to the
        kernel's reports, and a model with no such operation is refused."""
        from .torch_rules import with_rule

        view = self._views(None)
        wrapped, report = with_rule(lambda z: selection.scores(view, z)[0], rule)
        scores = differentiable(wrapped(rows), rows.dtype)
        report.check(f"model {view.model.name!r}")
        if not report.ops:
            raise nothing_to_rewrite(view.model)  # else the map would silently be the plain gradient
        self._reports[:] = [report]
        return scores

    def gradients_against(self, reference: Any, rule: Any, shared: Callable[[], Any]) -> tuple:
        """For a rule that reads each input against a reference (DeepLIFT's rewrite):
        ``(scores [n, K], reference scores [n, K], gradients [n, K, *input])``, as on TensorFlow:
        the reference runs alone, one row, within ``shared().record()``; the inputs, then
        differentiated, within ``replay()``."""
        x, selection = self.inputs, self.selection
        reference = ops.cast(reference, x.dtype)
        if selection.held:
            return self._paired_with_references(reference, rule)
        n, view, context = x.shape[0], self._views(rule), shared()
        rows = source(x)
        with torch.enable_grad():
            with context.record():
                at_reference = selection.outputs(view, torch.reshape(reference, [1, *self.shape]))
            with context.replay():
                scores = differentiable(selection.score_outputs(selection.outputs(view, rows)), rows.dtype)
            grads = grad_columns(scores, rows)
        at_reference = keras.tree.map_structure(
            lambda t: torch.broadcast_to(t.detach(), (n, *t.shape[1:])), at_reference
        )
        reference_scores = selection.score_outputs(at_reference)
        scores = scores.detach().to(torch.float32)
        if self._top:
            self.memo.setdefault("scores", scores)
        return scores, reference_scores.detach().to(torch.float32), grads

    def gradients_per_target(self, points: Any, rule: Any = None) -> Any:
        """``points [n, K, *input]`` -> ``[n, K, *input]``: row ``(b, k)`` is ``∂s_k/∂z`` at
        ``z = points[b, k]`` only."""
        n, K = self.inputs.shape[0], self.num_targets
        rows = source(torch.reshape(points, [n * K, *self.shape]))
        with torch.enable_grad():
            scores = self.selection.per_column().scores(self._views(rule), rows)[0]
            grads = grad_columns(differentiable(scores, rows.dtype), rows)
        return torch.reshape(grads, [n, K, *self.shape])

    def layer(self, path: str, rule: Any = None, points: Any = None) -> tuple[Any, Any]:
        """``(activations [n, *layer], gradients [n, K, *layer])`` of layer ``path`` at the inputs
        (at ``points [n, *lead, *input]``: ``[n, *lead, ...]``), as on TensorFlow: one forward
        pass, the gradients taken with respect to the activations it produced."""
        if points is None:
            rows, selection, lead = self.inputs, self.selection, ()
        else:
            rows, selection, lead = self._rows(points)
        rows = source(rows)
        with torch.enable_grad():
            scores, activations = selection.scores(self._views(rule), rows, tap=self._tap(path))
            grads = grad_columns(differentiable(scores, activations.dtype), activations)
        activations = activations.detach()
        if self._top and points is None:
            self.memo.setdefault("scores", scores.detach().to(torch.float32))
        if not lead:
            return activations, grads
        n, unit = self.inputs.shape[0], tuple(activations.shape[1:])
        return torch.reshape(activations, [n, *lead, *unit]), torch.reshape(grads, [n, *lead, self.num_targets, *unit])

    def attention(self, gradients: bool = True) -> tuple[list, list | None]:
        """The attention probabilities ``[n, heads, T, S]`` of every attention call at the inputs
        and (``gradients=True``) the gradients ``[n, K, heads, T, S]`` of the scores with respect
        to them, as on TensorFlow: one forward pass, differentiated with respect to the
        probabilities it recorded."""
        from ..model.attention import attention_recording

        view, rows = self._views(None), source(self.inputs)
        with torch.enable_grad(), attention_recording(view.model) as taken:
            scores = self.selection.scores(view, rows)[0]
        taken = list(taken)
        if self._top:
            self.memo.setdefault("scores", scores.detach().to(torch.float32))
        if not gradients:
            return [t.detach() for t in taken], None
        if not taken:
            return [], []
        with torch.enable_grad():
            grads = grad_columns(differentiable(scores, taken[0].dtype), taken)
        return [t.detach() for t in taken], grads

    # -- running sums ------------------------------------------------------------------------
    def sum(self, count: int, fn: Callable) -> Any:
        """``Σ_i fn(i)`` over ``i < count`` in blocks of ``m`` items that fit the chunk, as on
        TensorFlow (``fn(i)`` gets int32 ``[m]``, returns tensors ``[n, m, ...]``; results
        ``[n, ...]``, 16-bit values summed in float32); the blocks run one after another."""
        count = int(count)
        m = min(count, self.budget)
        saved = self.budget
        totals: list | None = None
        structure: Any = None
        for b in range(math.ceil(count / m)):
            ids = b * m + torch.arange(m, dtype=torch.int32, device=self.inputs.device)
            valid = ids < count
            self.budget = max(1, saved // m)  # what nested sums may use per item
            try:
                parts = fn(torch.clamp(ids, max=count - 1))
            finally:
                self.budget = saved
            structure = parts
            sums = []
            for part in keras.tree.flatten(parts):
                dtype = torch.float32 if str(part.dtype).removeprefix("torch.") in SMALL_FLOATS else part.dtype
                mask = torch.reshape(valid.to(dtype), [1, m] + [1] * (len(part.shape) - 2))
                sums.append(torch.sum(part.detach().to(dtype) * mask, dim=1))
            totals = sums if totals is None else [t + s for t, s in zip(totals, sums)]
        return keras.tree.pack_sequence_as(structure, totals or [])

    # -- helpers ------------------------------------------------------------------------------
    def host(self, fn: Callable, args: Any, dtype: Any, shape: tuple | None = None) -> Any:
        """``fn(*args)``, a pure NumPy step (PyTorch runs eagerly: it runs right away); the array
        returned, of ``dtype``, is reshaped to ``shape`` when given."""
        arrays = [np.asarray(ops.convert_to_numpy(a)) for a in args]
        out = np.asarray(fn(*arrays), dtype=keras.backend.standardize_dtype(dtype))
        if shape is not None:
            out = out.reshape(tuple(int(d) for d in shape))
        return ops.convert_to_tensor(out)
