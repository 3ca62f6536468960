"""The engine's forward passes: a model's outputs and scores without gradients, compiled and chunked.

:func:`outputs` (the raw outputs), :func:`all_scores` (the whole score vector, ``"topK"`` targets)
and :func:`forward_scores` (the scores of given classes, deletion curves) each run one compiled
kernel per (model, score, input shape, chunk size), kept in the engine's kernel cache and
counted like :func:`saliency_kit.engine.run`'s.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

import numpy as np

from . import chunking
from .backend import active as active_backend
from .cache import KERNELS, count_call, traced
from .chunking import check_batch_size
from .inputs import check_inputs
from .views import fingerprint, rewritten_model, rule_key, score_view

if TYPE_CHECKING:
    import keras

__all__ = ["outputs", "all_scores", "forward_scores", "activations"]


def outputs(model: keras.Model, inputs: Any, *, score: str = "logits", batch_size: int = 32, strip: bool = True) -> Any:
    """The model's raw outputs at ``inputs`` (``[B, ...]``, or a list of a multi-input model's
    inputs in graph order) (the score view's values: the logits of a single
    output with a final softmax/sigmoid under ``score="logits"``, unless ``strip=False``),
    compiled and chunked: the model's output structure with float32 NumPy leaves ``[B, ...]``."""
    from keras import tree

    backend = active_backend()
    batch_size = check_batch_size(batch_size)
    inputs, count, shape, dtype = _batch(inputs)
    n = chunking.bucket(count, batch_size)
    key = ("outputs", score, strip, str(shape), str(dtype), n, fingerprint(model))
    model_ref = weakref.ref(model)
    kernel = KERNELS.get(
        model,
        key,
        lambda: backend.build_values_kernel(
            lambda: score_view(model_ref(), score), n, shape, dtype, traced, raw=True if strip else "unstripped"
        ),
    )
    parts = []
    for start in range(0, count, n):
        stop = min(start + n, count)
        count_call()
        parts.append(
            tree.map_structure(
                lambda t, rows=stop - start: backend.to_numpy(t)[:rows], kernel(_chunk(inputs, start, stop, n))
            )
        )
    return tree.map_structure(lambda *leaves: np.concatenate(leaves, axis=0), *parts)


def activations(model: keras.Model, inputs: Any, paths: tuple, *, batch_size: int = 32) -> dict:
    """``{path: [B, *layer output]}``: the outputs of the layers at ``paths`` (``"outer/inner"``)
    at ``inputs`` (``[B, ...]``, or a list of a multi-input model's inputs, graph order), in
    each layer's dtype; compiled and chunked like :func:`outputs`."""
    backend = active_backend()
    batch_size = check_batch_size(batch_size)
    inputs, count, shape, dtype = _batch(inputs)
    n = chunking.bucket(count, batch_size)
    paths = tuple(paths)
    key = ("activations", paths, str(shape), str(dtype), n, fingerprint(model))
    model_ref = weakref.ref(model)
    kernel = KERNELS.get(
        model,
        key,
        lambda: backend.build_values_kernel(
            lambda: score_view(model_ref(), "output"),
            n,
            shape,
            dtype,
            traced,
            f"the forward pass of model {model.name!r}",
            raw=False,
            taps=paths,
        ),
    )
    parts: dict = {path: [] for path in paths}
    for start in range(0, count, n):
        stop = min(start + n, count)
        count_call()
        out = kernel(_chunk(inputs, start, stop, n))
        for path in paths:
            parts[path].append(backend.to_numpy(out[path])[: stop - start])
    return {path: np.concatenate(chunks, axis=0) for path, chunks in parts.items()}


def all_scores(
    model: keras.Model,
    inputs: Any,
    *,
    score: str = "logits",
    rule: Any = None,
    batch_size: int = 32,
) -> np.ndarray:
    """The whole score vector ``[B, C]`` of every input (float32), compiled and chunked; ``inputs``
    ``[B, ...]``, or a list of a multi-input model's inputs (graph order)."""
    backend = active_backend()

    batch_size = check_batch_size(batch_size)
    inputs, count, shape, dtype = _batch(inputs)
    n = chunking.bucket(count, batch_size)
    key = ("values", score, rule_key(rule), str(shape), str(dtype), n, fingerprint(model))
    model_ref = weakref.ref(model)
    kernel = KERNELS.get(
        model,
        key,
        lambda: backend.build_values_kernel(
            lambda: score_view(model_ref(), score, rule),
            n,
            shape,
            dtype,
            traced,
            f"the forward pass of model {model.name!r}",
        ),
    )
    if rule is not None:
        rewritten_model(model, rule)
    out = []
    for start in range(0, count, n):
        stop = min(start + n, count)
        count_call()
        out.append(backend.to_numpy(kernel(_chunk(inputs, start, stop, n)))[: stop - start])
    return np.concatenate(out, axis=0)


def _batch(inputs: Any) -> tuple[Any, int, Any, Any]:
    """``(inputs, B, shape, dtype)``: one array, or a list of a model's several inputs (graph
    order), whose shapes and dtypes are then lists."""
    if isinstance(inputs, (list, tuple)):
        arrays = [np.asarray(a) for a in inputs]
        return arrays, len(arrays[0]), [a.shape[1:] for a in arrays], [a.dtype.name for a in arrays]
    array = np.asarray(inputs)
    return array, len(array), array.shape[1:], array.dtype.name


def _chunk(inputs: Any, start: int, stop: int, n: int) -> Any:
    if isinstance(inputs, list):
        return tuple(chunking.pad(a[start:stop], n) for a in inputs)
    return chunking.pad(inputs[start:stop], n)


def forward_scores(
    model: keras.Model,
    inputs: Any,
    targets: Any,
    *,
    score: str = "logits",
    batch_size: int = 32,
) -> np.ndarray:
    """Scores ``[B, K]`` (float32) of the classes ``targets`` (int ``[B, K]``) for ``inputs``.

    Batched (``batch_size`` inputs per compiled call, the last chunk padded), compiled once per
    (model, score, input shape, chunk size) and reused: meant for evaluating many perturbed
    images (deletion/insertion curves). ``inputs`` are checked like ``explain``'s.
    """
    inputs = check_inputs(model, inputs)
    targets = np.asarray(targets)
    if targets.ndim == 1:
        targets = targets[:, None]
    if targets.ndim != 2 or len(targets) != len(inputs) or not np.issubdtype(targets.dtype, np.integer):
        raise ValueError(f"targets must be an int array [{len(inputs)}, K]; received {targets.dtype} {targets.shape}.")
    columns = active_backend().score_columns(model)
    if columns is None:
        raise ValueError(
            "forward_scores needs a model whose output is [batch, classes] (for other targets, "
            "engine.target_scores); received a model whose output is not."
        )
    if targets.size and (targets.min() < 0 or targets.max() >= columns):
        raise ValueError(
            f"targets must lie in [0, {columns - 1}]; received values from {targets.min()} to {targets.max()}."
        )
    values = all_scores(model, inputs, score=score, batch_size=batch_size)
    return np.take_along_axis(values, targets.astype(np.int64), axis=1)
