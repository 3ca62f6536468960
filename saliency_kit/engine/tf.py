"""The TensorFlow backend of the engine: every TensorFlow-specific piece lives here.

``tf.function`` kernels, gradient tapes, while loops, the stateless random generator and image
resizing are here and nowhere else in the engine or the methods; a ``jax.py`` sibling offering
the same :class:`Context` and kernel builders could be added later.

A method's function runs inside one compiled kernel per (model, method, options, shapes, chunk
layout); it sees a :class:`Context` whose primitives it combines into its formula:

* ``ctx.gradients(points, rule=None)`` — ``∂s_k/∂z`` of the target scores at ``points``;
* ``ctx.scores(points, rule=None)`` — the target scores, forward only;
* ``ctx.values(points, rule=None)`` — the whole score vector, forward only;
* ``ctx.gradients_per_target(points)`` — one point per input and target, each differentiated
  for its own target only;
* ``ctx.layer(path)`` — a layer's activations and the gradients of the scores with respect to
  them;
* ``ctx.sum(count, fn)`` — a running sum over ``count`` items in blocks that fit the chunk, in a
  ``tf.while_loop`` (memory stays one chunk whatever ``samples``/``steps`` are);
* ``ctx.at(points)`` — the same context at other inputs (noisy copies), for methods built on
  another method;
* ``ctx.normal(ids, count)`` — seeded noise keyed by (seed, input key, sample), so results do
  not depend on chunking (nor, with ``explain(..., input_keys=)``, on an input's batch);
* ``ctx.resize(maps, size)`` — bilinear upsampling of ``[n, K, h, w]`` maps.

Models always run with ``training=False``: Dropout is inactive, BatchNorm uses (and never updates)
its moving statistics, weights are never written.
"""
from __future__ import annotations

import logging
import math

import keras
import numpy as np
import tensorflow as tf

from ..model.copy import input_signature as copy_signature
from ..model.layers import is_recurrent, walk

__all__ = ["Context", "Selection", "build_kernel", "build_values_kernel", "weight_sync", "input_signature", "vectorise_classes"]


class _OwnKernelsFilter(logging.Filter):
    """Drop TensorFlow's "frequent retracing" warning for the engine's kernels.

    Each cache entry is its own ``tf.function`` built from the same Python code, which that
    heuristic mistakes for retracing; real retracing is counted by ``engine.trace_count``.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not ("triggered tf.function retracing" in message and "kernel" in message)


tf.get_logger().addFilter(_OwnKernelsFilter())

_SMALL_FLOATS = ("float16", "bfloat16")


# ------------------------------------------------------------------------------------ models
def input_signature(model) -> tuple[tuple, str]:
    """``(shape [None, ...], dtype)`` of ``model``'s single input.

    Functional and Sequential models give it through ``model.inputs``; a subclassed model that
    was built or called gives it through its build shape. ``TypeError`` for anything that is not
    a Keras model; ``ValueError`` for unbuilt or multi-input models.
    """
    if not isinstance(model, keras.Model):
        kind = "None" if model is None else f"a {type(model).__name__}"
        raise TypeError(f"model must be a keras.Model (functional, Sequential or subclassed); received {kind}.")
    signatures = copy_signature(model)
    if len(signatures) != 1:
        raise ValueError(
            f"saliency_kit explains single-input models; this one has {len(signatures)} inputs; "
            f"received {model.name!r}."
        )
    shape, dtype = signatures[0]
    return (None, *shape[1:]), dtype


_SPATIAL_KINDS = ("Conv", "Pooling", "UpSampling", "Cropping", "ZeroPadding", "LocallyConnected")


def _sublayers(model):
    """``model`` and every layer inside it (nested models, wrappers, cells): the one walker."""
    yield model
    for visit in walk(model):
        yield visit.layer


def channel_axis(model, rank: int) -> int:
    """The channel axis of one input (``-1`` channels-last, ``0`` channels-first).

    Channels-first when the model's spatial layers (convolutions, pooling, up-sampling, cropping,
    padding) use ``data_format="channels_first"``. ``ValueError`` when they mix both formats
    (which axis is spatial cannot be told then). Non-image inputs (rank < 3) are channels-last.
    """
    formats = {}
    for layer in _sublayers(model):
        kind = type(layer).__name__
        data_format = getattr(layer, "data_format", None)
        if data_format in ("channels_first", "channels_last") and any(k in kind for k in _SPATIAL_KINDS):
            formats.setdefault(data_format, layer.name)
    if len(formats) > 1:
        raise ValueError(
            f"model {model.name!r} mixes channels_first (layer {formats['channels_first']!r}) and "
            f"channels_last (layer {formats['channels_last']!r}) spatial layers, so its spatial axes "
            "cannot be told; saliency_kit refuses rather than reduce the wrong axis; received a mixed model."
        )
    return 0 if "channels_first" in formats and rank >= 2 else -1


def vectorise_classes(model) -> bool:
    """Whether K backward passes should run vectorised (``pfor``) rather than in a loop.

    Vectorised on a GPU. On a CPU a loop of K backward passes over the shared forward pass is
    faster (measured on ResNet50: about 0.6–0.8 of K separate calls, ``pfor`` about 0.9, since
    a K× larger backward batch runs less efficiently there). Recurrent models always loop:
    ``pfor`` takes many seconds to convert their while loops.
    """
    return bool(tf.config.list_logical_devices("GPU")) and not is_recurrent(model)


def weight_sync(source, copy):
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


_EAGER_TENSOR = type(tf.constant(0.0))  # variables are not of this type


def derived_state(layer) -> tuple:
    """``(attribute, dtype, shape, digest)`` of each tensor ``layer`` holds outside its variables
    (``Normalization``'s mean and variance, derived from its variables by ``finalize_state``): a
    compiled function captures such tensors as constants, so they key the engine's caches, by
    value (small per-channel statistics in practice)."""
    import hashlib

    state = []
    for name, value in vars(layer).items():
        if isinstance(value, _EAGER_TENSOR):
            data = np.ascontiguousarray(value.numpy())
            state.append((name, data.dtype.str, data.shape, hashlib.blake2b(data.tobytes(), digest_size=16).digest()))
    return tuple(state)


def eagerly(fn):
    """``fn()`` run eagerly even while a kernel is being traced (building a view or a rewrite
    runs the model on probe inputs, which must not land in the kernel's graph)."""
    with tf.init_scope():
        return fn()


# ------------------------------------------------------------------------------- derivatives
def _target_scores(values, targets):
    return tf.gather(values, targets, batch_dims=1)


class Selection:
    """What the rows of a block explain: ``columns`` int32 ``[rows, K]``, the target object
    (``None``: the columns index the score vector, a gather) and its payload (a pytree of
    tensors, each ``[rows, K, ...]`` or, for per-input leaves, ``[rows, ...]``)."""

    def __init__(self, columns, target=None, payload=None, per_input=()):
        self.columns = columns
        self.target = target
        self.payload = payload
        self._per_input = tuple(per_input)  # per flattened payload leaf: shared by the columns

    @property
    def width(self) -> int:
        return int(self.columns.shape[1])

    def _map(self, column_fn, input_fn):
        if self.payload is None:
            return None
        leaves = tf.nest.flatten(self.payload)
        mapped = [input_fn(leaf) if shared else column_fn(leaf) for leaf, shared in zip(leaves, self._per_input)]
        return tf.nest.pack_sequence_as(self.payload, mapped)

    def repeat(self, copies: int) -> "Selection":
        """Each row repeated ``copies`` times (row ``b·copies + c`` is copy c of row b)."""
        if copies == 1:
            return self
        rep = lambda t: tf.repeat(t, copies, axis=0)  # noqa: E731
        return Selection(rep(self.columns), self.target, self._map(rep, rep), self._per_input)

    def per_column(self) -> "Selection":
        """Rows ``n·K``, one column each: row ``b·K + k`` is column k of row b."""
        n, K = self.columns.shape[0], self.width

        def split(leaf):
            return tf.reshape(leaf, [n * K, 1, *leaf.shape[2:]])

        return Selection(tf.reshape(self.columns, [n * K, 1]), self.target,
                         self._map(split, lambda leaf: tf.repeat(leaf, K, axis=0)), self._per_input)

    def _outputs(self, view, z, tap):
        taps = tuple(self.target.taps)
        if tap is not None and tap not in taps:
            taps += (tap,)
        values, taken = view.raw(z, taps, strip=getattr(self.target, "logits", True))
        return self.target.outputs(values, taken), (taken.get(tap) if tap is not None else None)

    def scores(self, view, z, tap=None):
        """``[rows, K]`` scores at ``z`` (and the tapped activations when ``tap`` is given)."""
        if self.target is None:  # class columns of the score vector: a gather
            if tap is None:
                return _target_scores(view(z), self.columns), None
            values, activation = view(z, tap=tap)
            return _target_scores(values, self.columns), activation
        outputs, activation = self._outputs(view, z, tap)
        payload = self.columns if self.payload is None else self.payload
        return self.target.score(outputs, payload), activation

    def probabilities(self, view, z):
        """``[rows, K]`` probabilities at ``z`` (Score-CAM): the softmax over the classes taken at
        the column's class, or the target object's :meth:`probabilities`."""
        if self.target is None:
            return _target_scores(tf.nn.softmax(tf.cast(view(z), tf.float32), axis=-1), self.columns)
        outputs, _ = self._outputs(view, z, None)
        payload = self.columns if self.payload is None else self.payload
        return self.target.probabilities(outputs, payload)


def _differentiate(tape, scores, source, vectorise=False):
    """``[n, K, *source.shape[1:]]``: ∂scores[:, k]/∂source, rows independent.

    K = 1 is one backward pass; K > 1 runs K backward passes over the one forward pass, either
    vectorised (``pfor``) or in a ``tf.while_loop``. A score that does not reach ``source``
    gives zeros. Scores in a 16-bit float (mixed precision) are differentiated in the source's
    dtype so the loop's outputs agree with its inputs.
    """
    zero = tf.UnconnectedGradients.ZERO
    if scores.shape[1] == 1:
        return tape.gradient(scores, source, unconnected_gradients=zero)[:, None]
    if vectorise:
        try:
            return tape.batch_jacobian(scores, source, unconnected_gradients=zero)
        except (ValueError, NotImplementedError, TypeError, tf.errors.OpError):
            pass  # an op pfor cannot vectorise: loop over the classes instead
    return tape.batch_jacobian(scores, source, unconnected_gradients=zero, experimental_use_pfor=False)


def _gradient_at(view, z, selection, tap=None, vectorise=False):
    """Scores ``[rows, K]`` and their gradients w.r.t. ``z`` (or the tapped layer)."""
    with tf.GradientTape(persistent=selection.width > 1, watch_accessed_variables=False) as tape:
        tape.watch(z)
        scores, activation = selection.scores(view, z, tap)
        source = z if tap is None else activation
        if scores.dtype != source.dtype and scores.dtype.name in _SMALL_FLOATS + ("float32",):
            # the per-class loop needs one dtype; mixed precision scores are cast inside the tape
            scores = tf.cast(scores, source.dtype if source.dtype.is_floating else tf.float32)
    gradients = _differentiate(tape, scores, source, vectorise)
    return tf.cast(scores, tf.float32), gradients


def _relu_rule(rule) -> bool:
    """Whether ``rule`` is a rule for ReLU-family ops (``"guided"``, ``"deconv"``, a
    ``ModifiedBackprop``), which the op-level override applies; LRP composites and DeepLIFT
    rewrite linear layers too and go through ``sk.rewrite``."""
    from ..rules import ModifiedBackprop

    return isinstance(rule, (str, ModifiedBackprop))


def _gradient_by_rule(view, z, selection, rule, reports: list):
    """Scores ``[rows, K]`` and their gradients w.r.t. ``z`` with ``rule`` on every ReLU-family
    activation the model runs (the op-level override: ``tf.gradients`` of the graph traced in the
    block). The block's report goes to ``reports``; a ReLU the rule cannot reach, or a model with
    none for it to change, is a ``ValueError``."""
    from ..model.override import relu_rule

    with relu_rule(rule) as report:
        scores, _ = selection.scores(view, z)
        if scores.dtype != z.dtype:
            scores = tf.cast(scores, z.dtype)
    report.check(f"model {view.model.name!r}")
    if not report.ops:
        from ..model.rewrite import nothing_to_rewrite

        raise nothing_to_rewrite(view.model)  # else the map would silently be the plain gradient
    reports.append(report)
    columns = []
    for k in range(selection.width):  # one backward pass per class over the shared forward pass
        (g,) = tf.gradients(scores[:, k], [z], unconnected_gradients=tf.UnconnectedGradients.ZERO)
        columns.append(g)
    return tf.cast(scores, tf.float32), tf.stack(columns, axis=1)


def _accumulator_dtype(dtype):
    return tf.float32 if dtype.name in _SMALL_FLOATS else dtype


# ----------------------------------------------------------------------------------- context
class Context:
    """What a method's function sees: one chunk of inputs and targets, and the primitives.

    Attributes:
        inputs: ``[n, *input]`` the inputs of this chunk (model input dtype).
        targets: int32 ``[n, K]`` the columns to explain (the classes of class targets; what a
            target object resolved to otherwise).
        selection: the :class:`Selection` of these rows (the columns, the target object and its
            payload sliced to this chunk).
        index: int32 ``[n]`` each input's position in the whole request.
        keys: int64 ``[n]`` each input's noise key: the ``input_keys`` given to ``explain`` (a
            hash of an image's path in ``saliency batch``), else its position.
        seed: int64 scalar, the ``seed`` option (0 when the method has none).
        budget: model rows per input and class the method may evaluate at once.
        channel_axis: the channel axis of one input: ``-1`` (channels-last) or ``0``
            (channels-first models, see :func:`channel_axis`).
    """

    def __init__(self, views, inputs, selection, index, keys, seed, budget, vectorise, channel_axis=-1, top=True,
                 reports=None):
        self._views = views  # views(rule) -> ScoreView
        self._reports = [] if reports is None else reports  # what the op-level rules changed
        self.inputs = inputs
        self.selection = selection if isinstance(selection, Selection) else Selection(selection)
        self.targets = self.selection.columns
        self.index = index
        self.keys = keys
        self.seed = seed
        self.budget = max(1, int(budget))
        self.channel_axis = channel_axis
        self._vectorise = vectorise
        self._top = top
        self.memo: dict = {}

    @property
    def shape(self) -> tuple:
        """The shape of one input."""
        return tuple(self.inputs.shape[1:])

    @property
    def image_size(self) -> tuple:
        """``(H, W)`` of an image input, whichever axis holds its channels."""
        return tuple(self.shape[1:3]) if self.channel_axis == 0 else tuple(self.shape[0:2])

    @property
    def num_targets(self) -> int:
        return int(self.targets.shape[1])

    # -- evaluation -------------------------------------------------------------------------
    def _rows(self, points):
        """``points [n, *lead, *input]`` -> rows ``[n·copies, *input]``, their selection (each
        copy keeps its input's columns and payload), lead shape."""
        rank = len(self.shape)
        lead = tuple(points.shape[1 : len(points.shape) - rank])
        copies = int(np.prod(lead)) if lead else 1
        n = self.inputs.shape[0]
        rows = tf.reshape(points, [n * copies, *self.shape])
        return rows, self.selection.repeat(copies), lead

    def gradients(self, points, rule=None, with_scores=False):
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
        if rule is not None and _relu_rule(rule):
            scores, grads = _gradient_by_rule(self._views(None), rows, selection, rule, self._reports)
        else:
            scores, grads = _gradient_at(self._views(rule), rows, selection, vectorise=self._vectorise)
        if self._top and points is self.inputs:
            self.memo.setdefault("scores", scores)  # the clean scores come free
        n, K = self.inputs.shape[0], self.num_targets
        grads = tf.reshape(grads, [n, *lead, K, *self.shape])
        if with_scores:
            return tf.reshape(scores, [n, *lead, K]), grads
        return grads

    def scores(self, points, rule=None):
        """Target scores (float32) at ``points`` ``[n, *lead, *input]`` -> ``[n, *lead, K]``."""
        if self._top and points is self.inputs and "scores" in self.memo:
            return self.memo["scores"]
        rows, selection, lead = self._rows(points)
        scores = tf.cast(selection.scores(self._views(rule), rows)[0], tf.float32)
        if self._top and points is self.inputs:
            self.memo["scores"] = scores
        return tf.reshape(scores, [self.inputs.shape[0], *lead, self.num_targets])

    def probabilities(self, points, rule=None):
        """Target probabilities (float32) at ``points`` ``[n, *lead, *input]`` -> ``[n, *lead, K]``,
        forward only: for class targets the softmax over every class taken at the target's class
        (Score-CAM's weights); for target objects their ``probabilities`` (see each kind)."""
        rows, selection, lead = self._rows(points)
        probabilities = tf.cast(selection.probabilities(self._views(rule), rows), tf.float32)
        return tf.reshape(probabilities, [self.inputs.shape[0], *lead, self.num_targets])

    def values(self, points, rule=None):
        """The whole score vector (float32) at ``points`` ``[n, *lead, *input]`` -> ``[n, *lead, C]``,
        forward only; class targets only (a target object's outputs need not be a vector)."""
        if self.selection.target is not None:
            raise ValueError("ctx.values gives the score vector of class targets; with a target object use "
                             f"ctx.scores or ctx.probabilities; received {self.selection.target!r}.")
        rows, _, lead = self._rows(points)
        values = tf.cast(self._views(rule)(rows), tf.float32)
        return tf.reshape(values, [self.inputs.shape[0], *lead, values.shape[-1]])

    def gradients_per_target(self, points, rule=None):
        """``points [n, K, *input]``, one point per input and target -> ``[n, K, *input]``: row
        ``(b, k)`` is ``∂s_k/∂z`` at ``z = points[b, k]`` only (paths that differ per class,
        Guided IG), one backward pass per row."""
        n, K = self.inputs.shape[0], self.num_targets
        rows = tf.reshape(points, [n * K, *self.shape])
        _, grads = _gradient_at(self._views(rule), rows, self.selection.per_column(), vectorise=self._vectorise)
        return tf.reshape(grads, [n, K, *self.shape])

    def layer(self, path: str, rule=None):
        """``(activations [n, *layer], gradients [n, K, *layer])`` of layer ``path`` at the inputs."""
        with tf.GradientTape(persistent=self.num_targets > 1, watch_accessed_variables=False) as tape:
            tape.watch(self.inputs)  # records the forward pass, so the activations can be sources
            scores, activations = self.selection.scores(self._views(rule), self.inputs, tap=path)
            if scores.dtype != activations.dtype:
                scores = tf.cast(scores, activations.dtype)
        if self._top:
            self.memo.setdefault("scores", tf.cast(scores, tf.float32))
        return activations, _differentiate(tape, scores, activations, self._vectorise)

    # -- running sums ------------------------------------------------------------------------
    def sum(self, count: int, fn):
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

        def block_sums(b):
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
                dtype = _accumulator_dtype(part.dtype)
                mask = tf.reshape(tf.cast(valid, dtype), [1, m] + [1] * (len(part.shape) - 2))
                sums.append(tf.reduce_sum(tf.cast(part, dtype) * mask, axis=1))
            return sums

        # the first block is traced outside the loop: it fixes the shapes of the running sums
        totals = block_sums(0)
        if blocks > 1:
            def body(b, totals):
                return b + 1, [t + s for t, s in zip(totals, block_sums(b))]

            totals = tf.while_loop(lambda b, _: b < blocks, body, (1, totals), parallel_iterations=1)[1]
        return tf.nest.pack_sequence_as(structure[0], totals)

    def at(self, points) -> "Context":
        """This context at other inputs ``points [n, m, *input]`` (rows ``[n·m, ...]``), each
        copy keeping its input's targets (their payload included), index and key; results of a method there are
        ``[n·m, K, ...]`` (reshape to ``[n, m, K, ...]``)."""
        rows, selection, lead = self._rows(points)
        copies = int(np.prod(lead)) if lead else 1
        index = tf.reshape(tf.repeat(self.index[:, None], copies, axis=1), [-1])
        keys = tf.reshape(tf.repeat(self.keys[:, None], copies, axis=1), [-1])
        return Context(self._views, rows, selection, index, keys, self.seed, max(1, self.budget // copies),
                       self._vectorise, self.channel_axis, top=False, reports=self._reports)

    # -- helpers ------------------------------------------------------------------------------
    def normal(self, ids, count: int):
        """Standard normal noise ``[n, m, *input]`` for copies ``ids [m]`` of each input.

        Copy ``s`` of input ``b`` draws from a stateless generator keyed by
        ``(seed, keys[b] · count + s)``: the same numbers whatever the chunking, and wherever
        the input sits when its key is its own (``explain(..., input_keys=)``).
        """
        n, m = self.inputs.shape[0], ids.shape[0]
        counters = self.keys[:, None] * count + tf.cast(ids, tf.int64)[None]
        seeds = tf.stack([tf.fill(tf.shape(counters), self.seed), counters], axis=-1)
        dtype = self.inputs.dtype
        eps = tf.map_fn(
            lambda s: tf.random.stateless_normal(self.shape, seed=s, dtype=dtype),
            tf.reshape(seeds, [-1, 2]),
            fn_output_signature=tf.TensorSpec(self.shape, dtype),
        )
        return tf.reshape(eps, [n, m, *self.shape])

    def resize(self, maps, size):
        """``maps [n, K, h, w]`` upsampled bilinearly to ``[n, K, *size]``."""
        n, k, h, w = maps.shape
        if (h, w) == tuple(size):
            return maps
        flat = tf.reshape(maps, [n * k, h, w, 1])
        flat = tf.image.resize(flat, tuple(size), method="bilinear")
        return tf.reshape(tf.cast(flat, maps.dtype), [n, k, *size])


# ----------------------------------------------------------------------------------- kernels
def build_kernel(compute, options: dict, array_names: tuple, views, layout, shape, dtype, array_specs,
                 vectorise: bool, channel_axis, traced, reports: list, target=None, payload=None):
    """The compiled ``kernel(x, targets, index, keys, seed, payload, *arrays) -> dict`` of one method.

    ``compute(ctx, **options)`` returns attributions ``[n, K, ...]`` or a dict holding them under
    ``"attributions"`` plus per-target extras ``[n, K, ...]`` (``"scores"`` among them when the
    method has the scores at the inputs already); the kernel adds the target scores at the
    inputs when they came free (the method took gradients there). Otherwise it returns none:
    a forward pass of the ``n`` clean inputs in every call would cost more than one batched pass
    over all of them afterwards (:func:`saliency_kit.engine.run` does that, or reuses the scores
    ``"topK"`` targets were ranked by).
    Options named in ``array_names`` arrive as tensors (so a new baseline does not recompile);
    ``seed`` arrives as a tensor too. While it is traced, the reports of the op-level backward
    rules it applies are appended to ``reports`` (:class:`~saliency_kit.model.override.OverrideReport`).

    ``target``: a one-element list holding the target object (``None`` for class columns), read
    when tracing; ``payload``: ``(structure, per_input flags, leaf specs)`` of its payload, whose
    leaves arrive as the tuple argument ``payload`` (``[n, group, ...]`` per column, ``[n, ...]``
    per input): new masks or boxes reuse the compiled kernel.
    """
    n, group = layout.n, layout.group
    views = tf.autograph.experimental.do_not_convert(views)  # cache look-ups, not model code
    target = target or [None]
    structure, per_input, leaf_specs = payload or (None, (), ())

    def kernel(x, targets, index, keys, seed, leaves, *arrays):
        traced()
        del reports[:]  # a retrace reports afresh
        tree = None if structure is None else tf.nest.pack_sequence_as(structure, list(leaves))
        selection = Selection(targets, target[0], tree, per_input)
        ctx = Context(views, x, selection, index, keys, seed, layout.budget, vectorise, channel_axis, reports=reports)
        values = dict(options)
        values.update(zip(array_names, arrays))
        if "seed" in values:
            values["seed"] = seed
        out = compute(ctx, **values)
        out = dict(out) if isinstance(out, dict) else {"attributions": out}
        if "scores" not in out and "scores" in ctx.memo:
            out["scores"] = ctx.memo["scores"]
        return {name: tf.cast(value, tf.float32) for name, value in out.items()}

    signature = [
        tf.TensorSpec([n, *shape], dtype),
        tf.TensorSpec([n, group], tf.int32),
        tf.TensorSpec([n], tf.int32),
        tf.TensorSpec([n], tf.int64),
        tf.TensorSpec([], tf.int64),
        tuple(leaf_specs),
        *array_specs,
    ]
    return tf.function(kernel, input_signature=signature)


def build_values_kernel(views, n, shape, dtype, traced, raw=False):
    """The compiled ``kernel(x [n, ...]) -> [n, C]``: the whole score vector, forward only
    (``raw=True``: the model's output structure, float32 leaves ``[n, ...]``)."""
    views = tf.autograph.experimental.do_not_convert(views)

    def kernel(x):
        traced()
        view = views()
        if raw:  # "raw": the outputs; "unstripped": the outputs without removing a final squash
            return tf.nest.map_structure(lambda t: tf.cast(t, tf.float32), view.raw(x, strip=raw != "unstripped")[0])
        return tf.cast(view(x), tf.float32)

    return tf.function(kernel, input_signature=[tf.TensorSpec([n, *shape], dtype)])


def array_spec(value: np.ndarray):
    return tf.TensorSpec(value.shape, tf.as_dtype(value.dtype))


def to_numpy(tensor) -> np.ndarray:
    return np.asarray(tensor)
