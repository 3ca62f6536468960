"""The attribution engine: the one place that takes gradients.

Every method turns its formula into calls of three compiled kernels built here:

* :func:`gradients` — ``∂s_k/∂z`` at points ``z`` built from each input: the input itself
  (gradient, guided backprop, ...), noisy copies (SmoothGrad), a straight path from a baseline
  (integrated gradients), or both; with running sums over samples and path steps, so memory
  does not grow with ``samples`` or ``steps``.
* :func:`cam` — a layer's activations and the gradients of the scores with respect to them,
  reduced to Grad-CAM / Grad-CAM++ maps and upsampled bilinearly to the input's ``H×W``.
* :func:`forward_scores` / :func:`all_scores` — scores without gradients (occlusion, deletion
  curves, ``"topK"`` targets, integrated-gradients completeness).

Performance by design:

* **Compiled and cached.** Each kernel is a ``tf.function`` with a fixed input signature, cached
  per (model — held weakly —, score view, rule, method plan, input shape and dtype, chunk
  layout). The last chunk of a batch is padded to the chunk size, so a new batch never retraces;
  chunk sizes are powers of two up to the budget, so small batches do not pay for big ones.
  :func:`trace_count` counts traces (tests use it to prove reuse).
* **Chunked.** A compiled call evaluates at most ``batch_size`` (input × class × sample × step)
  rows. Larger requests loop over chunks of inputs and groups of classes; samples and steps
  loop *inside* the compiled function (``tf.while_loop``), adding into running sums.
* **One forward pass for K classes.** The K target scores of an input share its forward pass;
  their K backward passes run in a loop inside the compiled function (on a GPU: vectorised
  with ``pfor``), through ``GradientTape.batch_jacobian``.

Dtypes: the model runs in its own dtype policy (mixed precision included); sums are kept in the
input dtype and results leave as float32 NumPy arrays. Models always run with ``training=False``:
Dropout is inactive, BatchNorm uses (and never updates) its moving statistics, weights are never
written.
"""
from __future__ import annotations

import logging
import math
import weakref
from dataclasses import dataclass
from typing import NamedTuple

import keras
import numpy as np
import tensorflow as tf

from .targets import ScoreView, score_columns

__all__ = [
    "GradientPlan",
    "check_inputs",
    "check_batch_size",
    "score_view",
    "rewritten_model",
    "gradients",
    "cam",
    "forward_scores",
    "all_scores",
    "trace_count",
    "call_count",
    "clear_cache",
]

# compiled-function bookkeeping -----------------------------------------------------------------
_stats = {"traces": 0, "calls": 0}
_functions: "weakref.WeakKeyDictionary[object, dict]" = weakref.WeakKeyDictionary()
_views: "weakref.WeakKeyDictionary[object, dict]" = weakref.WeakKeyDictionary()
_rewritten: "weakref.WeakKeyDictionary[object, dict]" = weakref.WeakKeyDictionary()


def trace_count() -> int:
    """How many times the engine has traced (compiled) a kernel since the process started."""
    return _stats["traces"]


def call_count() -> int:
    """How many compiled kernel calls the engine has made since the process started."""
    return _stats["calls"]


def clear_cache() -> None:
    """Forget every compiled kernel, score view and rewritten model."""
    _functions.clear()
    _views.clear()
    _rewritten.clear()


class _OwnKernelsFilter(logging.Filter):
    """Drop TensorFlow's "frequent retracing" warning for the engine's kernels.

    Each cache entry is its own ``tf.function`` built from the same Python code, which that
    heuristic mistakes for retracing; real retracing is counted by :func:`trace_count`.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not ("triggered tf.function retracing" in message and "_build_" in message)


tf.get_logger().addFilter(_OwnKernelsFilter())


def _traced() -> None:
    _stats["traces"] += 1  # runs only while tracing: the Python body is not re-run by calls


# inputs ----------------------------------------------------------------------------------------
def check_inputs(model, inputs) -> np.ndarray:
    """``inputs`` as a NumPy array in the model's input dtype, checked against the model.

    Raises ``ValueError`` for multi-input or unbuilt models, non-float or non-finite inputs and
    shapes that do not fit the model's input ``[B, ...]``.
    """
    try:
        model_inputs = model.inputs
    except (AttributeError, ValueError):
        model_inputs = None
    if not model_inputs:
        raise ValueError(
            f"model {getattr(model, 'name', model)!r} has no defined input; build it first "
            "(give it a keras.Input, or call it once on a batch)."
        )
    if len(model_inputs) != 1:
        raise ValueError(f"saliency_kit explains single-input models; this one has {len(model_inputs)}.")
    expected = tuple(model_inputs[0].shape)
    dtype = keras.backend.standardize_dtype(model_inputs[0].dtype)
    try:
        array = np.asarray(inputs)
    except Exception as err:
        raise ValueError(f"inputs could not be read as an array: {err}") from None
    if not np.issubdtype(array.dtype, np.floating):
        raise ValueError(
            f"inputs must be floating point, already preprocessed for the model (expected "
            f"{dtype}); received dtype {array.dtype}. Apply the model's preprocessing first."
        )
    if array.ndim != len(expected) or any(
        e is not None and e != r for e, r in zip(expected[1:], array.shape[1:])
    ):
        want = "[B, " + ", ".join("?" if e is None else str(e) for e in expected[1:]) + "]"
        raise ValueError(
            f"inputs must have shape {want} for model {model.name!r}; received {array.shape}."
        )
    if array.shape[0] == 0:
        raise ValueError("inputs is empty: expected at least one input along the first axis.")
    if not np.all(np.isfinite(array)):
        raise ValueError("inputs contain NaN or infinite values.")
    return np.ascontiguousarray(array.astype(dtype, copy=False))


# cached model views ----------------------------------------------------------------------------
def _per_model(cache, model) -> dict:
    try:
        return cache.setdefault(model, {})
    except TypeError:  # not weak-referenceable: cache nothing rather than leak
        return {}


def _weight_sync(source, copy):
    """A compiled function copying ``source``'s weights into ``copy`` (same architecture)."""
    pairs = list(zip(source.weights, copy.weights))
    # The rewrite rebuilds the same graph, so its variables come in the same order; names can
    # differ (Keras numbers unnamed variables: "variable" becomes "variable_1").
    if len(source.weights) != len(copy.weights) or any(
        tuple(a.shape) != tuple(b.shape) or a.dtype != b.dtype for a, b in pairs
    ):
        raise RuntimeError(f"the rewrite of {source.name!r} does not mirror its weights")

    @tf.function(autograph=False)
    def sync():
        for a, b in pairs:
            b.value.assign(a.value)

    return sync


def rewritten_model(model, rule):
    """``sk.rewrite(model, rule)``, cached per (model, rule) while ``model`` lives.

    A rewrite holds a copy of the weights; they are refreshed from ``model`` on every call (one
    compiled copy), so training or editing ``model`` later is always seen.
    """
    if rule is None:
        return model
    from .rewriting import rewrite

    per_model = _per_model(_rewritten, model)
    key = rule if isinstance(rule, str) else id(rule)
    if key not in per_model:
        copy = rewrite(model, rule)
        per_model[key] = (rule, copy, _weight_sync(model, copy))  # the rule stays alive with its id
    _, copy, sync = per_model[key]
    sync()
    return copy


def score_view(model, score="logits", score_fn=None, rule=None) -> ScoreView:
    """The cached :class:`~saliency_kit.targets.ScoreView` of ``model`` (rewritten by ``rule``)."""
    target_model = rewritten_model(model, rule)
    per_model = _per_model(_views, model)
    key = _view_key(score, score_fn, rule)
    if key not in per_model:
        per_model[key] = (score_fn, ScoreView(target_model, score, score_fn))
    return per_model[key][1]


def _compiled(model, key, build):
    per_model = _per_model(_functions, model)
    if key not in per_model:
        per_model[key] = build()
    return per_model[key]


# chunking --------------------------------------------------------------------------------------
def _bucket(count: int, cap: int) -> int:
    """The chunk size for ``count`` items: a power of two, at most ``cap``."""
    return max(1, min(cap, 1 << max(0, math.ceil(math.log2(max(count, 1))))))


def _pad(array: np.ndarray, size: int) -> np.ndarray:
    """``array`` padded along axis 0 to ``size`` rows by repeating its last row."""
    missing = size - len(array)
    if missing <= 0:
        return array
    return np.concatenate([array, np.repeat(array[-1:], missing, axis=0)], axis=0)


def _class_groups(targets: np.ndarray, group: int):
    """Yield ``(k0, k1, columns [B, group])``: targets in groups of ``group`` classes, padded."""
    for k0 in range(0, targets.shape[1], group):
        columns = targets[:, k0 : k0 + group]
        yield k0, k0 + columns.shape[1], _pad(columns.T, group).T


def _numpy(tensor) -> np.ndarray:
    return np.asarray(tensor).astype(np.float32)


def _target_scores(values, targets):
    return tf.gather(values, targets, batch_dims=1)


def _recurrent(model) -> bool:
    """Whether ``model`` (nested models included) has recurrent layers (while loops)."""
    for layer in getattr(model, "layers", ()):
        if isinstance(layer, (keras.layers.RNN, keras.layers.Bidirectional)) or _recurrent(layer):
            return True
    return False


def _vectorise_classes(model) -> bool:
    """Whether K backward passes should run vectorised (``pfor``) rather than in a loop.

    Vectorised on a GPU. On a CPU a loop of K backward passes over the shared forward pass is
    faster (measured on ResNet50: about 0.6–0.8 of K separate calls, ``pfor`` about 0.9, since
    a K× larger backward batch runs less efficiently there). Recurrent models always loop:
    ``pfor`` takes many seconds to convert their while loops.
    """
    return bool(tf.config.list_logical_devices("GPU")) and not _recurrent(model)


def _differentiate(tape, scores, source, vectorise=True):
    """``[n, K, *source.shape[1:]]``: ∂scores[:, k]/∂source, rows independent.

    K = 1 is one backward pass; K > 1 runs K backward passes over the one forward pass, either
    vectorised (``pfor``) or in a ``tf.while_loop`` (see :func:`_vectorise_classes`). A score
    that does not reach ``source`` gives zeros.
    """
    zero = tf.UnconnectedGradients.ZERO
    if scores.shape[1] == 1:
        return tape.gradient(scores, source, unconnected_gradients=zero)[:, None]
    if vectorise:
        try:
            return tape.batch_jacobian(scores, source, unconnected_gradients=zero)
        except (ValueError, NotImplementedError, TypeError, tf.errors.OpError):
            pass  # an op pfor cannot vectorise: loop over the classes instead
    return tape.batch_jacobian(
        scores, source, unconnected_gradients=zero, experimental_use_pfor=False
    )


def _gradient_at(view, z, targets, tap=None):
    """Scores ``[rows, K]`` and their gradients w.r.t. ``z`` (or the tapped layer)."""
    with tf.GradientTape(persistent=targets.shape[1] > 1, watch_accessed_variables=False) as tape:
        tape.watch(z)
        if tap is None:
            values, source = view(z), z
        else:
            values, source = view(z, tap=tap)
        scores = _target_scores(values, targets)
    return scores, _differentiate(tape, scores, source, vectorise=_vectorise_classes(view.model))


# gradients -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class GradientPlan:
    """What :func:`gradients` computes for each input ``x`` and target ``k`` (static options).

    * ``alphas``/``weights``: path points on [0, 1] and their quadrature weights. ``None``: the
      gradient at the (noisy) input itself. With a path the points are ``x′ + α (x − x′)``.
    * ``multiply``: ``"none"`` (the gradient), ``"input"`` (input × gradient) or ``"path"``
      (``(x − x′) ×`` path-weighted gradient, integrated gradients).
    * ``samples``/``noise``: noisy copies ``x + ε``, ``ε ~ N(0, (noise · (max x − min x))²)``,
      drawn per (seed, input index, sample index), so results do not depend on chunking.
    * ``aggregate`` over samples: ``"mean"``, ``"square"`` (mean of squares) or ``"variance"``.
    """

    alphas: tuple | None = None
    weights: tuple | None = None
    multiply: str = "none"
    samples: int = 1
    noise: float = 0.0
    aggregate: str = "mean"

    @property
    def steps(self) -> int:
        return 1 if self.alphas is None else len(self.alphas)

    @property
    def plain(self) -> bool:
        return self.alphas is None and self.samples == 1 and self.noise == 0.0


def _layout(batch_size: int, num_inputs: int, num_classes: int, plan: GradientPlan):
    """``(n inputs, class group, samples per call, steps per call)`` within the row budget."""
    group = min(num_classes, batch_size)
    rows = max(1, batch_size // group)
    per_steps = min(plan.steps, rows)
    per_samples = min(plan.samples, max(1, rows // per_steps))
    inputs = _bucket(num_inputs, max(1, rows // (per_steps * per_samples)))
    return inputs, group, per_samples, per_steps


def _build_gradient_kernel(view, plan, n, group, m_s, m_t, shape, dtype):
    """The compiled ``kernel(x, targets, index, seed, baseline)``.

    Returns attributions ``[n, K, ...]``, and scores ``[n, K]`` at the input and at the baseline
    when they come free (plain plan: at the input; noise-free path: where α = 1 and α = 0),
    zeros otherwise.
    """
    rank = len(shape)
    s_blocks = math.ceil(plan.samples / m_s)
    t_blocks = math.ceil(plan.steps / m_t)
    if plan.alphas is not None:
        padding = t_blocks * m_t - plan.steps  # padded points get weight 0
        alphas = np.concatenate([plan.alphas, np.zeros(padding)]).reshape(t_blocks, m_t)
        weights = np.concatenate([plan.weights, np.zeros(padding)]).reshape(t_blocks, m_t)
        # where the path passes through the input (α = 1) and the baseline (α = 0), the scores
        # there come free with the gradients: no extra forward pass for them
        real = np.arange(t_blocks * m_t).reshape(t_blocks, m_t) < plan.steps
        at_input = (alphas == 1.0) & real
        at_baseline = (alphas == 0.0) & real

    def expand(v, leading):  # [m] -> [1]*leading + [m] + [1]*rank (broadcast over an input)
        return tf.reshape(v, [1] * leading + [-1] + [1] * rank)

    def noisy_copies(x, index, seed, block):
        ids = block * m_s + tf.range(m_s)
        xs = tf.repeat(x[:, None], m_s, axis=1)  # [n, m_s, ...]
        if plan.noise == 0.0:
            return xs, ids
        axes = list(range(1, rank + 1))
        sigma = plan.noise * (tf.reduce_max(x, axis=axes) - tf.reduce_min(x, axis=axes))
        counters = tf.cast(index, tf.int64)[:, None] * plan.samples + tf.cast(ids, tf.int64)[None]
        seeds = tf.stack([tf.fill(tf.shape(counters), seed), counters], axis=-1)
        eps = tf.map_fn(
            lambda s: tf.random.stateless_normal(shape, seed=s, dtype=x.dtype),
            tf.reshape(seeds, [-1, 2]),
            fn_output_signature=tf.TensorSpec(shape, x.dtype),
        )
        eps = tf.reshape(eps, [n, m_s, *shape])
        return xs + tf.reshape(sigma, [n, 1] + [1] * rank) * eps, ids

    def grads_at(points, targets, copies):
        """points [n, copies, ...] -> scores [n, copies, K], gradients [n, copies, K, ...]"""
        rows = tf.reshape(points, [n * copies, *shape])
        repeated = tf.reshape(tf.repeat(targets[:, None], copies, axis=1), [n * copies, group])
        s, g = _gradient_at(view, rows, repeated)
        return tf.reshape(s, [n, copies, group]), tf.reshape(g, [n, copies, group, *shape])

    def along_path(xs, targets, baseline):
        """Σ_t w_t ∂s/∂z at z = x′ + α_t (x − x′): [n, m_s, K, ...]; and s(x), s(x′) [n, m_s, K]
        summed over the points where α = 1 and α = 0 (zeros if the rule has no such point)."""
        delta = xs - baseline

        def pick(s, mask):  # s [n, m_s, m_t, K], mask [m_t] -> [n, m_s, K] (small: float32)
            return tf.reduce_sum(tf.cast(s, tf.float32) * tf.reshape(tf.cast(mask, tf.float32), [1, 1, -1, 1]), axis=2)

        def block(i, sums):
            total, end, start = sums
            a = tf.cast(tf.gather(alphas, i), xs.dtype)
            w = tf.cast(tf.gather(weights, i), xs.dtype)
            points = baseline + expand(a, 2) * delta[:, :, None]  # [n, m_s, m_t, ...]
            s, g = grads_at(tf.reshape(points, [n, m_s * m_t, *shape]), targets, m_s * m_t)
            s = tf.reshape(s, [n, m_s, m_t, group])
            g = tf.reshape(g, [n, m_s, m_t, group, *shape])
            total = total + tf.reduce_sum(g * tf.reshape(w, [1, 1, -1] + [1] * (rank + 1)), axis=2)
            end = end + pick(s, tf.gather(at_input, i))
            start = start + pick(s, tf.gather(at_baseline, i))
            return i + 1, (total, end, start)

        no_scores = tf.zeros([n, m_s, group], tf.float32)
        sums = (tf.zeros([n, m_s, group, *shape], xs.dtype), no_scores, no_scores)
        if t_blocks == 1:
            return block(0, sums)[1]
        return tf.while_loop(lambda i, _: i < t_blocks, block, (0, sums), parallel_iterations=1)[1]

    def kernel(x, targets, index, seed, baseline):
        _traced()
        if plan.plain:
            scores, g = _gradient_at(view, x, targets)
            if plan.multiply == "input":
                g = x[:, None] * g
            return g, scores, tf.zeros_like(scores)

        def sample_block(j, sums):
            xs, ids = noisy_copies(x, index, seed, j)
            if plan.alphas is None:
                a = grads_at(xs, targets, m_s)[1]
            else:
                a, end, start = along_path(xs, targets, baseline)
                endpoints.append((end[:, 0], start[:, 0]))  # used only without noise (m_s = 1)
            if plan.multiply == "input":
                a = xs[:, :, None] * a
            elif plan.multiply == "path":
                a = (xs - baseline)[:, :, None] * a
            valid = tf.cast(ids < plan.samples, a.dtype)
            a = a * tf.reshape(valid, [1, m_s, 1] + [1] * rank)
            first, second = sums
            first = first + tf.reduce_sum(a, axis=1)
            if plan.aggregate != "mean":
                second = second + tf.reduce_sum(tf.square(a), axis=1)
            return j + 1, (first, second)

        endpoints = []
        zeros = tf.zeros([n, group, *shape], x.dtype)
        if s_blocks == 1:
            _, (first, second) = sample_block(0, (zeros, zeros))
        else:
            _, (first, second) = tf.while_loop(  # one block at a time: memory stays one chunk
                lambda j, _: j < s_blocks, sample_block, (0, (zeros, zeros)), parallel_iterations=1
            )
        mean = first / plan.samples
        if plan.aggregate == "square":
            mean = second / plan.samples
        elif plan.aggregate == "variance":  # E[a²] − E[a]², never negative
            mean = tf.nn.relu(second / plan.samples - tf.square(mean))
        if endpoints and s_blocks == 1:
            return mean, endpoints[0][0], endpoints[0][1]
        no_scores = tf.zeros([n, group], tf.float32)
        return mean, no_scores, no_scores

    signature = [
        tf.TensorSpec([n, *shape], dtype),
        tf.TensorSpec([n, group], tf.int32),
        tf.TensorSpec([n], tf.int32),
        tf.TensorSpec([], tf.int64),
        tf.TensorSpec(shape, dtype),
    ]
    return tf.function(kernel, input_signature=signature)


class Gradients(NamedTuple):
    """What :func:`gradients` returns (float32 NumPy arrays)."""

    attributions: np.ndarray  # [B, K, *input.shape[1:]]
    scores: np.ndarray  # [B, K] at the inputs as given
    baseline_scores: np.ndarray | None  # [B, K] at the baseline, when the path passed through it


def gradients(
    model,
    inputs: np.ndarray,
    targets: np.ndarray,
    plan: GradientPlan = GradientPlan(),
    *,
    score="logits",
    score_fn=None,
    rule=None,
    batch_size: int = 32,
    seed: int = 0,
    baseline: np.ndarray | float = 0.0,
):
    """Attributions ``[B, K, *inputs.shape[1:]]`` and scores ``[B, K]``: a :class:`Gradients`.

    ``inputs`` come from :func:`check_inputs`, ``targets`` int ``[B, K]`` index the score vector.
    ``rule`` (``"guided"``, ``"deconv"``, a ``ModifiedBackprop``) differentiates through
    ``sk.rewrite(model, rule)``. Scores are those of the clean inputs: free with the gradient for
    a plain plan or a noise-free path through α = 1, one extra forward pass otherwise. ``seed`` keys the noise of SmoothGrad;
    ``baseline`` (broadcastable to one input) starts the integrated-gradients path.
    """
    check_batch_size(batch_size)
    view = score_view(model, score, score_fn, rule)
    shape, dtype = inputs.shape[1:], inputs.dtype
    B, K = targets.shape
    n, group, m_s, m_t = _layout(batch_size, B, K, plan)
    key = ("gradients", _view_key(score, score_fn, rule), plan, shape, dtype.name, n, group, m_s, m_t)
    kernel = _compiled(model, key, lambda: _build_gradient_kernel(view, plan, n, group, m_s, m_t, shape, dtype))
    base = np.broadcast_to(np.asarray(baseline, dtype=dtype), shape)
    attributions = np.zeros((B, K, *shape), np.float32)
    scores = np.zeros((B, K), np.float32)
    at_baseline = np.zeros((B, K), np.float32)
    seed_tensor = tf.constant(int(seed), tf.int64)
    for start in range(0, B, n):
        stop = min(start + n, B)
        x = _pad(inputs[start:stop], n)
        index = _pad(np.arange(start, stop, dtype=np.int32), n)
        for k0, k1, columns in _class_groups(targets[start:stop], group):
            _stats["calls"] += 1
            a, s, s0 = kernel(x, _pad(columns, n).astype(np.int32), index, seed_tensor, base)
            rows, cols = slice(start, stop), slice(k0, k1)
            attributions[rows, cols] = _numpy(a)[: stop - start, : k1 - k0]
            scores[rows, cols] = _numpy(s)[: stop - start, : k1 - k0]
            at_baseline[rows, cols] = _numpy(s0)[: stop - start, : k1 - k0]
    clean = plan.samples == 1 and plan.noise == 0.0
    if not (plan.plain or (clean and 1.0 in plan.alphas)):
        values = all_scores(model, inputs, score=score, score_fn=score_fn, batch_size=batch_size)
        scores = np.take_along_axis(values, targets, axis=1)
    if plan.plain or not (clean and 0.0 in plan.alphas):
        at_baseline = None
    return Gradients(attributions, scores, at_baseline)


def _view_key(score, score_fn, rule):
    return (score, None if score_fn is None else id(score_fn), rule if isinstance(rule, str) else id(rule))


def check_batch_size(batch_size) -> None:
    """``ValueError`` unless ``batch_size`` is a positive int."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive int; received {batch_size!r}.")


# Grad-CAM --------------------------------------------------------------------------------------
def _build_cam_kernel(view, layer, plus_plus, relu, n, group, shape, dtype):
    height, width = shape[0], shape[1]

    def cam_kernel(x, targets):
        _traced()
        with tf.GradientTape(persistent=group > 1, watch_accessed_variables=False) as tape:
            tape.watch(x)  # records the forward pass, so the tapped activations can be sources
            values, activations = view(x, tap=layer)
            scores = _target_scores(values, targets)
        if len(activations.shape) != 4:
            raise ValueError(
                f"layer {layer!r} has a {len(activations.shape)}-D output {activations.shape}; "
                "CAM methods need a 4-D [batch, height, width, channels] layer."
            )
        g = _differentiate(tape, scores, activations, vectorise=_vectorise_classes(view.model))  # [n, K, h, w, c]
        if plus_plus:
            g2 = tf.square(g)
            g3 = g2 * g
            total = tf.reduce_sum(activations, axis=(1, 2), keepdims=True)[:, None]
            denominator = 2.0 * g2 + total * g3
            alpha = tf.math.divide_no_nan(g2, denominator)
            weights = tf.reduce_sum(alpha * tf.nn.relu(g), axis=(2, 3))  # [n, K, c]
        else:
            weights = tf.reduce_mean(g, axis=(2, 3))
        maps = tf.einsum("nkc,nhwc->nkhw", weights, activations)
        if relu:
            maps = tf.nn.relu(maps)
        h, w = maps.shape[2], maps.shape[3]
        flat = tf.reshape(maps, [n * group, h, w, 1])
        if (h, w) != (height, width):
            flat = tf.image.resize(flat, (height, width), method="bilinear")
        return tf.reshape(flat, [n, group, height, width]), scores

    signature = [tf.TensorSpec([n, *shape], dtype), tf.TensorSpec([n, group], tf.int32)]
    return tf.function(cam_kernel, input_signature=signature)


def cam(model, inputs, targets, layer: str, *, plus_plus=False, relu=True, score="logits",
        score_fn=None, batch_size=32):
    """Grad-CAM (or Grad-CAM++) maps ``[B, K, H, W]`` on ``layer`` (a path) and scores ``[B, K]``.

    Grad-CAM: ``relu(Σ_c mean_hw(∂s/∂A_c) · A_c)``. Grad-CAM++ (Chattopadhay et al., eq. 19 with
    the exponential-score closed form): channel weights ``Σ_hw α · relu(∂s/∂A)`` with
    ``α = g² / (2 g² + Σ_hw A · g³)``. Upsampled bilinearly to ``H×W`` = ``inputs.shape[1:3]``.
    """
    check_batch_size(batch_size)
    if inputs.ndim != 4:
        raise ValueError(
            f"CAM methods need image inputs [B, H, W, C]; received shape {inputs.shape}."
        )
    view = score_view(model, score, score_fn)
    shape, dtype = inputs.shape[1:], inputs.dtype
    B, K = targets.shape
    group = min(K, batch_size)
    n = _bucket(B, max(1, batch_size // group))
    key = ("cam", _view_key(score, score_fn, None), layer, plus_plus, relu, shape, dtype.name, n, group)
    kernel = _compiled(model, key, lambda: _build_cam_kernel(view, layer, plus_plus, relu, n, group, shape, dtype))
    maps = np.zeros((B, K, *shape[:2]), np.float32)
    scores = np.zeros((B, K), np.float32)
    for start in range(0, B, n):
        stop = min(start + n, B)
        x = _pad(inputs[start:stop], n)
        for k0, k1, columns in _class_groups(targets[start:stop], group):
            _stats["calls"] += 1
            m, s = kernel(x, _pad(columns, n).astype(np.int32))
            maps[start:stop, k0:k1] = _numpy(m)[: stop - start, : k1 - k0]
            scores[start:stop, k0:k1] = _numpy(s)[: stop - start, : k1 - k0]
    return maps, scores


# scores without gradients ----------------------------------------------------------------------
def _build_values_kernel(view, n, shape, dtype):
    def kernel(x):
        _traced()
        return view(x)

    return tf.function(kernel, input_signature=[tf.TensorSpec([n, *shape], dtype)])


def all_scores(model, inputs, *, score="logits", score_fn=None, rule=None, batch_size=32) -> np.ndarray:
    """The whole score vector ``[B, C]`` of every input (float32), compiled and chunked."""
    check_batch_size(batch_size)
    inputs = np.asarray(inputs)
    view = score_view(model, score, score_fn, rule)
    shape, dtype = inputs.shape[1:], inputs.dtype
    n = _bucket(len(inputs), batch_size)
    key = ("values", _view_key(score, score_fn, rule), shape, dtype.name, n)
    kernel = _compiled(model, key, lambda: _build_values_kernel(view, n, shape, dtype))
    out = []
    for start in range(0, len(inputs), n):
        stop = min(start + n, len(inputs))
        _stats["calls"] += 1
        out.append(_numpy(kernel(_pad(inputs[start:stop], n)))[: stop - start])
    return np.concatenate(out, axis=0)


def forward_scores(model, inputs, targets, *, score="logits", batch_size=32, score_fn=None) -> np.ndarray:
    """Scores ``[B, K]`` (float32) of the classes ``targets`` (int ``[B, K]``) for ``inputs``.

    Batched (``batch_size`` inputs per compiled call, the last chunk padded), compiled once per
    (model, score, input shape, chunk size) and reused: meant for evaluating many perturbed
    images (deletion/insertion curves, occlusion). ``inputs`` are checked like ``explain``'s.
    """
    inputs = check_inputs(model, inputs)
    targets = np.asarray(targets)
    if targets.ndim == 1:
        targets = targets[:, None]
    if targets.ndim != 2 or len(targets) != len(inputs) or not np.issubdtype(targets.dtype, np.integer):
        raise ValueError(
            f"targets must be an int array [{len(inputs)}, K]; received {targets.dtype} {targets.shape}."
        )
    columns = score_columns(model, score_fn)
    if columns is None:
        raise ValueError("forward_scores needs a model whose output is [batch, classes], or a score_fn.")
    if targets.size and (targets.min() < 0 or targets.max() >= columns):
        raise ValueError(
            f"targets must lie in [0, {columns - 1}]; received values from {targets.min()} to {targets.max()}."
        )
    values = all_scores(model, inputs, score=score, score_fn=score_fn, batch_size=batch_size)
    return np.take_along_axis(values, targets.astype(np.int64), axis=1)
